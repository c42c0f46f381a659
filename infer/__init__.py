"""infer: long-context Qwen3 inference on one GPU.

Public API: Engine, EngineConfig, SamplingParams (and Session, GenerationStats, parse_ctx).
"""

from infer.config import EngineConfig, SamplingParams, parse_ctx
from infer.engine import Engine, GenerationStats, Session

__all__ = ["Engine", "EngineConfig", "GenerationStats", "SamplingParams", "Session", "parse_ctx"]
