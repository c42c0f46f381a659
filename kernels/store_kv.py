"""KV store: write a step's new keys and values into the paged pool (quantizing for INT8 pools).

One program per new token handles all of its KV heads as a ``[HEADS, HEAD_DIM]`` tile: it reads
the token's slot from ``slot_mapping`` (negative = padding, nothing is written), splits it into
``page = slot // page_size`` and ``offset = slot % page_size`` and stores the rows of K and V at
``cache[page, head, offset, :]``. For an INT8 pool the same program computes the per-(token, head)
scale ``max(amax, 1e-8) / 127`` and the codes ``round_half_even(x / scale)`` clamped to +-127,
bit-identical to ``kernels.reference.quantize_int8`` (IEEE division via ``div_rn``; rounding by
the 1.5 * 2^23 trick, which rounds to nearest-even in float32 and also runs in the interpreter),
and writes the value codes into the transposed V pages (``v[page, head, :, offset]``, see
``infer/kv_pool.py``): one-byte stores ``page_size`` apart, a few hundred bytes per token.

Design after nano-vllm's ``store_kvcache`` (layers/attention.py), with the INT8 quantization
fused in as in vLLM's ``reshape_and_cache`` for quantized caches.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.checks import (
    check_contiguous,
    check_int8_scales,
    check_last_dim_contiguous,
    check_pool_pair,
)
from kernels.device import supports_pdl
from kernels.tiles import StoreTiles, store_tiles

# 1.5 * 2^23: adding and subtracting it rounds a float32 |x| < 2^22 to the nearest integer, ties to
# even (the hardware rounding mode), exactly like torch.round.
_ROUND_MAGIC = tl.constexpr(12582912.0)


@triton.jit
def _int8_scale(amax):
    """float32 row maxima of |x| (any shape) -> the rows' scales ``max(amax, 1e-8) / 127``."""
    amax = tl.maximum(amax, 1e-8)
    return tl.math.div_rn(amax, tl.full(amax.shape, 127.0, tl.float32))


@triton.jit
def _int8_codes(x, scale):
    """float32 ``x`` -> int8 codes ``round_half_even(x / scale)`` clamped to +-127; ``scale``
    broadcasts to x's shape (one per row)."""
    y = tl.math.div_rn(x, tl.broadcast_to(scale, x.shape))
    y = (y + _ROUND_MAGIC) - _ROUND_MAGIC
    return tl.minimum(tl.maximum(y, -127.0), 127.0).to(tl.int8)


@triton.jit
def _quantize_rows(x):
    """(H, D) floats -> int8 codes (H, D) and float32 scales (H,), as reference.quantize_int8."""
    x = x.to(tl.float32)
    scale = _int8_scale(tl.max(tl.abs(x), axis=1))
    return _int8_codes(x, scale[:, None]), scale


