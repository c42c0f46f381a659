"""models/context.py (static YaRN from the context, limits from the checkpoint), Qwen3Config
.max_context and load_model(config=...), against transformers past 40960 positions."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import CONFIGS_DIR
from mock_engine import VOCAB_LIMIT

from models.checkpoint_folder import read_config
from models.config import Qwen3Config, YarnScaling
from models.context import ContextPlan, largest_context, plan_context, yarn_factor_for
from models.loader import load_model

PROMPT_LEN = 24


def _qwen3(name: str = "Qwen3-8B") -> Qwen3Config:
    return Qwen3Config.from_json(CONFIGS_DIR / name)


def _prescaled(factor: float = 4.0, original: int = 32768) -> Qwen3Config:
    return dataclasses.replace(_qwen3(), rope_scaling=YarnScaling(factor, original))


# ------------------------------------------------------------------ the decision


@pytest.mark.parametrize("ctx", [1, 4096, 32768, 40960])
def test_native_length_never_gets_yarn(ctx):
    mc = _qwen3()
    plan = plan_context(mc, ctx)
    assert plan.config is mc and plan.config.rope_scaling is None
    assert (plan.yarn_factor, plan.added_yarn, plan.note) == (None, False, None)
    assert plan.max_ctx == 131072 and mc.max_context == 40960


@pytest.mark.parametrize("ctx,factor", [(40961, 1.5), (49152, 1.5), (49153, 2.0), (65536, 2.0),
                                        (65537, 2.5), (100_000, 3.5), (131072, 4.0)])
def test_past_native_length_adds_yarn_with_the_factor_rounded_up(ctx, factor):
    mc = _qwen3()
    plan = plan_context(mc, ctx)
    assert plan.added_yarn and plan.yarn_factor == factor
    assert plan.config.rope_scaling == YarnScaling(factor, 32768)
    assert plan.config.max_context >= ctx  # the factor covers the context
    assert dataclasses.replace(plan.config, rope_scaling=None) == mc  # nothing else changed
    assert "\n" not in plan.note and "YaRN" in plan.note and f"factor {factor:g}" in plan.note
    assert "short texts" in plan.note


@pytest.mark.parametrize("ctx", [131073, 3_000_000])
def test_beyond_yarn_limit_is_an_error_naming_the_largest(ctx):
    with pytest.raises(ValueError, match=r"largest context .* 131,072 tokens .*40,960 native.*"
                                         r"lower --ctx to at most 131,072 \(128k\)"):
        plan_context(_qwen3(), ctx)


def test_a_limit_under_1k_is_not_written_as_0k():
    mc = dataclasses.replace(_qwen3(), max_position_embeddings=100)
    with pytest.raises(ValueError) as info:
        plan_context(mc, 1024)
    assert str(info.value).endswith("lower --ctx to at most 400") and "0k" not in str(info.value)


@pytest.mark.parametrize("name", ["Qwen3-0.6B", "Qwen3-1.7B", "Qwen3-4B", "Qwen3-14B"])
def test_every_qwen3_release_config_allows_128k_with_yarn(name):
    plan = plan_context(_qwen3(name), 131072)
    assert plan.max_ctx == 131072 and plan.yarn_factor == 4.0


def test_2507_runs_256k_natively():
    mc = _qwen3("Qwen3-4B-Instruct-2507")
    assert mc.rope_theta == 5_000_000 and mc.max_context == 262144
    for ctx in (32768, 131072, 262144):
        plan = plan_context(mc, ctx)
        assert plan.config is mc and not plan.added_yarn and plan.yarn_factor is None
        assert plan.max_ctx == 262144
    with pytest.raises(ValueError, match=r"262,144 tokens \(its native max_position_embeddings\)"):
        plan_context(mc, 262145)


def test_prescaled_config_keeps_its_rope_scaling():
    mc = _prescaled(4.0)
    assert mc.max_context == 131072
    for ctx in (1000, 40960, 131072):
        plan = plan_context(mc, ctx)
        assert plan.config is mc and plan.yarn_factor == 4.0
        assert not plan.added_yarn and plan.note is None and plan.max_ctx == 131072
    with pytest.raises(ValueError, match=r"131,072 tokens \(its config.json's YaRN rope_scaling: "
                                         r"factor 4 x 32,768; raise the factor"):
        plan_context(mc, 131073)
    small = _prescaled(2.0)  # its own factor sets the limit, even below what auto YaRN allows
    assert plan_context(small, 65536).yarn_factor == 2.0
    with pytest.raises(ValueError, match="65,536 tokens"):
        plan_context(small, 65537)
    assert _prescaled(1.0).max_context == 40960  # never below the native length


def test_short_native_length_scales_from_itself():
    mc = dataclasses.replace(_qwen3(), max_position_embeddings=8192)
    plan = plan_context(mc, 10000)
    assert plan.config.rope_scaling == YarnScaling(1.5, 8192) and plan.max_ctx == 32768


@pytest.mark.parametrize("ctx", [0, -5, 1.5, "32k", True])
def test_bad_ctx_is_an_error(ctx):
    with pytest.raises(ValueError, match="context size must be a positive number"):
        plan_context(_qwen3(), ctx)


def test_factor_rounding_and_plan_validation():
    assert [yarn_factor_for(n, 32768) for n in (1, 32768, 32769, 98304)] == [1.0, 1.0, 1.5, 3.0]
    mc = _qwen3()
    with pytest.raises(ValueError, match="outside"):
        ContextPlan(mc, ctx=200_000, max_ctx=131072)
    with pytest.raises(ValueError, match="note"):
        ContextPlan(mc, ctx=10, max_ctx=131072, added_yarn=True)
    with pytest.raises(ValueError, match="yarn_factor"):
        ContextPlan(mc, ctx=10, max_ctx=131072, yarn_factor=2.0)


# ------------------------------------------------------------------ loading with the plan


def test_load_model_takes_an_overriding_config(tiny_ckpt_factory):
    folder = tiny_ckpt_factory(vocab_size=512)
    plan = plan_context(read_config(folder), 65536)
    model = load_model(folder, dtype=torch.float32, config=plan.config)
    assert model.config.rope_scaling == YarnScaling(2.0, 32768)
    assert model.model.rotary.attention_factor > 1.0
    wrong = dataclasses.replace(plan.config, hidden_size=128, num_hidden_layers=3)
    with pytest.raises(ValueError, match=r"does not fit the checkpoint .*hidden_size 128 \(the "
                                         r"checkpoint has 64\); num_hidden_layers 3"):
        load_model(folder, dtype=torch.float32, config=wrong)
    untied = dataclasses.replace(plan.config, tie_word_embeddings=False)
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        load_model(folder, dtype=torch.float32, config=untied)


def _hf_with(folder, rope_parameters: dict):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.from_pretrained(folder)
    cfg.rope_parameters = rope_parameters
    return transformers.Qwen3ForCausalLM.from_pretrained(folder, config=cfg,
                                                         dtype=torch.float32).eval()


def _logits(model, ids, pos):
    with torch.no_grad():
        return model.compute_logits(model(ids, pos))


def _rel_err(ours, ref) -> float:
    return ((ours - ref).abs().max() / ref.abs().max()).item()


def test_auto_yarn_logits_match_transformers_past_native_length(tiny_ckpt_factory):
    """A tiny model planned for --ctx 64k gives transformers' logits with the same YaRN at
    positions past 40960 (explicit position ids: no cache that long is needed)."""
    folder = tiny_ckpt_factory()
    plan = plan_context(read_config(folder), 65536)
    ours = load_model(folder, dtype=torch.float32, config=plan.config)
    plain = load_model(folder, dtype=torch.float32)
    hf = _hf_with(folder, {"rope_type": "yarn", "rope_theta": 1e6, "factor": plan.yarn_factor,
                           "original_max_position_embeddings": 32768})
    ids = torch.randint(0, VOCAB_LIMIT, (PROMPT_LEN,))
    for start in (0, 40960 - PROMPT_LEN // 2, 50_000, 65536 - PROMPT_LEN):
        pos = torch.arange(start, start + PROMPT_LEN)
        with torch.no_grad():
            ref = hf(ids[None], position_ids=pos[None]).logits[0].float()
        assert _rel_err(_logits(ours, ids, pos), ref) < 1e-4, start
        assert _rel_err(_logits(plain, ids, pos), ref) > 1e-3  # YaRN is really on


def test_2507_shape_runs_256k_positions_without_yarn(tiny_ckpt_factory):
    folder = tiny_ckpt_factory(overrides={"max_position_embeddings": 262144,
                                          "rope_theta": 5_000_000})
    plan = plan_context(read_config(folder), 262144)
    assert plan.config.rope_scaling is None
    ours = load_model(folder, dtype=torch.float32, config=plan.config)
    hf = _hf_with(folder, {"rope_type": "default", "rope_theta": 5e6})
    ids = torch.randint(0, VOCAB_LIMIT, (PROMPT_LEN,))
    pos = torch.arange(262144 - PROMPT_LEN, 262144)
    with torch.no_grad():
        ref = hf(ids[None], position_ids=pos[None]).logits[0].float()
    assert _rel_err(_logits(ours, ids, pos), ref) < 1e-4


def test_random_2507_checkpoint_has_the_published_config(tmp_path):
    from models.random_checkpoint import base_config

    cfg = base_config("4b-2507")
    mc = Qwen3Config.from_dict(cfg)
    assert (mc.max_position_embeddings, mc.rope_theta, mc.num_hidden_layers) == (262144, 5e6, 36)
    assert plan_context(mc, 262144).config is mc


@pytest.mark.gpu
def test_auto_yarn_on_the_gpu_matches_the_cpu(tiny_ckpt_factory):
    """The fused CUDA path (q/k-norm + RoPE kernel) with the added YaRN gives the CPU torch
    path's logits past the native length (float32)."""
    folder = tiny_ckpt_factory()
    plan = plan_context(read_config(folder), 100_000)
    cpu = load_model(folder, dtype=torch.float32, config=plan.config)
    gpu = load_model(folder, device="cuda", dtype=torch.float32, config=plan.config)
    ids = torch.randint(0, VOCAB_LIMIT, (PROMPT_LEN,))
    pos = torch.arange(99_000, 99_000 + PROMPT_LEN)
    ref = _logits(cpu, ids, pos)
    out = _logits(gpu, ids.cuda(), pos.cuda()).cpu()
    assert _rel_err(out, ref) < 1e-3
    assert _rel_err(_logits(load_model(folder, dtype=torch.float32), ids, pos), ref) > 1e-3


def test_a_context_past_the_sliding_window_is_refused():
    """Full attention equals a sliding window up to the window's length: refused past it only."""
    mc = dataclasses.replace(_qwen3(), sliding_window=4096)
    plan = plan_context(mc, 4096)
    assert plan.ctx == 4096
    assert plan.max_ctx == largest_context(mc) == 4096  # what capacity hints may suggest
    with pytest.raises(ValueError, match="use_sliding_window true with sliding_window 4,096.*"
                                         "lower --ctx to at most 4,096"):
        plan_context(mc, 4097)
