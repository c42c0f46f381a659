"""kernels/store_kv.py against kernels/reference.py (store_kv, quantize_int8).

CPU: the Triton interpreter on tiny shapes; the kernel must match the reference bit for bit, INT8
codes and scales included (round-half-to-even ties are planted on purpose). GPU (-m gpu): the
Qwen3-8B KV shape in bfloat16.
"""

from __future__ import annotations

import pytest
import torch
from pool_cases import huge_int8_pool

from infer.kv_pool import LayerCache, int8_v_shape
from kernels import reference
from kernels.store_kv import store_kv


def _pool(num_pages, kv_heads, page_size, head_dim, dtype, device="cpu"):
    """A pool filled with random data, so that slots the kernel must not touch are checked too."""
    shape = (num_pages, kv_heads, page_size, head_dim)
    if dtype == torch.int8:
        return LayerCache(torch.randint(-127, 128, shape, dtype=torch.int8, device=device),
                          torch.randint(-127, 128, int8_v_shape(shape), dtype=torch.int8,
                                        device=device),
                          torch.rand(shape[:3], device=device),
                          torch.rand(shape[:3], device=device))
    return LayerCache(torch.randn(shape, device=device).to(dtype),
                      torch.randn(shape, device=device).to(dtype))


def _clone(cache):
    return LayerCache(*(None if t is None else t.clone()
                        for t in (cache.k, cache.v, cache.k_scale, cache.v_scale)))


def _run(k, v, cache, slots):
    store_kv(k, v, cache.k, cache.v, slots, cache.k_scale, cache.v_scale)


def _cpu(cache):
    return LayerCache(*(None if t is None else t.cpu()
                        for t in (cache.k, cache.v, cache.k_scale, cache.v_scale)))


def _assert_matches_cpu_oracle(k, v, cache, before, slots):
    """``cache`` (after the kernel stored k, v at slots) equals the reference store applied to
    ``before`` (the cache's prior contents). The oracle runs on the CPU: CUDA torch divides by a
    Python scalar as a multiply by its reciprocal (1 ulp off IEEE division), which can move a
    code by one at a rounding tie."""
    expect = _clone(_cpu(before))
    reference.store_kv(k.cpu(), v.cpu(), expect, slots.cpu())
    _assert_same(_cpu(cache), expect)


def _assert_same(a, b):
    for x, y in zip((a.k, a.v, a.k_scale, a.v_scale), (b.k, b.v, b.k_scale, b.v_scale),
                    strict=True):
        if x is not None:
            assert torch.equal(x, y)


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.float16, torch.int8])
@pytest.mark.parametrize("kv_heads,head_dim", [(1, 16), (3, 32), (4, 24)])
def test_store_matches_reference(cache_dtype, kv_heads, head_dim):
    page_size, num_pages = 8, 6
    src_dtype = torch.float32 if cache_dtype == torch.float32 else torch.float16
    cache = _pool(num_pages, kv_heads, page_size, head_dim, cache_dtype)
    expect = _clone(cache)
    # scrambled slots over several pages, two padding tokens (-1) that must not write anything
    slots = torch.tensor([5 * 8 + 7, 0, -1, 2 * 8 + 3, 5 * 8 + 0, 1 * 8 + 7, -1, 3 * 8 + 4])
    k = torch.randn(len(slots), kv_heads, head_dim).to(src_dtype) * 3
    v = torch.randn(len(slots), kv_heads, head_dim).to(src_dtype)
    k[1, 0] = 0.0  # an all-zero row: scale must be 1e-8 / 127, codes 0
    _run(k, v, cache, slots)
    _assert_matches_cpu_oracle(k, v, cache, expect, slots)


def test_store_int8_rounds_half_to_even():
    """x / scale lands exactly on .5: codes must follow torch.round (half to even)."""
    cache = _pool(2, 2, 4, 16, torch.int8)
    expect = _clone(cache)
    k = torch.zeros(3, 2, 16)
    k[:, :, 0] = 127.0  # amax 127 -> scale exactly 1.0
    ties = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, -126.5, 3.5, 4.5])
    k[:, :, 1:11] = ties
    v = -k * 0.25  # scale 0.25: v / scale = -k, the same ties mirrored
    slots = torch.tensor([1, 6, 3])
    _run(k, v, cache, slots)
    _assert_matches_cpu_oracle(k, v, cache, expect, slots)
    got = cache.k[1, 0, 2, 1:11].float()
    assert torch.equal(got, torch.round(ties))


