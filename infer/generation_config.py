"""The sampling defaults a checkpoint ships in ``generation_config.json`` (read, not validated:
``SamplingParams.from_generation_config`` checks them and names the file on a bad value)."""

from __future__ import annotations

import json
from pathlib import Path

SAMPLING_KEYS = ("temperature", "top_k", "top_p", "min_p", "presence_penalty")


def read_sampling_defaults(path: Path) -> dict:
    """The ``SAMPLING_KEYS`` that ``path`` sets (not null), with ``do_sample: false`` as
    temperature 0; ``{}`` when there is no such file.

    Raises:
        ValueError: the file is not valid JSON or not a JSON object (the message names it).
    """
    if not path.is_file():
        return {}
    try:
        gen = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read {path}: not valid JSON ({e})") from None
    if not isinstance(gen, dict):
        raise ValueError(f"cannot read {path}: expected a JSON object, got {type(gen).__name__}")
    values = {k: gen[k] for k in SAMPLING_KEYS if gen.get(k) is not None}
    if gen.get("do_sample") is False:
        values["temperature"] = 0.0
    return values
