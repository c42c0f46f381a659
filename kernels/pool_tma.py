"""TMA tensor descriptors over a paged KV pool (host side), for prefill's TMA loads.

A layer's pool ``[num_pages, kv_heads, R, W]`` (R = page_size and W = head_dim for K and 16-bit
V; R = head_dim and W = page_size for INT8 V, whose pages are transposed) is viewed as one 2-D
tensor of ``rows x W`` so that one descriptor covers every page and head: the row of (page, head,
r) is ``page * stride(0) / W + head * stride(1) / W + r``. A K tile is ``[block_n, D]`` rows of one
page; an INT8 V tile ``[D, block_n]`` columns of one transposed page. Coordinates are int32 in the
kernel, so a pool must span fewer than 2^31 rows. Used by ``kernels/prefill_attention.py``.
"""

from __future__ import annotations

import torch


def pool_rows(cache: torch.Tensor) -> int:
    """Rows of a [num_pages, Hkv, R, W] pool viewed as [rows, W] (its TMA extent)."""
    num_pages, hkv, r, w = cache.shape
    return ((num_pages - 1) * cache.stride(0) + (hkv - 1) * cache.stride(1)) // w + r


def tma_ok(cache: torch.Tensor) -> bool:
    """Whether ``pool_descriptor`` can describe ``cache``: page and head strides multiples of
    the row width, a 16-byte aligned base and fewer than 2^31 rows (int32 coordinates)."""
    w = cache.shape[-1]
    return (cache.stride(0) % w == 0 and cache.stride(1) % w == 0 and cache.data_ptr() % 16 == 0
            and pool_rows(cache) < 2**31)


def pool_descriptor(cache: torch.Tensor, block_n: int, transposed: bool = False):
    """A host TMA descriptor viewing a [num_pages, Hkv, R, W] pool as [rows, W] rows, with
    tiles ``[block_n, W]`` (K, 16-bit V) or ``[R, block_n]`` (``transposed``: INT8 V).

    Raises:
        ValueError: for strides that are not multiples of W, or a pool of 2^31 rows or more.
    """
    from triton.tools.tensor_descriptor import TensorDescriptor

    r, w = cache.shape[-2:]
    if cache.stride(0) % w or cache.stride(1) % w:
        raise ValueError("prefill_attention: TMA needs page/head strides that are multiples of "
                         "the pool's last dim")
    rows = pool_rows(cache)
    if rows >= 2**31:
        raise ValueError(f"prefill_attention: a pool of {rows} rows is too large for TMA loads "
                         "(int32 coordinates); use tiles with use_tma=False")
    block = [r, block_n] if transposed else [block_n, w]
    return TensorDescriptor(cache, [rows, w], [w, 1], block)
