"""Odd values in a checkpoint's config.json (a new user's trial): what Python's json reads besides
numbers (``Infinity``, ``NaN``, ``1e400``, ``true`` as an int), fractions in integer fields, YaRN
rope_scaling out of range. Each is refused at load with ``config.json has an invalid value: ...``
naming the field (exit 2 through the CLI), never a raw Python message (``cannot convert float
infinity to integer``, ``math domain error``) or a silently wrong model. models/config_values.py,
models/config.py and models/yarn.py."""

from __future__ import annotations

import json
import shutil

import pytest
from cli_helpers import FAST, assert_one_line_error, invoke
from conftest import CONFIGS_DIR

from models.config import Qwen3Config


def _qwen3_dict(**extra) -> dict:
    return {"architectures": ["Qwen3ForCausalLM"], "vocab_size": 512, "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "rope_theta": 1000000,
            "rms_norm_eps": 1e-6, "tie_word_embeddings": True, **extra}


def _from_text(text: str) -> Qwen3Config:
    """Qwen3Config of a config.json's text, parsed as the loader parses it (Python's json)."""
    return Qwen3Config.from_dict(json.loads(text))


def _refused(extra: dict, field: str) -> str:
    """The one-line message refusing ``_qwen3_dict(**extra)``; it names ``field``."""
    with pytest.raises(ValueError) as info:
        Qwen3Config.from_dict(_qwen3_dict(**extra))
    msg = str(info.value)
    assert msg.startswith("config.json has an invalid value: ") and field in msg, msg
    assert "\n" not in msg and "convert" not in msg and "domain" not in msg, msg
    return msg


SLIDES = {"use_sliding_window": True, "max_window_layers": 0}  # the window is used

# ---------------------------------------------------------------------------- integers


@pytest.mark.parametrize("field,value", [
    ("max_position_embeddings", float("inf")), ("hidden_size", float("inf")),
    ("hidden_size", float("nan")), ("vocab_size", float("-inf")), ("head_dim", True),
    ("num_hidden_layers", False), ("hidden_size", 64.9), ("intermediate_size", 127.5),
    ("num_key_value_heads", "2.0"), ("vocab_size", 10**400), ("hidden_size", 2**31),
    ("max_position_embeddings", 2**24 + 1), ("max_position_embeddings", 1e12)])
def test_an_integer_field_refuses_non_finite_bool_fraction_and_huge(field, value):
    _refused({field: value}, field)


@pytest.mark.parametrize("extra", [
    {**SLIDES, "sliding_window": float("inf")}, {**SLIDES, "sliding_window": True},
    {**SLIDES, "sliding_window": 100.7}, {**SLIDES, "sliding_window": 0},
    {"sliding_window": float("inf")},  # checked though no layer slides: a bad value is a bad file
    {"sliding_window": "x"}])
def test_sliding_window_must_be_a_positive_integer(extra):
    assert "sliding_window must be a positive integer, got" in _refused(extra, "sliding_window")


@pytest.mark.parametrize("value", [-1, 1.5, True, "x", float("nan")])
def test_max_window_layers_is_an_integer_from_zero(value):
    msg = _refused({"use_sliding_window": True, "max_window_layers": value}, "max_window_layers")
    assert "max_window_layers must be an integer >= 0" in msg


def test_the_texts_python_json_reads_as_numbers_are_refused_naming_the_field():
    text = json.dumps(_qwen3_dict())[:-1]
    for extra, field in [('"max_position_embeddings": Infinity', "max_position_embeddings"),
                         ('"hidden_size": 1e400', "hidden_size"),
                         ('"rms_norm_eps": NaN', "rms_norm_eps"),
                         ('"rms_norm_eps": 1' + "0" * 400, "rms_norm_eps")]:
        with pytest.raises(ValueError, match=f"invalid value: config field {field} must be"):
            _from_text(f"{text}, {extra}}}")


def test_the_message_shows_what_the_file_says_in_one_short_line():
    assert _refused({"hidden_size": float("inf")}, "hidden_size").endswith("got Infinity")
    assert _refused({"hidden_size": float("nan")}, "hidden_size").endswith("got NaN")
    assert len(_refused({"vocab_size": 10**400}, "vocab_size")) < 140
    assert "(2**24: RoPE positions are float32" in _refused(
        {"max_position_embeddings": 2**25}, "max_position_embeddings")


@pytest.mark.parametrize("extra,field,want", [
    ({"hidden_size": 64.0}, "hidden_size", 64), ({"hidden_size": "64"}, "hidden_size", 64),
    ({"max_position_embeddings": 2**24}, "max_position_embeddings", 2**24),
    ({**SLIDES, "sliding_window": 512.0}, "sliding_window", 512),
    ({"use_sliding_window": True, "max_window_layers": 0, "sliding_window": 512},
     "sliding_window", 512),
    ({"use_sliding_window": None, "sliding_window": 4096}, "sliding_window", None)])
def test_integral_values_still_load(extra, field, want):
    """An integral float (4096.0) or a digit string, as config.json has always been read."""
    got = getattr(Qwen3Config.from_dict(_qwen3_dict(**extra)), field)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS_DIR.iterdir()))
def test_every_published_qwen3_config_still_loads(name):
    assert Qwen3Config.from_json(CONFIGS_DIR / name).sliding_window is None


# ---------------------------------------------------------------------------- through the CLI


@pytest.fixture
def folder(tiny_ckpt, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt, dst)
    return dst


def _with(folder, extra: str):
    """``folder``'s config.json with the JSON text ``extra`` ("key": value) added last."""
    path = folder / "config.json"
    path.write_text(path.read_text().rstrip().removesuffix("}") + f", {extra}}}")
    return folder


@pytest.mark.parametrize("extra,field", [
    ('"max_position_embeddings": Infinity', "max_position_embeddings"),
    ('"hidden_size": 1e400', "hidden_size"),
    ('"use_sliding_window": true, "sliding_window": Infinity', "sliding_window"),
    ('"sliding_window": true', "sliding_window")])
@pytest.mark.usefixtures("cli_tokenizer_once")
def test_cli_refuses_an_odd_config_value_in_one_line_with_exit_2(folder, extra, field):
    assert_one_line_error(invoke("generate", _with(folder, extra), "hi", *FAST), 2,
                          f"config.json has an invalid value: config field {field} must be")
