"""infer/config.py and infer/sampling_params.py: parse_ctx, EngineConfig and SamplingParams
validation, generation_config.json defaults."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import CONFIGS_DIR

from infer.config import EngineConfig, parse_ctx
from infer.errors import OptionError
from infer.sampling_params import SamplingParams


@pytest.mark.parametrize("text,want", [("32k", 32768), ("32K", 32768), ("32768", 32768),
                                       ("128k", 131072), (" 4k ", 4096), (100, 100)])
def test_parse_ctx(text, want):
    assert parse_ctx(text) == want


@pytest.mark.parametrize("text", ["", "k", "32m", "-5", "0", "3.5k", "32 kb", "0k", "4 k",
                                  "\u0664\u0660\u0669\u0666"])  # Arabic-Indic 4096
def test_parse_ctx_errors(text):
    with pytest.raises(OptionError, match="^ctx must be"):
        parse_ctx(text)


@pytest.mark.parametrize("text", ["0", "0k", "-5", " -4k"])
def test_parse_ctx_zero_or_negative_counts_say_at_least_one_token(text):
    with pytest.raises(OptionError, match="^ctx must be at least 1 token"):
        parse_ctx(text)


def test_engine_config_defaults_on_cpu():
    c = EngineConfig("m", device="cpu")
    assert c.torch_device == torch.device("cpu")
    assert c.torch_dtype == torch.float32 and c.chunk == 512
    assert c.num_pages == 32768 // 64 + 1
    c = EngineConfig("m", device="cpu", dtype="bfloat16", prefill_chunk=7, ctx=100, page_size=16)
    assert c.torch_dtype == torch.bfloat16 and c.chunk == 7 and c.num_pages == 7 + 1


def test_engine_config_cuda_defaults():
    c = EngineConfig("m", device="cuda")
    assert c.torch_dtype == torch.bfloat16 and c.chunk == 2048


@pytest.mark.parametrize("kw,match", [
    ({"ctx": 0}, "ctx"), ({"kv_cache": "FP8"}, "kv_cache .* 'FP8'"), ({"page_size": 48}, "page"),
    ({"dtype": "float64"}, "dtype"), ({"prefill_chunk": 0}, "prefill_chunk"),
    ({"attention": "flash"}, "attention"), ({"device": "tpu"}, "device"),
    ({"device": "nonsense:x"}, "device")])
def test_engine_config_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        EngineConfig("m", **kw)


@pytest.mark.parametrize("text,want", [("CPU", "cpu"), ("Cuda", "cuda"), ("CUDA:0", "cuda:0"),
                                       (" cpu ", "cpu")])
def test_the_device_is_read_in_any_case(text, want):
    assert EngineConfig("m", device=text).torch_device == torch.device(want)


@pytest.mark.parametrize("field,value,lower", [("kv_cache", "INT8", "int8"),
                                               ("attention", "Triton", "triton"),
                                               ("dtype", "BFloat16", "bfloat16")])
def test_an_upper_case_choice_is_refused_naming_the_lower_case(field, value, lower):
    # frozen: no normalizing write (STYLE), and "INT8" kept would read as bf16 (== "int8" tests)
    with pytest.raises(OptionError, match=f"^{field} .*got '{value}' \\(lower case: '{lower}'\\)$"):
        EngineConfig("m", **{field: value})
    with pytest.raises(OptionError, match="got 'nope'$"):
        EngineConfig("m", **{field: "nope"})


@pytest.mark.parametrize("kw,match", [
    ({"temperature": -0.1}, "temperature"), ({"temperature": float("nan")}, "temperature"),
    ({"temperature": 100.5}, "temperature must be a number from 0 to 100"),
    ({"temperature": 4e38}, "temperature"), ({"temperature": float("inf")}, "temperature"),
    ({"top_k": -1}, "top_k"), ({"top_k": 2.5}, "top_k"), ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"), ({"min_p": -0.1}, "min_p"), ({"min_p": 1.1}, "min_p"),
    ({"presence_penalty": 3.0}, "presence_penalty"), ({"seed": -1}, "seed"),
    ({"max_new_tokens": 0}, "max_new_tokens")])
def test_sampling_params_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kw)


def test_sampling_params_edges_are_valid():
    p = SamplingParams(temperature=0, top_k=10**9, top_p=1e-9, min_p=1.0, presence_penalty=-2)
    assert p.greedy
    assert p.replace(top_k=None, seed=3) == SamplingParams(
        temperature=0, top_k=10**9, top_p=1e-9, min_p=1.0, presence_penalty=-2, seed=3)


def test_temperatures_below_the_float32_useful_range_are_greedy():
    """Dividing float32 logits by 1e-40 overflows (garbage tokens): below 1e-5 is argmax."""
    assert SamplingParams(temperature=1e-40).greedy and SamplingParams(temperature=9e-6).greedy
    assert not SamplingParams(temperature=1e-5).greedy
    assert not SamplingParams(temperature=100).greedy


def test_generation_config_temperature_out_of_range(tmp_path):
    """A tiny value in the file is greedy, as from the flag; a huge one is refused naming the
    file (as any other bad value there), not sampled into garbage."""
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 1e-40}))
    assert SamplingParams.from_generation_config(tmp_path).greedy
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 1e39}))
    with pytest.raises(ValueError, match=r"generation_config\.json: temperature must be a number "
                                         r"from 0 to 100"):
        SamplingParams.from_generation_config(tmp_path)
    (tmp_path / "generation_config.json").write_text("[1]")
    with pytest.raises(ValueError, match=r"generation_config\.json: expected a JSON object"):
        SamplingParams.from_generation_config(tmp_path)


@pytest.mark.parametrize("field", ["temperature", "top_k", "top_p", "min_p", "presence_penalty",
                                   "seed", "max_new_tokens"])
def test_json_booleans_are_not_numbers(field, tmp_path):
    """JSON's true/false are Python ints: ``{"top_k": true}`` would reach torch.topk."""
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: True})
    (tmp_path / "generation_config.json").write_text(json.dumps({field: True}))
    if field in ("seed", "max_new_tokens"):
        return  # not read from the file
    with pytest.raises(ValueError, match=rf"generation_config\.json: {field} must"):
        SamplingParams.from_generation_config(tmp_path)