def test_store_strided_views():
    """k and v as column views of a fused qkv activation (row stride != heads * dim)."""
    kv_heads, head_dim, t = 2, 16, 5
    qkv = torch.randn(t, (4 + 2 * kv_heads) * head_dim, dtype=torch.float16)
    k = qkv[:, 4 * head_dim:(4 + kv_heads) * head_dim].view(t, kv_heads, head_dim)
    v = qkv[:, (4 + kv_heads) * head_dim:].view(t, kv_heads, head_dim)
    assert not k.is_contiguous()
    for dtype in (torch.float16, torch.int8):
        cache = _pool(3, kv_heads, 4, head_dim, dtype)
        expect = _clone(cache)
        slots = torch.tensor([11, 0, 4, 5, 9])
        _run(k, v, cache, slots)
        reference.store_kv(k, v, expect, slots)
        _assert_same(cache, expect)


def test_store_int64_offsets():
    """Page ids whose element offsets pass 2^31: the pool is a huge, mostly untouched allocation
    (virtual memory; only the written pages become resident)."""
    kv_heads, page_size, head_dim = 2, 16, 32
    cache, num_pages, per_page = huge_int8_pool(kv_heads, page_size, head_dim)
    pages = torch.tensor([num_pages - 1, num_pages - 5, 3])
    offs = torch.tensor([page_size - 1, 2, 7])
    slots = pages * page_size + offs
    assert int(pages.max()) * per_page > 2**31  # element offset of the first page written
    k = torch.randn(3, kv_heads, head_dim, dtype=torch.float16)
    v = torch.randn(3, kv_heads, head_dim, dtype=torch.float16)
    _run(k, v, cache, slots)
    kc, ks = reference.quantize_int8(k)
    vc, vs = reference.quantize_int8(v)
    assert torch.equal(cache.k[pages, :, offs], kc)
    assert torch.equal(cache.v[pages, :, :, offs], vc)  # transposed V pages
    assert torch.equal(cache.k_scale[pages, :, offs], ks)
    assert torch.equal(cache.v_scale[pages, :, offs], vs)


def test_store_takes_explicit_tiles():
    """``StoreTiles`` (warps, the PDL signal) changes the launch, not what is written."""
    from kernels.tiles import StoreTiles

    cache = _pool(4, 2, 8, 16, torch.int8)
    expect = _clone(cache)
    slots = torch.tensor([3, 17, -1, 30])
    k, v = torch.randn(4, 2, 16), torch.randn(4, 2, 16)
    store_kv(k, v, cache.k, cache.v, slots, cache.k_scale, cache.v_scale,
             tiles=StoreTiles(num_warps=2, pdl=False))
    _assert_matches_cpu_oracle(k, v, cache, expect, slots)
    with pytest.raises(ValueError, match="num_warps"):
        StoreTiles(num_warps=3)


def test_store_rejects_bad_arguments():
    cache = _pool(2, 2, 4, 16, torch.int8)
    k = torch.randn(1, 2, 16)
    with pytest.raises(ValueError, match="k_scale"):
        store_kv(k, k, cache.k, cache.v, torch.tensor([0]))
    with pytest.raises(ValueError, match="int64"):
        store_kv(k, k, cache.k, cache.v, torch.tensor([0], dtype=torch.int32),
                 cache.k_scale, cache.v_scale)
    with pytest.raises(ValueError, match="heads"):
        store_kv(torch.randn(1, 3, 16), torch.randn(1, 3, 16), cache.k, cache.v,
                 torch.tensor([0]), cache.k_scale, cache.v_scale)
    wide = torch.randn(1, 2, 32)
    with pytest.raises(ValueError, match="store_kv: v needs a contiguous last dim"):
        store_kv(k, wide[..., ::2], cache.k, cache.v, torch.tensor([0]), cache.k_scale,
                 cache.v_scale)
    with pytest.raises(ValueError, match="store_kv: slot_mapping must be contiguous"):
        store_kv(torch.randn(2, 2, 16), torch.randn(2, 2, 16), cache.k, cache.v,
                 torch.tensor([0, 9, 1, 9])[::2], cache.k_scale, cache.v_scale)


@pytest.mark.gpu
@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, torch.int8])
def test_store_gpu_matches_reference(cache_dtype):
    """Qwen3-8B KV shape (8 heads x 128), page 64, a 4k-token prefill chunk plus padding."""
    kv_heads, head_dim, page_size, num_pages = 8, 128, 64, 300
    cache = _pool(num_pages, kv_heads, page_size, head_dim, cache_dtype, device="cuda")
    expect = _clone(cache)
    t = 4096
    slots = torch.randperm(num_pages * page_size, device="cuda")[:t]
    slots[::97] = -1
    k = torch.randn(t, kv_heads, head_dim, device="cuda", dtype=torch.bfloat16) * 4
    v = torch.randn(t, kv_heads, head_dim, device="cuda", dtype=torch.bfloat16)
    _run(k, v, cache, slots)
    _assert_matches_cpu_oracle(k, v, cache, expect, slots)
