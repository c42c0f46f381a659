"""kernels/qk_norm_rope_store.py: one launch equals ``qk_norm_rope`` then ``store_kv``, bit for bit.

The unfused pair is the oracle (the fusion only moves the store), itself held to
``kernels/reference.py`` by tests/test_kernels_norm_rope.py and tests/test_kernels_store.py; q and
the stored K/V are also checked against the reference here. Pools start as random data so that
every slot the kernel must not touch is checked too.

CPU (Triton interpreter): float32 and float16 activations, 16-bit pools (the model dtype) and INT8
pools; steps of 1, 5 and 16 rows and a 24-row prefill chunk with padding slots, GQA groups 1 and
4, scrambled slots over several pages, positions past 100k with YaRN's attention factor. GPU
(``-m gpu``): bfloat16 at Qwen3-8B shapes. The model's path with the fusion on and off is
``test_model_fused_store.py``'s.
"""

from __future__ import annotations

import pytest
import torch
from pool_cases import assert_same_pool, huge_int8_pool

from infer.kv_pool import LayerCache, int8_v_shape
from kernels import reference as ref
from kernels.qk_norm_rope import qk_norm_rope
from kernels.qk_norm_rope_store import qk_norm_rope_store
from kernels.store_kv import store_kv
from models.config import YarnScaling
from models.rope import rope_parameters

YARN = YarnScaling(factor=4.0, original_max_position_embeddings=32768)


def _pool(num_pages, kv_heads, page_size, head_dim, dtype, device="cpu"):
    """A layer of the pool filled with random data (INT8: codes, transposed V pages, scales)."""
    g = torch.Generator().manual_seed(1)
    shape = (num_pages, kv_heads, page_size, head_dim)
    if dtype == torch.int8:
        codes = [torch.randint(-127, 128, s, dtype=torch.int8, generator=g)
                 for s in (shape, int8_v_shape(shape))]
        scales = [torch.rand(shape[:3], generator=g) for _ in range(2)]
        return LayerCache(*(t.to(device) for t in codes + scales))
    return LayerCache(*(torch.randn(shape, generator=g).to(device=device, dtype=dtype)
                        for _ in range(2)))


def _clone(cache: LayerCache) -> LayerCache:
    return LayerCache(*(None if t is None else t.clone()
                        for t in (cache.k, cache.v, cache.k_scale, cache.v_scale)))


