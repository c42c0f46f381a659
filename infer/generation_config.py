"""The sampling defaults a checkpoint ships in ``generation_config.json`` (read, not validated:
``SamplingParams.from_generation_config`` checks them, ``do_sample`` included, and names the file
on a bad value), and the settings there that infer does not apply (``unapplied_settings``: the
CLI notes them)."""

from __future__ import annotations

from pathlib import Path

from models.config_values import optional_json_object

SAMPLING_KEYS = ("temperature", "top_k", "top_p", "min_p", "presence_penalty")
# settings infer does not apply -> the value that changes nothing (HF transformers, vLLM)
UNAPPLIED_KEYS = {"repetition_penalty": 1.0, "frequency_penalty": 0.0}


def read_sampling_defaults(path: Path) -> dict:
    """The ``SAMPLING_KEYS`` that ``path`` sets (not null), with ``do_sample: false`` as
    temperature 0, an integer ``top_k`` <= 0 (vLLM writes -1) as 0 (no top-k filter), and
    ``do_sample`` itself when it is neither true, false nor null (a string ``"false"`` must not
    read as sampling on: the caller refuses it); ``{}`` when there is no such file.

    Raises:
        ValueError: the file is not valid JSON or not a JSON object, or a folder or a broken
            link stands in its place (the message names it).
    """
    gen = optional_json_object(path)
    values = {k: gen[k] for k in SAMPLING_KEYS if gen.get(k) is not None}
    if not isinstance(gen.get("do_sample"), bool | None):
        values["do_sample"] = gen["do_sample"]
    if gen.get("do_sample") is False:
        values["temperature"] = 0.0
    top_k = values.get("top_k")
    if isinstance(top_k, int) and not isinstance(top_k, bool) and top_k < 0:
        values["top_k"] = 0  # "disabled", as 0 is
    return values


def unapplied_settings(path: Path) -> dict:
    """The ``UNAPPLIED_KEYS`` that ``path`` sets to a value that would change a reply
    (``repetition_penalty`` other than 1, ``frequency_penalty`` other than 0), which infer
    ignores; ``{}`` when there is no such file.

    Raises:
        ValueError: the file is not valid JSON or not a JSON object, or a folder or a broken
            link stands in its place (the message names it).
    """
    gen = optional_json_object(path)
    return {k: gen[k] for k, neutral in UNAPPLIED_KEYS.items()
            if gen.get(k) is not None and gen[k] != neutral}
