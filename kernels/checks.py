"""Argument checks shared by the kernel launchers (the pool layout of ``infer/kv_pool.py``)."""

from __future__ import annotations

import torch


def check_pool_pair(k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    """Check that K and V form one layer of the pool (``infer/kv_pool.py``).

    Args:
        k_cache: [num_pages, kv_heads, page_size, head_dim], 16-bit/float32 or int8.
        v_cache: the same shape and dtype as ``k_cache``; for int8, transposed pages
            ``[num_pages, kv_heads, head_dim, page_size]``.

    The check is by shape only: when ``page_size == head_dim`` an INT8 V laid out like K has the
    transposed shape too and passes, and the kernels would read it as transposed. Build INT8
    pools with ``infer.kv_pool.KVPool`` or ``int8_v_shape`` and write them with ``store_kv``.

    Raises:
        ValueError: naming the expected layout.
    """
    if k_cache.dim() != 4 or v_cache.dim() != 4 or k_cache.dtype != v_cache.dtype:
        raise ValueError("k_cache and v_cache must share a dtype, each [num_pages, kv_heads, "
                         "page_size, head_dim]")
    p, h, s, d = k_cache.shape
    want = (p, h, d, s) if k_cache.dtype == torch.int8 else (p, h, s, d)
    if tuple(v_cache.shape) != want:
        what = ("[num_pages, kv_heads, head_dim, page_size] (INT8 pools store V pages "
                "transposed)" if k_cache.dtype == torch.int8 else "the shape of k_cache")
        raise ValueError(f"v_cache must be {what}: expected {want}, got {tuple(v_cache.shape)}")


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


def check_last_dim_contiguous(where: str, **tensors: torch.Tensor) -> None:
    """Check that each named tensor's last dim has stride 1 (the kernels index it with
    ``offs_d`` alone; a strided view would be read and written outside its elements).

    Args:
        where: the launcher's name, for the message.
        tensors: name -> tensor; a last dim of size <= 1 passes whatever its stride.

    Raises:
        ValueError: naming the first tensor that fails and its strides.
    """
    for name, t in tensors.items():
        if t.dim() == 0 or (t.stride(-1) != 1 and t.shape[-1] > 1):
            raise ValueError(f"{where}: {name} needs a contiguous last dim (stride 1), got shape "
                             f"{tuple(t.shape)} with strides {t.stride()}")


def check_contiguous(where: str, **tensors: torch.Tensor) -> None:
    """Check that each named tensor is contiguous.

    Raises:
        ValueError: naming the first tensor that is not.
    """
    for name, t in tensors.items():
        if not t.is_contiguous():
            raise ValueError(f"{where}: {name} must be contiguous, got shape {tuple(t.shape)} "
                             f"with strides {t.stride()}")
