"""Argument checks shared by the kernel launchers (the pool layout of ``infer/kv_pool.py``)."""

from __future__ import annotations

import torch


def check_int8_scales(k_cache: torch.Tensor, k_scale: torch.Tensor,
                      v_scale: torch.Tensor) -> None:
    """Check the per-(position, KV head) scales of an INT8 pool.

    Args:
        k_cache: int8 [num_pages, kv_heads, page_size, head_dim].
        k_scale, v_scale: must be contiguous float32 [num_pages, kv_heads, page_size].

    Raises:
        ValueError: naming the expected layout.
    """
    if (k_scale.shape != k_cache.shape[:3] or v_scale.shape != k_cache.shape[:3]
            or k_scale.dtype != torch.float32 or v_scale.dtype != torch.float32
            or not (k_scale.is_contiguous() and v_scale.is_contiguous())):
        raise ValueError("k_scale/v_scale must be contiguous float32 [num_pages, kv_heads, "
                         "page_size]")