def _case(tokens, kv_heads, group, head_dim, dtype, *, page_size=8, num_pages=7, pad=(),
          pos_base=100_000, device="cpu", separate=False):
    """q, k, v as views into one fused qkv row (the model's layout; ``separate``: each in a
    tensor of its own row stride), the norm weights, RoPE (YaRN) parameters, positions from
    ``pos_base`` and scrambled slots (``pad``: rows with slot -1)."""
    hq = kv_heads * group
    qkv = torch.randn(tokens, (hq + 2 * kv_heads) * head_dim) * 2
    qkv[:, hq * head_dim:] *= 2  # k and v bigger than q: INT8 scales well away from 1
    qkv = qkv.to(device=device, dtype=dtype)
    q, k, v = qkv.split([hq * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    if separate:  # row strides that differ from each other's (a swapped stride shows)
        q, k, v = (torch.cat([t, t[:, :extra]], -1)[:, :t.shape[1]]
                   for t, extra in ((q, 8), (k, 24), (v, 40)))
    q = q.view(tokens, hq, head_dim)
    k = k.view(tokens, kv_heads, head_dim)
    v = v.view(tokens, kv_heads, head_dim)
    qw, kw = (torch.rand(head_dim) + 0.5).to(device, dtype), torch.randn(head_dim).to(device, dtype)
    inv_freq, af = rope_parameters(head_dim, 1e6, YARN)
    pos = pos_base + torch.randint(0, 30_000, (tokens,))
    slots = torch.randperm(num_pages * page_size)[:tokens]
    slots[list(pad)] = -1
    norm = (qw, kw, 1e-6, pos.to(device), inv_freq.to(device), af)
    return q, k, v, norm, slots.to(device)


def _unfused(q, k, v, norm, cache, slots):
    """The oracle: qk_norm_rope, then store_kv of its k (the model path without the fusion)."""
    qo, ko = qk_norm_rope(q, k, *norm)
    store_kv(ko, v, cache.k, cache.v, slots, cache.k_scale, cache.v_scale)
    return qo, ko


def _fused(q, k, v, norm, cache, slots):
    return qk_norm_rope_store(q, k, v, *norm, cache.k, cache.v, slots, cache.k_scale,
                              cache.v_scale)


def _check(tokens, kv_heads, group, head_dim, dtype, pool_dtype, **kw):
    q, k, v, norm, slots = _case(tokens, kv_heads, group, head_dim, dtype, **kw)
    pool = _pool(kw.get("num_pages", 7), kv_heads, kw.get("page_size", 8), head_dim, pool_dtype)
    want_pool, got_pool = _clone(pool), _clone(pool)
    want_q, want_k = _unfused(q, k, v, norm, want_pool, slots)
    got_q = _fused(q, k, v, norm, got_pool, slots)
    assert got_q.shape == q.shape and got_q.dtype == dtype and got_q.is_contiguous()
    assert torch.equal(got_q, want_q)
    assert_same_pool(got_pool, want_pool)
    return got_q, want_k, got_pool, pool, slots


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("pool", ["16bit", "int8"])
@pytest.mark.parametrize("tokens,pad,kv_heads,group", [
    (1, (), 1, 4), (5, (2,), 2, 1), (16, (0, 15), 1, 4), (24, (3, 17, 23), 2, 1)])
def test_fused_equals_norm_rope_then_store(dtype, pool, tokens, pad, kv_heads, group):
    """Decode steps of 1 to 16 rows and a prefill chunk, GQA groups 1 and 4."""
    _check(tokens, kv_heads, group, 32, dtype, torch.int8 if pool == "int8" else dtype, pad=pad)


@pytest.mark.parametrize("pool", ["16bit", "int8"])
def test_fused_with_q_k_v_in_tensors_of_their_own(pool):
    _check(5, 2, 2, 32, torch.float32, torch.int8 if pool == "int8" else torch.float32,
           pad=(1,), separate=True)


@pytest.mark.parametrize("pool_dtype", [torch.float16, torch.int8])
def test_fused_masked_head_dim_and_big_pages(pool_dtype):
    """head_dim 24 (halves of 12 in 16-lane blocks: masked lanes) and 32-slot pages."""
    _check(6, 3, 2, 24, torch.float16, pool_dtype, page_size=32, num_pages=3, pad=(4,))


def test_fused_matches_the_reference():
    """The stored rows are the model's k and v: pool rows equal the reference's k (up to float32
    reduction order and cos/sin; INT8 codes: ``test_fused_int64_offsets``) and v."""
    q, k, v, norm, slots = _case(5, 2, 4, 32, torch.float32, pad=(1,))
    rq, rk = ref.qk_norm_rope(q, k, *norm)
    pool = _pool(7, 2, 8, 32, torch.float32)
    got_q = _fused(q, k, v, norm, pool, slots)
    torch.testing.assert_close(got_q, rq, rtol=1e-5, atol=1e-5)
    live = (slots >= 0).nonzero().flatten()
    page, off = slots[live] // 8, slots[live] % 8
    torch.testing.assert_close(pool.k[page, :, off], rk[live], rtol=1e-5, atol=1e-5)
    assert torch.equal(pool.v[page, :, off], v[live])


def test_padding_rows_store_nothing():
    """A step of padding rows only (a CUDA-graph bucket's empty rows): q is still written, the
    pool is untouched."""
    for pool_dtype in (torch.float32, torch.int8):
        _, _, got_pool, before, _ = _check(4, 2, 2, 16, torch.float32, pool_dtype,
                                           pad=(0, 1, 2, 3))
        assert_same_pool(got_pool, before)


def test_fused_int64_offsets():
    """Pages whose element offsets pass 2^31 (a huge, mostly untouched INT8 pool)."""
    kv_heads, page_size, head_dim = 2, 16, 32
    cache, num_pages, per_page = huge_int8_pool(kv_heads, page_size, head_dim)
    q, k, v, norm, _ = _case(3, kv_heads, 1, head_dim, torch.float16)
    pages, offs = torch.tensor([num_pages - 1, num_pages - 5, 3]), torch.tensor([15, 2, 7])
    slots = pages * page_size + offs
    assert int(pages.max()) * per_page > 2**31
    _fused(q, k, v, norm, cache, slots)
    _, ko = qk_norm_rope(q, k, *norm)
    (kc, ks), (vc, vs) = ref.quantize_int8(ko), ref.quantize_int8(v)
    assert torch.equal(cache.k[pages, :, offs], kc)
    assert torch.equal(cache.v[pages, :, :, offs], vc)  # transposed V pages
    assert torch.equal(cache.k_scale[pages, :, offs], ks)
    assert torch.equal(cache.v_scale[pages, :, offs], vs)


def test_fused_rejects_bad_inputs():
    q, k, v, norm, slots = _case(2, 2, 1, 16, torch.float32)
    cache = _pool(7, 2, 8, 16, torch.int8)
    args = (cache.k, cache.v, slots)
    with pytest.raises(ValueError, match="positions"):
        qk_norm_rope_store(q, k, v, *norm[:3], norm[3].int(), *norm[4:], *args, cache.k_scale,
                           cache.v_scale)
    with pytest.raises(ValueError, match="k_scale"):
        qk_norm_rope_store(q, k, v, *norm, *args)
    with pytest.raises(ValueError, match="share a float dtype"):
        qk_norm_rope_store(q, k, v.half(), *norm, *args, cache.k_scale, cache.v_scale)
    with pytest.raises(ValueError, match="qk_norm_rope_store: v needs a contiguous last dim"):
        qk_norm_rope_store(q, k, torch.cat([v, v], -1)[..., ::2], *norm, *args, cache.k_scale,
                           cache.v_scale)
    with pytest.raises(ValueError, match="slot_mapping must be int64"):
        qk_norm_rope_store(q, k, v, *norm, cache.k, cache.v, slots.int(), cache.k_scale,
                           cache.v_scale)
    assert _fused(q[:0], k[:0], v[:0], (*norm[:3], norm[3][:0], *norm[4:]), cache,
                  slots[:0]).shape == (0, 2, 16)


# ---------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("pool_dtype", [torch.bfloat16, torch.int8])
@pytest.mark.parametrize("tokens", [1, 16, 300])
def test_gpu_fused_equals_unfused_bf16_8b_shapes(pool_dtype, tokens):
    """Qwen3-8B attention shape (32 query, 8 KV heads, head_dim 128), page 64, positions up to
    ~130k: bit-identical to qk_norm_rope then store_kv."""
    torch.manual_seed(0)
    pad = (0, tokens // 2) if tokens > 1 else ()
    q, k, v, norm, slots = _case(tokens, 8, 4, 128, torch.bfloat16, page_size=64,
                                 num_pages=400, pad=pad, device="cuda")
    pool = _pool(400, 8, 64, 128, pool_dtype, device="cuda")
    want_pool, got_pool = _clone(pool), _clone(pool)
    want_q, _ = _unfused(q, k, v, norm, want_pool, slots)
    got_q = _fused(q, k, v, norm, got_pool, slots)
    torch.cuda.synchronize()
    assert torch.equal(got_q, want_q)
    assert_same_pool(got_pool, want_pool)