@pytest.mark.parametrize("value", ["false", 0, 1, [False]])
def test_generation_config_do_sample_must_be_a_boolean(tmp_path, value):
    """A string "false" (or a number) is not read as sampling on: an error naming the file,
    unless the temperature is given; true, false and null are read (false: greedy)."""
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": value,
                                                                 "temperature": 0.6}))
    with pytest.raises(ValueError, match=r"generation_config\.json: do_sample must be true or "
                                         r"false, got"):
        SamplingParams.from_generation_config(tmp_path)
    # a flag that replaces what it decides (the temperature) makes it no error
    assert SamplingParams.from_generation_config(tmp_path, temperature=0.7).temperature == 0.7
    for ok, greedy in ((True, False), (False, True), (None, False)):
        (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": ok,
                                                                     "temperature": 0.6}))
        assert SamplingParams.from_generation_config(tmp_path).greedy is greedy


def test_a_bad_value_in_generation_config_that_a_flag_replaces_is_not_an_error(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": -1,
                                                                 "top_k": 7}))
    p = SamplingParams.from_generation_config(tmp_path, temperature=0.5)
    assert p.temperature == 0.5 and p.top_k == 7
    with pytest.raises(ValueError, match=r"generation_config\.json: temperature must be"):
        SamplingParams.from_generation_config(tmp_path, top_k=3)  # not the bad one