@triton.jit
def _store_kv_kernel(
    k_ptr,  # [T, Hkv, D] new keys (model dtype)
    v_ptr,  # [T, Hkv, D] new values
    k_cache_ptr,  # [num_pages, Hkv, PAGE_SIZE, D] model dtype or int8
    v_cache_ptr,  # [num_pages, Hkv, PAGE_SIZE, D]; int8: transposed [num_pages, Hkv, D, PAGE_SIZE]
    k_scale_ptr,  # float32 [num_pages, Hkv, PAGE_SIZE] (INT8 only)
    v_scale_ptr,  # float32 [num_pages, Hkv, PAGE_SIZE] (INT8 only)
    slot_ptr,  # int64 [T], page * PAGE_SIZE + offset; negative = skip
    stride_kt, stride_kh,
    stride_vt, stride_vh,
    stride_cp, stride_ch,  # k cache page and head strides (elements)
    stride_vcp, stride_vch,  # v cache page and head strides
    stride_sp, stride_sh,  # scale page and head strides
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
    IS_INT8: tl.constexpr,
    SIGNAL_DEPENDENTS: tl.constexpr,  # GPU: let a PDL-launched successor (decode) get scheduled
):
    if SIGNAL_DEPENDENTS:
        # a successor launched with programmatic dependent launch (decode attention with
        # pdl=True) may now be scheduled; it still waits for this kernel to finish
        tl.extra.cuda.gdc_launch_dependents()
    tok = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + tok).to(tl.int64)
    page = slot // PAGE_SIZE
    off = slot % PAGE_SIZE
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    in_tile = (offs_h[:, None] < NUM_KV_HEADS) & (offs_d[None, :] < HEAD_DIM)
    # Masks as explicit int1 blocks: triton 3.9's interpreter rejects a block & scalar mask.
    store_mask = in_tile & ((tl.zeros((BLOCK_H, BLOCK_D), dtype=tl.int64) + slot) >= 0)

    k = tl.load(k_ptr + tok * stride_kt + offs_h[:, None] * stride_kh + offs_d[None, :],
                mask=in_tile, other=0.0)
    v = tl.load(v_ptr + tok * stride_vt + offs_h[:, None] * stride_vh + offs_d[None, :],
                mask=in_tile, other=0.0)
    # (BLOCK_H, BLOCK_D) offsets into the pool
    c_off = (page * tl.cast(stride_cp, tl.int64) + offs_h[:, None] * tl.cast(stride_ch, tl.int64)
             + off * HEAD_DIM + offs_d[None, :])
    if IS_INT8:
        s_off = (page * tl.cast(stride_sp, tl.int64) + offs_h * tl.cast(stride_sh, tl.int64)
                 + off)
        s_mask = (offs_h < NUM_KV_HEADS) & ((tl.zeros((BLOCK_H,), dtype=tl.int64) + slot) >= 0)
        k_codes, k_sc = _quantize_rows(k)
        tl.store(k_cache_ptr + c_off, k_codes, mask=store_mask)
        tl.store(k_scale_ptr + s_off, k_sc, mask=s_mask)
        v_codes, v_sc = _quantize_rows(v)
        # transposed V pages: code (h, d) of slot `off` at d * PAGE_SIZE + off
        vt_off = (page * tl.cast(stride_vcp, tl.int64)
                  + offs_h[:, None] * tl.cast(stride_vch, tl.int64)
                  + offs_d[None, :] * PAGE_SIZE + off)
        tl.store(v_cache_ptr + vt_off, v_codes, mask=store_mask)
        tl.store(v_scale_ptr + s_off, v_sc, mask=s_mask)
    else:
        tl.store(k_cache_ptr + c_off, k.to(k_cache_ptr.dtype.element_ty), mask=store_mask)
        tl.store(v_cache_ptr + c_off, v.to(v_cache_ptr.dtype.element_ty), mask=store_mask)


def store_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor, k_scale: torch.Tensor | None = None,
             v_scale: torch.Tensor | None = None, *, tiles: StoreTiles | None = None) -> None:
    """Write new K/V rows into the paged pool in place (INT8 pools: codes plus scales).

    Args:
        k, v: [T, kv_heads, head_dim] float16/bfloat16/float32 new keys (after k-norm and RoPE)
            and values; the last dim must be contiguous (row strides are free, so views into a
            fused qkv tensor work).
        k_cache, v_cache: contiguous [num_pages, kv_heads, page_size, head_dim], the model dtype
            (values are cast to it) or int8; an int8 ``v_cache`` holds transposed pages,
            [num_pages, kv_heads, head_dim, page_size] (``infer/kv_pool.py``).
        slot_mapping: int64 [T], flat slot ``page * page_size + offset`` per token; a negative slot
            skips the token (padding rows of a CUDA-graph bucket).
        k_scale, v_scale: contiguous float32 [num_pages, kv_heads, page_size], required exactly
            when the caches are int8 (scale = max(amax, 1e-8) / 127 per token and head).
        tiles: a ``kernels.tiles.StoreTiles``; None takes ``store_tiles`` for the device.

    Allocates nothing and never reads device memory on the host, so it is safe under CUDA graph
    capture. Matches ``kernels.reference.store_kv`` bit for bit (INT8 included).

    Raises:
        ValueError: naming the argument, on mismatched shapes/dtypes, a missing or unexpected
            scale tensor, a non-contiguous cache or slot_mapping, or k/v whose last dim is not
            contiguous.
    """
    is_int8 = _check_inputs("store_kv", k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)
    num_tokens, kv_heads, head_dim = k.shape
    if num_tokens == 0:
        return
    if tiles is None:
        tiles = store_tiles(k.device, k_cache.dtype)
    _store_kv_kernel[(num_tokens,)](
        k_ptr=k, v_ptr=v, slot_ptr=slot_mapping,
        stride_kt=k.stride(0), stride_kh=k.stride(1),
        stride_vt=v.stride(0), stride_vh=v.stride(1),
        **_pool_args(k_cache, v_cache, k_scale, v_scale, is_int8),
        NUM_KV_HEADS=kv_heads, HEAD_DIM=head_dim,
        BLOCK_H=triton.next_power_of_2(kv_heads), BLOCK_D=triton.next_power_of_2(head_dim),
        SIGNAL_DEPENDENTS=bool(tiles.pdl) and supports_pdl(k.device),
        num_warps=tiles.num_warps,
    )


