"""models/qwen3.py and models/rope.py against transformers' Qwen3ForCausalLM (float32, CPU)."""

from __future__ import annotations

import pytest
import torch

from kernels.reference import dense_causal_attention
from models.config import YarnScaling
from models.loader import load_model
from models.rope import rope_parameters

transformers = pytest.importorskip("transformers")

PROMPT_LEN = 40
VOCAB_LIMIT = 151669  # ids the tokenizer defines; the tiny models use the real vocab size
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}

CHECKPOINTS = {
    "tied": dict(tie=True),
    "untied": dict(tie=False, seed=1),
    "sharded3": dict(tie=False, shards=3, seed=2),
    "bf16-stored": dict(tie=True, dtype="bfloat16", seed=3),
}


def _hf(folder):
    model = transformers.Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model.eval()


def _rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return ((ours - ref).abs().max() / ref.abs().max()).item()


@pytest.fixture(scope="module", params=list(CHECKPOINTS))
def pair(request, tiny_ckpt_factory):
    folder = tiny_ckpt_factory(**CHECKPOINTS[request.param])
    return load_model(folder, dtype=torch.float32), _hf(folder)


def test_logits_match_transformers(pair):
    ours, hf = pair
    ids = torch.randint(0, VOCAB_LIMIT, (PROMPT_LEN,))
    with torch.no_grad():
        logits = ours.compute_logits(ours(ids, torch.arange(PROMPT_LEN)))
        ref = hf(ids[None]).logits[0].float()
    assert logits.dtype == torch.float32 and logits.shape == ref.shape
    assert _rel_err(logits, ref) < 1e-4


@pytest.mark.parametrize("pair", ["tied", "untied", "sharded3"], indirect=True)
def test_greedy_matches_transformers(pair):
    ours, hf = pair
    ids = torch.randint(0, VOCAB_LIMIT, (PROMPT_LEN,))
    n_new = 32
    with torch.no_grad():
        ref = hf.generate(ids[None], attention_mask=torch.ones(1, PROMPT_LEN, dtype=torch.long),
                          do_sample=False, max_new_tokens=n_new, min_new_tokens=n_new,
                          eos_token_id=None, pad_token_id=0)[0, PROMPT_LEN:]
        seq = ids.clone()
        for _ in range(n_new):  # full recompute each step, dense attention
            hidden = ours(seq, torch.arange(seq.numel()))
            nxt = ours.compute_logits(hidden[-1:]).argmax(-1)
            seq = torch.cat([seq, nxt])
    assert seq[PROMPT_LEN:].tolist() == ref.tolist()


def test_pluggable_attention_is_called_per_layer(tiny_ckpt_factory):
    model = load_model(tiny_ckpt_factory(tie=True), dtype=torch.float32)
    cfg = model.config
    calls = []

    def attn(layer_idx, q, k, v, meta):
        calls.append((layer_idx, q.shape, k.shape, v.shape, meta))
        return dense_causal_attention(q, k, v).to(q.dtype)

    ids, pos = torch.randint(0, VOCAB_LIMIT, (7,)), torch.arange(7)
    with torch.no_grad():
        out = model(ids, pos, attn=attn, meta="META")
        ref = model(ids, pos)
    assert [c[0] for c in calls] == list(range(cfg.num_hidden_layers))
    d = cfg.head_dim
    assert all(c[1:] == ((7, cfg.num_attention_heads, d), (7, cfg.num_key_value_heads, d),
                         (7, cfg.num_key_value_heads, d), "META") for c in calls)
    torch.testing.assert_close(out, ref)
    assert out.shape == (7, cfg.hidden_size)