def test_from_generation_config(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95,
         "eos_token_id": [151645, 151643]}))
    p = SamplingParams.from_generation_config(tmp_path)
    assert (p.temperature, p.top_k, p.top_p, p.min_p) == (0.6, 20, 0.95, 0.0)
    p = SamplingParams.from_generation_config(tmp_path, temperature=0.0, top_k=None, seed=5,
                                              max_new_tokens=9)
    assert (p.temperature, p.top_k, p.seed, p.max_new_tokens) == (0.0, 20, 5, 9)
    with pytest.raises(ValueError, match="unknown sampling option"):
        SamplingParams.from_generation_config(tmp_path, temprature=1.0)
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": False}))
    assert SamplingParams.from_generation_config(tmp_path).greedy
    (tmp_path / "generation_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        SamplingParams.from_generation_config(tmp_path)
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": "hot"}))
    with pytest.raises(ValueError, match=r"generation_config\.json: temperature must be"):
        SamplingParams.from_generation_config(tmp_path)
    with pytest.raises(ValueError, match="^top_p must be"):  # an override's error names no file
        SamplingParams.from_generation_config(tmp_path / "absent", top_p=2.0)


def test_from_generation_config_real_qwen3_and_missing(tmp_path):
    from conftest import CONFIGS_DIR

    p = SamplingParams.from_generation_config(CONFIGS_DIR / "Qwen3-8B")
    assert (p.temperature, p.top_k, p.top_p) == (0.6, 20, 0.95)
    assert SamplingParams.from_generation_config(tmp_path) == SamplingParams()


def test_seed_range_is_what_torch_accepts():
    from infer.sampling import make_generator
    from infer.sampling_params import MAX_SEED

    make_generator(SamplingParams(seed=MAX_SEED).seed, "cpu")  # the largest seed works
    with pytest.raises(ValueError, match=r"seed must be an integer from 0 to \d+"):
        SamplingParams(seed=MAX_SEED + 1)
    with pytest.raises(ValueError, match="seed"):
        SamplingParams().replace(seed=99999999999999999999999)


def test_unavailable_cuda_device_is_named(monkeypatch):
    from infer.config import check_device_available

    check_device_available(torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="device cuda:1 requested but no CUDA GPU"):
        check_device_available(torch.device("cuda:1"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    check_device_available(torch.device("cuda:0"))
    check_device_available(torch.device("cuda"))
    with pytest.raises(ValueError, match=r"device cuda:1 requested but only 1 CUDA GPU"):
        check_device_available(torch.device("cuda:1"))


# ---------------------------------------------------------------------------- models/config.py

def _qwen3_dict() -> dict:
    return {"architectures": ["Qwen3ForCausalLM"], "vocab_size": 512, "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "rope_theta": 1000000,
            "rms_norm_eps": 1e-6, "tie_word_embeddings": True}


@pytest.mark.parametrize("field,value", [
    ("rope_theta", -5), ("rope_theta", 0), ("rope_theta", float("nan")),
    ("rope_theta", float("inf")), ("rope_theta", "1e6"), ("rope_theta", True),
    ("rope_theta", None), ("rms_norm_eps", 0), ("rms_norm_eps", -1e-6), ("rms_norm_eps", "x"),
    ("tie_word_embeddings", "no"), ("tie_word_embeddings", 1), ("tie_word_embeddings", None),
    ("hidden_size", "abc"), ("vocab_size", None), ("head_dim", "x"), ("num_attention_heads", 0),
    ("num_key_value_heads", [2])])
def test_qwen3_config_invalid_field_is_a_value_error_naming_it(field, value):
    from models.config import Qwen3Config

    with pytest.raises(ValueError, match=field):
        Qwen3Config.from_dict({**_qwen3_dict(), field: value})


def test_qwen3_config_rope_theta_from_rope_parameters_is_checked_too():
    from models.config import Qwen3Config

    d = {k: v for k, v in _qwen3_dict().items() if k != "rope_theta"}
    with pytest.raises(ValueError, match="rope_theta"):
        Qwen3Config.from_dict({**d, "rope_parameters": {"rope_theta": -1, "rope_type": "default"}})


def test_qwen3_config_valid_values_still_read():
    from models.config import Qwen3Config

    c = Qwen3Config.from_dict(_qwen3_dict())
    assert c.rope_theta == 1e6 and isinstance(c.rope_theta, float) and c.tie_word_embeddings is True
    d = {k: v for k, v in _qwen3_dict().items() if k != "tie_word_embeddings"}
    assert Qwen3Config.from_dict({**d, "hidden_size": "64"}).tie_word_embeddings is False


def test_qwen3_config_direct_construction_is_checked():
    from models.config import Qwen3Config

    kw = dict(vocab_size=8, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
              num_attention_heads=2, num_key_value_heads=1, head_dim=4)
    Qwen3Config(**kw)
    for bad in ({"rope_theta": -1.0}, {"rms_norm_eps": 0.0}, {"tie_word_embeddings": "no"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            Qwen3Config(**kw, **bad)


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS_DIR.iterdir()))
def test_every_published_qwen3_config_loads_with_full_attention(name):
    """The published configs say hidden_act "silu" and use_sliding_window false: they load."""
    from models.config import Qwen3Config

    c = Qwen3Config.from_json(CONFIGS_DIR / name)
    assert c.hidden_act == "silu" and c.sliding_window is None


@pytest.mark.parametrize("extra,match", [
    ({"hidden_act": "gelu"}, "hidden_act must be \"silu\".*got 'gelu'"),
    ({"hidden_act": None}, "hidden_act must be \"silu\".*got None"),
    ({"use_sliding_window": "yes"}, "use_sliding_window must be true or false, got 'yes'"),
    ({"use_sliding_window": True, "sliding_window": 0, "max_window_layers": 0},
     "sliding_window must be a positive")])
def test_an_activation_or_window_infer_cannot_run_is_refused_naming_it(extra, match):
    from models.config import Qwen3Config

    with pytest.raises(ValueError, match=match):
        Qwen3Config.from_dict({**_qwen3_dict(), **extra})


def test_swish_is_silu():
    """transformers maps hidden_act "swish" to the same SiLU as "silu": such a config loads."""
    from models.config import Qwen3Config

    assert Qwen3Config.from_dict({**_qwen3_dict(), "hidden_act": "swish"}).hidden_act == "swish"


@pytest.mark.parametrize("extra,window", [
    ({"use_sliding_window": True, "sliding_window": 512, "max_window_layers": 0}, 512),
    ({"use_sliding_window": True, "max_window_layers": 1}, 4096),  # transformers' default
    ({"use_sliding_window": True, "sliding_window": 512, "max_window_layers": 2}, None),
    ({"use_sliding_window": True, "sliding_window": 512,
      "layer_types": ["full_attention", "sliding_attention"]}, 512),
    ({"use_sliding_window": True, "sliding_window": None, "max_window_layers": 0}, None),
    ({"use_sliding_window": False, "sliding_window": 512, "max_window_layers": 0}, None)])
def test_the_sliding_window_is_read_as_transformers_reads_it(extra, window):
    """A window only where a layer slides (from max_window_layers of the 2 layers, or
    layer_types)."""
    from models.config import Qwen3Config

    assert Qwen3Config.from_dict({**_qwen3_dict(), **extra}).sliding_window == window
