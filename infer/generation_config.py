"""The sampling defaults a checkpoint ships in ``generation_config.json`` (read, not validated:
``SamplingParams.from_generation_config`` checks them and names the file on a bad value)."""

from __future__ import annotations

from pathlib import Path

from models.config import read_json_object

SAMPLING_KEYS = ("temperature", "top_k", "top_p", "min_p", "presence_penalty")


def read_sampling_defaults(path: Path) -> dict:
    """The ``SAMPLING_KEYS`` that ``path`` sets (not null), with ``do_sample: false`` as
    temperature 0; ``{}`` when there is no such file.

    Raises:
        ValueError: the file is not valid JSON or not a JSON object, or its ``do_sample`` is
            neither true, false nor null (a string ``"false"`` would otherwise read as sampling
            on); the message names the file.
    """
    if not path.is_file():
        return {}
    gen = read_json_object(path)
    values = {k: gen[k] for k in SAMPLING_KEYS if gen.get(k) is not None}
    if not isinstance(gen.get("do_sample", False), bool | None):
        raise ValueError(f"{path}: do_sample must be true or false, got {gen['do_sample']!r}")
    if gen.get("do_sample") is False:
        values["temperature"] = 0.0
    return values
