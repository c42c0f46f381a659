"""infer/generation_config.py: the sampling defaults of a checkpoint's generation_config.json as
``SamplingParams.from_generation_config`` reads them (vLLM's ``top_k: -1``), and the settings
there that infer does not apply (``unapplied_settings``)."""

from __future__ import annotations

import json
import re

import pytest

from infer.generation_config import read_sampling_defaults, unapplied_settings
from infer.sampling_params import SamplingParams


def _write(folder, **fields):
    path = folder / "generation_config.json"
    path.write_text(json.dumps(fields))
    return path


@pytest.mark.parametrize("top_k", [-1, -50, 0])
def test_a_negative_top_k_in_the_file_is_no_top_k_filter(tmp_path, top_k):
    """vLLM's "disabled" (-1) reads as 0, off: greedy and sampled replies both run."""
    _write(tmp_path, temperature=0.6, top_k=top_k, top_p=0.95)
    assert read_sampling_defaults(tmp_path / "generation_config.json")["top_k"] == 0
    assert SamplingParams.from_generation_config(tmp_path).top_k == 0
    greedy = SamplingParams.from_generation_config(tmp_path, temperature=0.0)
    assert greedy.greedy and greedy.top_k == 0


@pytest.mark.parametrize("top_k", [-1.0, "-1", True, 2.5])
def test_a_top_k_that_is_not_an_integer_is_still_refused_naming_the_file(tmp_path, top_k):
    """The message says the file's rule (any integer; <= 0 is no filter), not the caller's
    ``>= 0``, which would contradict the -1 it accepts."""
    _write(tmp_path, top_k=top_k)
    with pytest.raises(ValueError, match=r"generation_config\.json: top_k must be an integer "
                                         r"\(<= 0: no filter\), got " + re.escape(repr(top_k))):
        SamplingParams.from_generation_config(tmp_path)


def test_a_negative_top_k_from_the_caller_is_refused():
    with pytest.raises(ValueError, match=r"^top_k must be an integer >= 0 \(0 = off\), got -1"):
        SamplingParams(top_k=-1)


def test_unapplied_settings_are_the_penalties_that_would_change_a_reply(tmp_path):
    """repetition_penalty other than 1 and frequency_penalty other than 0; presence_penalty is
    applied (not listed); neutral, null or absent values are not listed."""
    path = _write(tmp_path, repetition_penalty=1.05, frequency_penalty=0.5, presence_penalty=1.5)
    assert unapplied_settings(path) == {"repetition_penalty": 1.05, "frequency_penalty": 0.5}
    path = _write(tmp_path, repetition_penalty=1.0, frequency_penalty=0, temperature=0.6)
    assert unapplied_settings(path) == {}
    assert unapplied_settings(_write(tmp_path, repetition_penalty=None)) == {}
    assert unapplied_settings(tmp_path / "absent.json") == {}