def _check_inputs(where: str, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                  v_cache: torch.Tensor, slot_mapping: torch.Tensor, k_scale: torch.Tensor | None,
                  v_scale: torch.Tensor | None) -> bool:
    """The checks of ``store_kv``'s Raises (``where``: the launcher, for the messages); returns
    whether the pool is INT8."""
    if k.dim() != 3 or k.shape != v.shape:
        raise ValueError(f"k and v must both be [T, kv_heads, head_dim], got {tuple(k.shape)} "
                         f"and {tuple(v.shape)}")
    if k.dtype not in (torch.float16, torch.bfloat16, torch.float32) or v.dtype != k.dtype:
        raise ValueError(f"k/v must share a float dtype, got {k.dtype} and {v.dtype}")
    check_pool_pair(k_cache, v_cache)
    num_tokens, kv_heads, head_dim = k.shape
    _, c_heads, _, c_dim = k_cache.shape
    if (c_heads, c_dim) != (kv_heads, head_dim):
        raise ValueError(f"cache holds {c_heads} heads x {c_dim} dims, k has {kv_heads} x "
                         f"{head_dim}")
    if slot_mapping.shape != (num_tokens,) or slot_mapping.dtype != torch.int64:
        raise ValueError(f"slot_mapping must be int64 [{num_tokens}], got {slot_mapping.dtype} "
                         f"{tuple(slot_mapping.shape)}")
    is_int8 = k_cache.dtype == torch.int8
    if is_int8 != (k_scale is not None) or is_int8 != (v_scale is not None):
        raise ValueError("pass k_scale and v_scale exactly when the cache is int8")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("k_cache and v_cache must be contiguous")
    check_last_dim_contiguous(where, k=k, v=v)
    check_contiguous(where, slot_mapping=slot_mapping)
    if is_int8:
        check_int8_scales(k_cache, k_scale, v_scale)
    return is_int8


def _pool_args(k_cache: torch.Tensor, v_cache: torch.Tensor, k_scale: torch.Tensor | None,
               v_scale: torch.Tensor | None, is_int8: bool) -> dict:
    """The pool's pointers, strides and constexprs, named as the kernels' parameters (checked
    arguments; a 16-bit pool passes its caches as never-read scale placeholders)."""
    if not is_int8:
        k_scale, v_scale = k_cache, v_cache  # placeholders, never read (IS_INT8=False)
    return dict(k_cache_ptr=k_cache, v_cache_ptr=v_cache, k_scale_ptr=k_scale,
                v_scale_ptr=v_scale, stride_cp=k_cache.stride(0), stride_ch=k_cache.stride(1),
                stride_vcp=v_cache.stride(0), stride_vch=v_cache.stride(1),
                stride_sp=k_scale.stride(0) if is_int8 else 0,
                stride_sh=k_scale.stride(1) if is_int8 else 0,
                PAGE_SIZE=k_cache.shape[2], IS_INT8=is_int8)