@pytest.mark.parametrize("spelling", ["rope_type", "type"])
def test_yarn_logits_match_transformers_beyond_original_length(tiny_ckpt_factory, spelling):
    scaling = {spelling: "yarn", **{k: v for k, v in YARN.items() if k != "rope_type"}}
    folder = tiny_ckpt_factory(overrides={"rope_scaling": scaling,
                                          "max_position_embeddings": 131072})
    ours, hf = load_model(folder, dtype=torch.float32), _hf(folder)
    plain = load_model(tiny_ckpt_factory(), dtype=torch.float32)  # same weights, no YaRN
    assert ours.config.rope_scaling is not None
    ids = torch.randint(0, VOCAB_LIMIT, (PROMPT_LEN,))
    for start in (0, 32768 - PROMPT_LEN // 2, 100_000, 131072 - PROMPT_LEN):
        pos = torch.arange(start, start + PROMPT_LEN)
        with torch.no_grad():
            logits = ours.compute_logits(ours(ids, pos))
            ref = hf(ids[None], position_ids=pos[None]).logits[0].float()
            unscaled = plain.compute_logits(plain(ids, pos))
        assert _rel_err(logits, ref) < 1e-4, start
        assert _rel_err(unscaled, ref) > 1e-3  # YaRN changes the result: the check can fail


@pytest.mark.parametrize("rope", [
    dict(factor=4.0, original_max_position_embeddings=32768),
    dict(factor=4.0, original_max_position_embeddings=32768, truncate=False),
    dict(factor=2.0, original_max_position_embeddings=4096, beta_fast=16.0, beta_slow=2.0),
    dict(factor=8.0, original_max_position_embeddings=32768, attention_factor=1.3),
    dict(factor=4.0, original_max_position_embeddings=32768, mscale=1.0, mscale_all_dim=0.5),
])
@pytest.mark.parametrize("head_dim,theta", [(128, 1e6), (32, 1e4)])
def test_yarn_parameters_match_transformers(rope, head_dim, theta):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = transformers.Qwen3Config(
        hidden_size=256, num_attention_heads=2, head_dim=head_dim,
        rope_parameters={"rope_type": "yarn", "rope_theta": theta, **rope})
    ref_inv, ref_factor = ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")
    inv, factor = rope_parameters(head_dim, theta, YarnScaling(**rope))
    assert factor == pytest.approx(ref_factor, rel=1e-12)
    torch.testing.assert_close(inv, ref_inv, rtol=0, atol=0)
    plain, _ = rope_parameters(head_dim, theta, None)
    assert not torch.equal(inv, plain)


def test_truncate_changes_yarn_frequencies():
    a, _ = rope_parameters(128, 1e6, YarnScaling(4.0, 32768))
    b, _ = rope_parameters(128, 1e6, YarnScaling(4.0, 32768, truncate=False))
    assert not torch.equal(a, b)


def test_bfloat16_forward_is_finite_and_close_to_float32(tiny_ckpt_factory):
    folder = tiny_ckpt_factory(tie=False, seed=1)
    m32 = load_model(folder, dtype=torch.float32)
    m16 = load_model(folder, dtype=torch.bfloat16)
    ids, pos = torch.randint(0, VOCAB_LIMIT, (PROMPT_LEN,)), torch.arange(PROMPT_LEN)
    with torch.no_grad():
        h16 = m16(ids, pos)
        l16, l32 = m16.compute_logits(h16[-4:]), m32.compute_logits(m32(ids, pos)[-4:])
    assert h16.dtype == torch.bfloat16 and l16.dtype == torch.float32
    assert torch.isfinite(l16).all()
    assert _rel_err(l16, l32) < 5e-2


@pytest.mark.parametrize("tie", [True, False])
def test_checkpoint_saved_by_transformers(tmp_path, tie):
    """A folder written by transformers 5 save_pretrained (rope_parameters, its own tensor
    naming and tying) loads and gives transformers' logits, with YaRN past 32k."""
    cfg = transformers.Qwen3Config(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=tie,
        max_position_embeddings=131072, rope_parameters={"rope_theta": 1e6, **YARN})
    hf = transformers.Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.05 * torch.randn_like(p))  # norms are all ones after init
    hf.save_pretrained(tmp_path)
    ours = load_model(tmp_path, dtype=torch.float32)
    assert ours.config.rope_scaling is not None and ours.config.tie_word_embeddings == tie
    ids = torch.randint(0, 512, (PROMPT_LEN,))
    pos = torch.arange(40_000, 40_000 + PROMPT_LEN)
    with torch.no_grad():
        logits = ours.compute_logits(ours(ids, pos))
        ref = hf(ids[None], position_ids=pos[None]).logits[0].float()
    assert _rel_err(logits, ref) < 1e-4
