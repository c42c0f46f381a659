"""Pools for kernel tests that more than one test file builds, and the check that two pools hold
the same bits."""

from __future__ import annotations

import torch

from infer.kv_pool import LayerCache, int8_v_shape


def huge_int8_pool(kv_heads: int, page_size: int, head_dim: int) -> tuple[LayerCache, int, int]:
    """An INT8 layer pool with more pages than 2^31 elements reach: ``(cache, num_pages,
    elements per page)``. A huge, mostly untouched allocation (virtual memory: only the pages
    written become resident), for the stores' int64-offset tests."""
    per_page = kv_heads * page_size * head_dim
    num_pages = 2**31 // per_page + 8
    shape = (num_pages, kv_heads, page_size, head_dim)
    cache = LayerCache(torch.empty(shape, dtype=torch.int8),
                       torch.empty(int8_v_shape(shape), dtype=torch.int8),
                       torch.empty(shape[:3]), torch.empty(shape[:3]))
    return cache, num_pages, per_page


def assert_same_pool(a: LayerCache, b: LayerCache) -> None:
    """``a`` and ``b`` hold the same tensors, bit for bit (the same ones absent)."""
    for name in ("k", "v", "k_scale", "v_scale"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert torch.equal(x, y), f"pool {name} differs"
