"""infer: long-context Qwen3 inference on one GPU.

Public API: Engine, EngineConfig, SamplingParams (and Session, GenerationStats, parse_ctx).

The names are imported on first use (PEP 562 ``__getattr__``): importing ``infer.ui`` or
``infer.summarize`` for the command line's ``--help`` must not pull in torch and triton (~1 s).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infer.config import EngineConfig, parse_ctx
    from infer.engine import Engine, GenerationStats, Session
    from infer.sampling_params import SamplingParams

__all__ = ["Engine", "EngineConfig", "GenerationStats", "SamplingParams", "Session", "parse_ctx"]

_HOMES = {"EngineConfig": "infer.config", "SamplingParams": "infer.sampling_params",
          "parse_ctx": "infer.config", "Engine": "infer.engine",
          "GenerationStats": "infer.engine", "Session": "infer.engine"}


def __getattr__(name: str):
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'infer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
