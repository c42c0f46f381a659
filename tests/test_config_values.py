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


@pytest.mark.parametrize("field,value", [
    ("architectures", "Qwen3ForCausalLM"), ("architectures", [1]), ("architectures", 5),
    ("layer_types", "sliding_attention"), ("layer_types", [None])])
def test_a_list_of_names_that_is_not_one_is_refused(field, value):
    """A string was iterated letter by letter ("unsupported architecture Q, w, e, ..."), a
    number raised a raw TypeError, and a layer_types string was ignored."""
    assert "must be a list of strings (or null)" in _refused({field: value}, field)


# ---------------------------------------------------------------------------- messages


def test_the_hidden_act_message_names_both_accepted_spellings():
    assert 'hidden_act must be "silu" (or "swish", the same SiLU;' in _refused(
        {"hidden_act": "gelu"}, "hidden_act")
    assert Qwen3Config.from_dict(_qwen3_dict(hidden_act="swish")).hidden_act == "swish"


def test_max_window_layers_0_loads_as_its_message_says():
    """0 is valid (every layer slides): the message says ``an integer >= 0``, not positive."""
    c = Qwen3Config.from_dict(_qwen3_dict(use_sliding_window=True, max_window_layers=0,
                                          sliding_window=512))
    assert c.sliding_window == 512


# ---------------------------------------------------------------------------- YaRN rope_scaling

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("change,field,rule", [
    ({"factor": INF}, "factor", "a finite number >= 1"),
    ({"factor": NAN}, "factor", "a finite number >= 1"),
    ({"factor": "abc"}, "factor", "a finite number >= 1"),
    ({"factor": "4.0"}, "factor", "a finite number >= 1"),
    ({"factor": None}, "factor", "a finite number >= 1"),
    ({"factor": True}, "factor", "a finite number >= 1"),  # was read as 1.0
    ({"factor": 0.5}, "factor", "a finite number >= 1"),
    ({"factor": 1e300}, "factor", "x original_max_position_embeddings must be at most 16,777,216"),
    ({"factor": 513.0}, "factor", "x original_max_position_embeddings must be at most"),
    ({"original_max_position_embeddings": INF}, "original_max_position_embeddings",
     "a positive integer"),
    ({"original_max_position_embeddings": "x"}, "original_max_position_embeddings",
     "a positive integer"),
    ({"original_max_position_embeddings": 0}, "original_max_position_embeddings",
     "a positive integer"),
    ({"original_max_position_embeddings": 4096.5}, "original_max_position_embeddings",
     "a positive integer"),
    ({"beta_fast": NAN}, "beta_fast", "a positive finite number"),
    ({"beta_fast": -5, "beta_slow": 100}, "beta_fast", "a positive finite number"),  # math error
    ({"beta_slow": 0}, "beta_slow", "a positive finite number"),
    ({"beta_slow": "1"}, "beta_slow", "a positive finite number"),
    ({"beta_fast": 5, "beta_slow": 100}, "beta_fast", "must be >= beta_slow"),
    ({"attention_factor": NAN}, "attention_factor", "a number in (0, 100]"),  # NaN logits
    ({"attention_factor": -1}, "attention_factor", "a number in (0, 100]"),
    ({"attention_factor": 0}, "attention_factor", "a number in (0, 100]"),
    ({"attention_factor": 1e30}, "attention_factor", "a number in (0, 100]"),
    ({"mscale": -3, "mscale_all_dim": 1}, "mscale", "a finite number >= 0"),
    ({"mscale": 1, "mscale_all_dim": INF}, "mscale_all_dim", "a finite number >= 0"),
    ({"mscale": 1e300, "mscale_all_dim": 1e-300}, "mscale", "an attention factor of at most 100"),
    ({"truncate": "no"}, "truncate", "true or false"),  # was read as true
    ({"truncate": None}, "truncate", "true or false"),  # transformers: false; not guessed here
    ({"truncate": 0}, "truncate", "true or false")])
def test_yarn_values_out_of_range_are_refused_naming_the_field(change, field, rule):
    msg = _refused({"rope_scaling": {**YARN, **change}}, f"rope_scaling.{field}")
    assert rule in msg


def test_yarn_from_rope_parameters_names_that_field():
    d = {k: v for k, v in _qwen3_dict().items() if k != "rope_theta"}
    with pytest.raises(ValueError, match=r"rope_parameters\.beta_fast must be >= beta_slow"):
        Qwen3Config.from_dict({**d, "rope_parameters": {"rope_theta": 1e6, **YARN,
                                                        "beta_fast": 1, "beta_slow": 2}})


