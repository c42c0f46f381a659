"""The model's fused KV store (``models.qwen3.FUSED_KV_STORE``: K/V stored by the q/k-norm + RoPE
launch, ``kernels/qk_norm_rope_store.py``; as shipped on for INT8 pools only, where the attention
prologue, ``models.qwen3_fused.ATTENTION_PROLOGUE``, does not act; the tests switch the prologue
off) on and off:
the tiny Qwen3 through ``TritonAttention`` on the CPU gives the same logits and pool bit for bit,
and so does, on a GPU (``-m gpu``), a 4-layer bfloat16 0.6B, also through the engine with CUDA
graphs (the same greedy tokens). The shipped default: fused for INT8 decode steps only.
"""

from __future__ import annotations

import pytest
import torch
from fused_steps import fused_steps
from pool_cases import assert_same_pool

from infer.kv_pool import KVPool
from kernels.store_kv import store_kv


def _model_steps(model, kv_cache, fused_store, monkeypatch):
    """Run the fused forward through ``TritonAttention`` over a 2-sequence pool: prefill chunks
    of 5 and 3 tokens (the prefill kernel), then a decode step of 1 token per sequence (the
    decode kernel). Returns the logits, the pool and how often the backend launched
    ``store_kv``."""
    import infer.attention as attention
    import models.qwen3 as qwen3
    import models.qwen3_fused as fused
    c, dev = model.config, model.device
    pool = KVPool(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, 8, 16, kv_cache,
                  model.dtype, dev)
    attn = attention.TritonAttention(pool, max_batch=2,
                                     group=c.num_attention_heads // c.num_key_value_heads)
    stores = []

    def counted_store_kv(*args, **kwargs):
        stores.append(1)
        store_kv(*args, **kwargs)

    monkeypatch.setattr(qwen3, "FUSED_KV_STORE", fused_store)
    monkeypatch.setattr(qwen3, "FUSED_KV_STORE_INT8", False)  # FUSED_KV_STORE alone decides
    monkeypatch.setattr(fused, "ATTENTION_PROLOGUE", False)  # else decode steps store in stage 1
    monkeypatch.setattr(attention, "store_kv", counted_store_kv)
    logits = fused_steps(model, attn, dev, ((5, 3), (1, 1)))
    return logits, pool, len(stores)


def _assert_model_fused_store_exact(model, kv_cache, monkeypatch):
    on, pool_on, stores_on = _model_steps(model, kv_cache, True, monkeypatch)
    off, pool_off, stores_off = _model_steps(model, kv_cache, False, monkeypatch)
    layers = model.config.num_hidden_layers
    assert (stores_on, stores_off) == (0, 2 * layers)
    for a, b in zip(on, off, strict=True):
        assert torch.equal(a, b)
    for i in range(layers):
        assert_same_pool(pool_on.layer(i), pool_off.layer(i))


@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_model_fused_store_equals_unfused_cpu(tiny_ckpt_factory, kv_cache, monkeypatch):
    """The tiny Qwen3's fused path through the Triton backend, with the KV store in the q/k-norm
    + RoPE launch and without: the same logits and the same pool, bit for bit."""
    from models.loader import load_model

    model = load_model(tiny_ckpt_factory(vocab_size=512), device="cpu", dtype=torch.float32)
    _assert_model_fused_store_exact(model, kv_cache, monkeypatch)


@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_the_default_fuses_the_store_for_int8_pools_only(tiny_ckpt_factory, kv_cache):
    """As shipped (``FUSED_KV_STORE`` off, ``FUSED_KV_STORE_INT8`` on): an INT8 pool's decode
    step (up to 16 tokens) gets its K/V from the q/k-norm + RoPE launch; a prefill chunk, and a
    16-bit pool, from ``store_kv``."""
    import infer.attention as attention
    import models.qwen3 as qwen3
    from models.loader import load_model

    model = load_model(tiny_ckpt_factory(vocab_size=512), device="cpu", dtype=torch.float32)
    c = model.config
    pool = KVPool(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, 8, 16, kv_cache,
                  model.dtype, model.device)
    attn = attention.TritonAttention(pool, max_batch=2,
                                     group=c.num_attention_heads // c.num_key_value_heads)
    assert not qwen3.FUSED_KV_STORE and qwen3.FUSED_KV_STORE_INT8
    step, chunk = torch.zeros(16, c.hidden_size), torch.zeros(17, c.hidden_size)
    assert qwen3.fused_kv_store(attn, step) is (kv_cache == "int8")
    assert qwen3.fused_kv_store(attn, chunk) is False  # a prefill chunk: the store kernel
    assert qwen3.fused_kv_store(None, step) is False  # dense attention: nothing to store into


@pytest.mark.gpu
@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_gpu_model_fused_store_equals_unfused(gpu_qwen3_4l, kv_cache, monkeypatch):
    """A 4-layer bfloat16 0.6B through TritonAttention: the same logits and pool bit for bit."""
    _assert_model_fused_store_exact(gpu_qwen3_4l, kv_cache, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_gpu_engine_fused_store_equals_unfused(gpu_qwen3_4l, kv_cache, monkeypatch):
    """A 4-layer 0.6B through the engine (Triton attention, CUDA graphs and eager): the same
    greedy tokens with the KV store fused and not."""
    from mock_engine import greedy_by_flag

    import models.qwen3 as qwen3
    import models.qwen3_fused as fused

    monkeypatch.setattr(qwen3, "FUSED_KV_STORE_INT8", False)  # FUSED_KV_STORE alone decides
    monkeypatch.setattr(fused, "ATTENTION_PROLOGUE", False)  # else decode steps store in stage 1
    out = greedy_by_flag(gpu_qwen3_4l, kv_cache, monkeypatch, qwen3, "FUSED_KV_STORE")
    assert len(out[False, False]) == 40
    assert out[True, True] == out[True, False] == out[False, True] == out[False, False]
