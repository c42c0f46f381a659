"""Pools for kernel tests that more than one test file builds."""

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
