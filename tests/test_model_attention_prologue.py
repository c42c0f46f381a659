"""The model's attention prologue (``models.qwen3_fused.ATTENTION_PROLOGUE``: a decode step's
q/k-norm + RoPE and KV store inside decode stage 1, ``kernels/decode_prologue.py``) on and off:
the tiny Qwen3's fused forward through ``TritonAttention`` over a 16-bit pool on the CPU
(prefill chunks, then
decode steps of 1 and 3 tokens per sequence) gives the same logits and pool up to the last bit
of a row's rstd, and launches neither ``qk_norm_rope`` nor ``store_kv`` for its decode steps. On
a GPU (``-m gpu``, ``test_decode_prologue_gpu.py``): the 4-layer bfloat16 0.6B and the engine.
"""

from __future__ import annotations

import pytest
import torch
from fused_steps import fused_steps

from infer.kv_pool import KVPool
from kernels.qk_norm_rope import qk_norm_rope
from kernels.store_kv import store_kv

STEPS = ((5, 3), (1, 1), (3, 3))  # prefill chunks (the prefill kernel), then two decode steps


def model_steps(model, kv_cache, on, monkeypatch):
    """The fused forward over a 2-sequence pool with the prologue ``on`` or off: the logits of
    each step, the pool, and how often ``qk_norm_rope`` and ``store_kv`` were launched."""
    import infer.attention as attention
    import models.qwen3 as qwen3
    import models.qwen3_fused as fused
    c, dev = model.config, model.device
    pool = KVPool(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, 8, 16, kv_cache,
                  model.dtype, dev)
    attn = attention.TritonAttention(pool, max_batch=2,
                                     group=c.num_attention_heads // c.num_key_value_heads)
    launches = {"qk_norm_rope": 0, "store_kv": 0}

    def counted(name, fn):
        def run(*args, **kwargs):
            launches[name] += 1
            return fn(*args, **kwargs)
        return run

    monkeypatch.setattr(fused, "ATTENTION_PROLOGUE", on)
    monkeypatch.setattr(qwen3, "FUSED_KV_STORE_INT8", False)  # the unfused pair when off
    monkeypatch.setattr(fused, "qk_norm_rope", counted("qk_norm_rope", qk_norm_rope))
    monkeypatch.setattr(attention, "qk_norm_rope", counted("qk_norm_rope", qk_norm_rope))
    monkeypatch.setattr(attention, "store_kv", counted("store_kv", store_kv))
    logits = fused_steps(model, attn, dev, STEPS)
    return logits, pool, launches


def assert_prologue_matches(model, kv_cache, monkeypatch, atol, rtol):
    """Logits and pools with the prologue on and off agree (``atol``/``rtol``: the rounding
    the rstd's last bit may move)."""
    on, pool_on, launches_on = model_steps(model, kv_cache, True, monkeypatch)
    off, pool_off, launches_off = model_steps(model, kv_cache, False, monkeypatch)
    layers = model.config.num_hidden_layers
    # off: every step launches both; on: only the prefill chunk does
    assert launches_off == {"qk_norm_rope": 3 * layers, "store_kv": 3 * layers}
    assert launches_on == {"qk_norm_rope": layers, "store_kv": layers}
    for a, b in zip(on, off, strict=True):
        torch.testing.assert_close(a, b, atol=atol, rtol=rtol)
    for i in range(layers):
        # layer 0's values are the same bits (its input is); later layers' inputs carry the
        # attention's last-bit differences, so their values differ by as much
        x, y = pool_on.layer(i), pool_off.layer(i)
        if i == 0:
            assert torch.equal(x.v, y.v)
        for a, b in ((x.k, y.k), (x.v, y.v)):
            torch.testing.assert_close(a.float(), b.float(), atol=atol, rtol=rtol)


def test_model_prologue_equals_unfused_cpu(tiny_ckpt_factory, monkeypatch):
    from models.loader import load_model

    model = load_model(tiny_ckpt_factory(vocab_size=512), device="cpu", dtype=torch.float32)
    assert_prologue_matches(model, "bf16", monkeypatch, atol=1e-4, rtol=1e-4)


def test_the_prologue_is_on_for_decode_steps_only(tiny_ckpt_factory, monkeypatch):
    """On as shipped: a decode step (up to 16 tokens) hands raw q, k, v to a backend with
    ``attend_prologue`` over a 16-bit pool; a prefill chunk, an INT8 pool (its fused store
    kernel instead) and a backend without it do not."""
    import infer.attention as attention
    import models.qwen3_fused as fused
    from models.loader import load_model

    model = load_model(tiny_ckpt_factory(vocab_size=512), device="cpu", dtype=torch.float32)
    c = model.config
    pool = KVPool(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, 8, 16, "bf16",
                  model.dtype, model.device)
    attn = attention.TritonAttention(pool, group=c.num_attention_heads // c.num_key_value_heads)
    width = c.q_size + 2 * c.kv_size
    assert fused.ATTENTION_PROLOGUE  # on by default (measured faster, BENCHMARKS.md)
    monkeypatch.setattr(fused, "ATTENTION_PROLOGUE", False)
    assert not fused.attention_prologue(attn, torch.zeros(1, width))
    monkeypatch.setattr(fused, "ATTENTION_PROLOGUE", True)
    assert fused.attention_prologue(attn, torch.zeros(16, width))
    assert not fused.attention_prologue(attn, torch.zeros(17, width))
    assert not fused.attention_prologue(attention.ReferenceAttention(pool),
                                        torch.zeros(1, width))
    int8 = KVPool(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, 8, 16, "int8",
                  model.dtype, model.device)
    assert not fused.attention_prologue(attention.TritonAttention(int8), torch.zeros(1, width))


@pytest.mark.parametrize("reverse", [False, True], ids=["grid-order", "reversed"])
def test_model_verify_rows_with_the_prologue(tiny_ckpt_factory, monkeypatch, reverse,
                                             reversed_grid):
    """A speculative verify step as the graph runner feeds it (one sequence's last token and 4
    drafts as one-query rows over its pages, ``slab_rows`` from ``plan_slabs``) gives the same
    logits with the prologue on and off, also with stage 1's programs run in reverse order (a
    GPU runs them in no set order: a later row reads keys that earlier rows add)."""
    import infer.attention as attention
    import models.qwen3_fused as fused
    from infer.meta import build_meta, plan_slabs
    from models.loader import load_model

    model = load_model(tiny_ckpt_factory(vocab_size=512), device="cpu", dtype=torch.float32)
    c = model.config
    reversed_grid(reverse)
    logits = []
    for on in (True, False):
        monkeypatch.setattr(fused, "ATTENTION_PROLOGUE", on)
        pool = KVPool(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, 8, 16, "bf16",
                      model.dtype, "cpu")
        attn = attention.TritonAttention(pool, max_batch=8,
                                         group=c.num_attention_heads // c.num_key_value_heads)
        pages, gen = [7, 2], torch.Generator().manual_seed(3)
        with torch.no_grad():
            meta = build_meta([(pages, 0, 14)], 16, "cpu")  # a 14-token prompt
            ids = torch.randint(0, c.vocab_size, (14,), generator=gen)
            model._forward_fused(model.model.embed_tokens(ids), meta.positions, attn, meta)
            rows = [(pages, p) for p in range(14, 19)]  # positions 14..18, across a page
            meta = build_meta([(pages, p, 1) for _, p in rows], 16, "cpu")
            meta.slab_rows = torch.tensor(
                plan_slabs(rows, 5, attn.slab_tokens, attn.slab_block_n), dtype=torch.int32)
            ids = torch.randint(0, c.vocab_size, (5,), generator=gen)
            hidden = model._forward_fused(model.model.embed_tokens(ids), meta.positions, attn,
                                          meta)
            logits.append(model.compute_logits(hidden))
    torch.testing.assert_close(logits[0], logits[1], atol=1e-4, rtol=1e-4)