def test_yarn_needs_a_rope_theta_other_than_1():
    """The ramp divides by ln(rope_theta): ZeroDivisionError when the model was built."""
    assert "rope_theta must not be 1" in _refused({"rope_theta": 1, "rope_scaling": YARN},
                                                  "rope_theta")
    assert Qwen3Config.from_dict(_qwen3_dict(rope_theta=1)).rope_theta == 1.0  # no YaRN: runs


def test_the_yarn_texts_python_json_reads_are_refused():
    text = json.dumps(_qwen3_dict())[:-1]
    for scaling, field in [('"factor": Infinity', "factor"), ('"factor": NaN', "factor"),
                           ('"factor": 4, "original_max_position_embeddings": Infinity',
                            "original_max_position_embeddings"),
                           ('"factor": 4, "beta_fast": NaN', "beta_fast")]:
        rope = ('"rope_scaling": {"rope_type": "yarn", "original_max_position_embeddings": 32768, '
                f"{scaling}}}")
        with pytest.raises(ValueError, match=f"config field rope_scaling.{field} must be"):
            _from_text(f"{text}, {rope}}}")


@pytest.mark.parametrize("change,scale", [
    ({}, 1.1386294361), ({"beta_fast": None, "beta_slow": None}, 1.1386294361),
    ({"beta_fast": 4, "beta_slow": 4}, 1.1386294361),  # equal: transformers' 0.001 guard
    ({"attention_factor": None, "mscale": 0, "mscale_all_dim": 1}, 1.1386294361),
    ({"attention_factor": 100}, 100.0), ({"factor": 1, "truncate": False}, 1.0),
    ({"factor": 512}, 1.6238324625), ({"mscale": 1.0, "mscale_all_dim": 0.5}, 1.0648216254)])
def test_yarn_values_in_range_load_and_give_finite_frequencies(change, scale):
    from models.rope import rope_parameters

    c = Qwen3Config.from_dict(_qwen3_dict(rope_scaling={**YARN, **change}))
    inv_freq, got = rope_parameters(c.head_dim, c.rope_theta, c.rope_scaling)
    assert got == pytest.approx(scale) and inv_freq.isfinite().all()


def test_yarn_scaling_built_directly_is_checked_too():
    from models.config import YarnScaling

    assert YarnScaling(4, 32768) == YarnScaling(4.0, 32768)  # the source is not compared
    for bad in ({"factor": float("inf")}, {"beta_slow": -1.0}, {"truncate": "yes"}):
        with pytest.raises(ValueError, match=f"rope_scaling.{next(iter(bad))}"):
            YarnScaling(**{"factor": 4.0, "original_max_position_embeddings": 32768, **bad})


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
    ('"sliding_window": true', "sliding_window"),
    ('"rope_scaling": {"rope_type": "yarn", "factor": Infinity, '
     '"original_max_position_embeddings": 32768}', "rope_scaling.factor"),
    ('"rope_scaling": {"rope_type": "yarn", "factor": 4, "beta_fast": -5, "beta_slow": 100, '
     '"original_max_position_embeddings": 32768}', "rope_scaling.beta_fast")])
@pytest.mark.usefixtures("cli_tokenizer_once")
def test_cli_refuses_an_odd_config_value_in_one_line_with_exit_2(folder, extra, field):
    assert_one_line_error(invoke("generate", _with(folder, extra), "hi", *FAST), 2,
                          f"config.json has an invalid value: config field {field} must be")


# ---------------------------------------------------------------------------- the files


def test_a_utf8_bom_is_skipped_and_other_unreadable_json_is_one_message(tmp_path):
    from models.config_values import read_json_object

    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(_qwen3_dict()).encode())
    assert Qwen3Config.from_json(path).hidden_size == 64
    for text in ["[" * 100_000 + "]" * 100_000, '{"vocab_size": ' + "1" * 5000 + "}"]:
        path.write_text(text)  # too deep for Python's json; too many digits for int()
        with pytest.raises(ValueError, match=r"^cannot read .*config\.json: not valid JSON"):
            read_json_object(path)


@pytest.mark.usefixtures("cli_tokenizer_once")
def test_a_checkpoint_whose_json_files_start_with_a_bom_runs(folder):
    """config.json, generation_config.json (its sampling defaults and eos ids),
    tokenizer_config.json and tokenizer.json saved with a UTF-8 BOM (some Windows editors)."""
    for name in ("config.json", "generation_config.json", "tokenizer_config.json",
                 "tokenizer.json"):
        path = folder / name
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    result = invoke("generate", folder, "hi", *FAST)
    assert result.exit_code == 0, result.output

