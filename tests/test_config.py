"""models/config.py: both config.json formats, YaRN spellings, validation errors."""

from __future__ import annotations

import json

import pytest
from conftest import CONFIGS_DIR

from models.config import Qwen3Config, YarnScaling

transformers = pytest.importorskip("transformers")

TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32)
YARN = {"factor": 4.0, "original_max_position_embeddings": 32768}


def _hf_saved(tmp_path, **kw) -> dict:
    """config.json as transformers 5 writes it (rope_parameters format)."""
    transformers.Qwen3Config(**TINY, **kw).save_pretrained(tmp_path)
    return json.loads((tmp_path / "config.json").read_text())


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS_DIR.glob("Qwen3-*")))
def test_published_configs(name):
    raw = json.loads((CONFIGS_DIR / name / "config.json").read_text())
    cfg = Qwen3Config.from_json(CONFIGS_DIR / name)
    for field in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                  "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
                  "max_position_embeddings", "tie_word_embeddings", "torch_dtype"):
        assert getattr(cfg, field) == raw[field], field
    assert cfg.rope_theta == raw["rope_theta"]
    assert cfg.rope_scaling is None and raw["rope_scaling"] is None
    assert cfg.q_size == raw["num_attention_heads"] * raw["head_dim"]


def test_published_config_with_yarn_in_both_spellings():
    raw = json.loads((CONFIGS_DIR / "Qwen3-8B" / "config.json").read_text())
    a = Qwen3Config.from_dict({**raw, "rope_scaling": {"rope_type": "yarn", **YARN}})
    b = Qwen3Config.from_dict({**raw, "rope_scaling": {"type": "yarn", **YARN}})
    assert a == b
    assert a.rope_scaling == YarnScaling(4.0, 32768)
    assert a.rope_theta == raw["rope_theta"]


def test_transformers5_rope_parameters_format_default(tmp_path):
    saved = _hf_saved(tmp_path, rope_theta=123456.0)
    assert "rope_parameters" in saved and "rope_theta" not in saved  # the format under test
    cfg = Qwen3Config.from_json(tmp_path)
    assert cfg.rope_theta == 123456.0 and cfg.rope_scaling is None
    assert (cfg.num_attention_heads, cfg.head_dim, cfg.vocab_size) == (4, 32, 512)


@pytest.mark.parametrize("spelling", ["rope_type", "type"])
def test_transformers5_rope_parameters_format_yarn(tmp_path, spelling):
    extra = {"beta_fast": 16.0, "truncate": False}
    saved = _hf_saved(tmp_path, rope_theta=5e5,
                      rope_scaling={spelling: "yarn", **YARN, **extra})
    assert saved["rope_parameters"]["rope_type"] == "yarn" and "rope_scaling" not in saved
    cfg = Qwen3Config.from_json(tmp_path / "config.json")
    assert cfg.rope_theta == 5e5
    assert cfg.rope_scaling == YarnScaling(4.0, 32768, beta_fast=16.0, truncate=False)


def test_rope_parameters_with_only_the_old_spelling():
    d = {"model_type": "qwen3", **TINY,
         "rope_parameters": {"type": "yarn", "rope_theta": 1e6, **YARN}}
    assert Qwen3Config.from_dict(d).rope_scaling == YarnScaling(4.0, 32768)


@pytest.mark.parametrize("bad, message", [
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "only 'yarn'"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "original_max_position"),
    ({"rope_scaling": {"type": "yarn", "factor": 0.5, "original_max_position_embeddings": 8}},
     "factor must be >= 1"),
    ({"num_key_value_heads": 3}, "multiple of num_key_value_heads"),
    ({"head_dim": 31}, "head_dim must be even"),
    ({"hidden_size": 0}, "hidden_size must be a positive"),
    ({"hidden_size": "wide"}, "invalid value"),
    ({"torch_dtype": "float8"}, "unsupported torch_dtype"),
    ({"architectures": ["Qwen3MoeForCausalLM"]}, "unsupported architecture Qwen3MoeForCausalLM"),
    ({"architectures": ["LlamaForCausalLM"]}, "supports Qwen3ForCausalLM"),
    ({"model_type": "llama"}, "unsupported model_type 'llama'"),
])
def test_invalid_configs_name_the_problem(bad, message):
    d = {"model_type": "qwen3", **TINY, **bad}
    with pytest.raises(ValueError, match=message):
        Qwen3Config.from_dict(d)


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        Qwen3Config.from_json(tmp_path)
    (tmp_path / "config.json").write_bytes(b"\xff\xfe garbage")
    with pytest.raises(ValueError, match="not valid JSON"):
        Qwen3Config.from_json(tmp_path)


def test_derived_sizes():
    cfg = Qwen3Config.from_dict({"model_type": "qwen3", **TINY})
    assert (cfg.gqa_group, cfg.q_size, cfg.kv_size) == (2, 128, 64)
    # K and V, per layer, per KV head: head_dim bf16 values, or int8 codes plus a float32 scale
    assert cfg.kv_bytes_per_token("bf16") == 2 * 2 * 2 * 32 * 2
    assert cfg.kv_bytes_per_token("int8") == 2 * 2 * 2 * (32 + 4)
