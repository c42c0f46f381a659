"""Per-head q/k RMSNorm + RoPE with the step's K/V stored straight into the paged pool.

One launch does what ``kernels/qk_norm_rope.py`` followed by ``kernels/store_kv.py`` does, with
the same grid idea as the former, ``(T, Hq + Hkv)``: one program per (token, head) row.

- q-head programs are ``qk_norm_rope``'s: they write the normed and rotated q row to ``q_out``.
- k-head programs read the token's slot (negative = padding: the program stores nothing), norm
  and rotate the k row in registers and write it to the pool at ``cache[page, head, offset, :]``
  instead of to a k tensor, then copy the head's v row to its slot. An INT8 pool gets codes and
  a per-(token, head) scale for each, with ``store_kv``'s quantization (``_int8_scale``,
  ``_int8_codes``: IEEE division, round half to even) and V pages transposed
  (``v[page, head, :, offset]``).

Bit-identical to ``qk_norm_rope`` then ``store_kv`` (the unfused path, the tests' oracle): the
row math is the same jit code (``_rope_cos_sin``, ``_norm_rope_halves``) with the same block and
warp count, and the k row a program stores is the model-dtype row ``qk_norm_rope`` would have
written and ``store_kv`` read back. Only the row maximum of an INT8 row is taken over its two
halves in turn, which a maximum does not notice.

Programmatic dependent launch (CUDA sm_90+, ``pdl``): the kernel signals
``griddepcontrol.launch_dependents`` at its start, as ``store_kv`` does, so that decode stage 1
may be scheduled while it runs. Unlike after ``store_kv``, stage 1 must then wait before it loads
q, which this kernel writes (``kernels.decode_attention``'s ``q_from_predecessor``, which the
attention backend's ``attend_stored`` passes), so it no longer walks earlier keys while the
store runs.

Fusion after TensorRT-LLM's QKV preprocessing (``applyBiasRopeUpdateKVCache``: RoPE and the
paged KV-cache write, quantizing ones included, in one kernel), with Qwen3's q/k-norm in front as
in ``kernels/qk_norm_rope.py``; the store is ``kernels/store_kv.py``'s (nano-vllm's
``store_kvcache``, INT8 as vLLM's ``reshape_and_cache``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.device import supports_pdl
from kernels.qk_norm_rope import _check_inputs as _check_qk_inputs
from kernels.qk_norm_rope import _launch_options, _norm_rope_halves, _norm_rope_row, _rope_cos_sin
from kernels.store_kv import _check_inputs as _check_store_inputs
from kernels.store_kv import _int8_codes, _int8_scale, _pool_args


@triton.jit
def _store_row(x1, x2, dst_ptr, scale_ptr, offs, mask, D_STRIDE: tl.constexpr,
               HALF: tl.constexpr, IS_INT8: tl.constexpr):
    """Store one head row given as its halves ``x1``, ``x2`` (BLOCK_HALF,) in the model dtype at
    ``dst_ptr`` (element d at ``d * D_STRIDE``): cast to the pool's dtype, or for INT8 as codes
    with the row's scale at ``scale_ptr``."""
    if IS_INT8:
        x1 = x1.to(tl.float32)
        x2 = x2.to(tl.float32)
        scale = _int8_scale(tl.maximum(tl.max(tl.abs(x1), axis=0),
                                              tl.max(tl.abs(x2), axis=0)))
        tl.store(dst_ptr + offs * D_STRIDE, _int8_codes(x1, scale), mask=mask)
        tl.store(dst_ptr + (HALF + offs) * D_STRIDE, _int8_codes(x2, scale), mask=mask)
        tl.store(scale_ptr, scale)
    else:
        dtype = dst_ptr.dtype.element_ty
        tl.store(dst_ptr + offs * D_STRIDE, x1.to(dtype), mask=mask)
        tl.store(dst_ptr + (HALF + offs) * D_STRIDE, x2.to(dtype), mask=mask)


@triton.jit
def _qk_norm_rope_store_kernel(
    q_ptr,  # [T, Hq, D] model dtype (last dim contiguous; views into a fused qkv are fine)
    k_ptr,  # [T, Hkv, D]
    v_ptr,  # [T, Hkv, D]
    qw_ptr,  # [D] q_norm weight
    kw_ptr,  # [D] k_norm weight
    q_out_ptr,  # [T, Hq, D] contiguous
    k_cache_ptr,  # [num_pages, Hkv, PAGE_SIZE, D] model dtype or int8
    v_cache_ptr,  # [num_pages, Hkv, PAGE_SIZE, D]; int8: transposed [num_pages, Hkv, D, PAGE_SIZE]
    k_scale_ptr,  # float32 [num_pages, Hkv, PAGE_SIZE] (INT8 only)
    v_scale_ptr,  # float32 [num_pages, Hkv, PAGE_SIZE] (INT8 only)
    slot_ptr,  # int64 [T], page * PAGE_SIZE + offset; negative = skip
    pos_ptr,  # int64 [T]
    inv_freq_ptr,  # float32 [D/2]
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
    stride_qot, stride_qoh,
    stride_cp, stride_ch,  # k cache page and head strides (elements)
    stride_vcp, stride_vch,  # v cache page and head strides
    stride_sp, stride_sh,  # scale page and head strides
    eps,  # float32
    attention_factor,  # float32, multiplies cos and sin
    NUM_Q_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    IS_INT8: tl.constexpr,
    PRECISE_TRIG: tl.constexpr,
    SIGNAL_DEPENDENTS: tl.constexpr,  # GPU: let a PDL-launched successor (decode) get scheduled
):
    if SIGNAL_DEPENDENTS:
        # the successor may be scheduled now; it must wait (gdc_wait) before it reads q or K/V
        tl.extra.cuda.gdc_launch_dependents()
    tok = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    HALF: tl.constexpr = HEAD_DIM // 2
    dtype = q_out_ptr.dtype.element_ty
    offs = tl.arange(0, BLOCK_HALF)
    mask = offs < HALF
    if head < NUM_Q_HEADS:
        cos, sin = _rope_cos_sin(pos_ptr, inv_freq_ptr, tok, attention_factor, offs, mask,
                                     dtype, PRECISE_TRIG)
        h = head.to(tl.int64)
        _norm_rope_row(q_ptr + tok * stride_qt + h * stride_qh, qw_ptr,
                           q_out_ptr + tok * stride_qot + h * stride_qoh,
                           cos, sin, eps, offs, mask, HEAD_DIM, HALF)
    else:
        slot = tl.load(slot_ptr + tok).to(tl.int64)
        if slot >= 0:  # padding rows store nothing
            cos, sin = _rope_cos_sin(pos_ptr, inv_freq_ptr, tok, attention_factor, offs,
                                         mask, dtype, PRECISE_TRIG)
            h = (head - NUM_Q_HEADS).to(tl.int64)
            page = slot // PAGE_SIZE
            off = slot % PAGE_SIZE
            k1, k2 = _norm_rope_halves(k_ptr + tok * stride_kt + h * stride_kh, kw_ptr, cos,
                                           sin, eps, offs, mask, HEAD_DIM, HALF)
            v_row = v_ptr + tok * stride_vt + h * stride_vh
            v1 = tl.load(v_row + offs, mask=mask, other=0.0)
            v2 = tl.load(v_row + HALF + offs, mask=mask, other=0.0)
            s_off = page * tl.cast(stride_sp, tl.int64) + h * tl.cast(stride_sh, tl.int64) + off
            k_dst = (k_cache_ptr + page * tl.cast(stride_cp, tl.int64)
                     + h * tl.cast(stride_ch, tl.int64) + off * HEAD_DIM)
            v_page = (v_cache_ptr + page * tl.cast(stride_vcp, tl.int64)
                      + h * tl.cast(stride_vch, tl.int64))
            _store_row(k1, k2, k_dst, k_scale_ptr + s_off, offs, mask, 1, HALF, IS_INT8)
            if IS_INT8:  # transposed V pages: element d of slot `off` at d * PAGE_SIZE + off
                _store_row(v1, v2, v_page + off, v_scale_ptr + s_off, offs, mask, PAGE_SIZE,
                           HALF, IS_INT8)
            else:
                _store_row(v1, v2, v_page + off * HEAD_DIM, v_scale_ptr, offs, mask, 1, HALF,
                           IS_INT8)


def qk_norm_rope_store(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       q_weight: torch.Tensor, k_weight: torch.Tensor, eps: float,
                       positions: torch.Tensor, inv_freq: torch.Tensor, attention_factor: float,
                       k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor,
                       k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None,
                       *, pdl: bool = True) -> torch.Tensor:
    """``qk_norm_rope`` of q and k, with the normed and rotated k and the raw v stored into the
    pool at ``slot_mapping`` as ``store_kv`` stores them; returns only q.

    Args:
        q, k, q_weight, k_weight, eps, positions, inv_freq, attention_factor: as
            ``kernels.qk_norm_rope.qk_norm_rope`` (k: [T, kv_heads, head_dim]).
        v: [T, kv_heads, head_dim] new values, k's dtype, last dim contiguous.
        k_cache, v_cache, slot_mapping, k_scale, v_scale: as ``kernels.store_kv.store_kv`` (a
            negative slot stores nothing for its token).
        pdl: signal programmatic dependent launch at the start (CUDA sm_90+ only, ignored
            elsewhere); a PDL-launched successor must wait before it reads q or this step's K/V.

    Returns:
        q_out: a new contiguous tensor shaped and typed like q, bit-identical to
        ``qk_norm_rope``'s; the pool then holds bit for bit what ``store_kv`` of
        ``qk_norm_rope``'s k and of v would have written (allocation only, no host sync: safe
        under CUDA graph capture).

    Raises:
        ValueError: naming the argument, on what ``qk_norm_rope`` or ``store_kv`` rejects.
    """
    _check_qk_inputs("qk_norm_rope_store", q, k, q_weight, k_weight, positions, inv_freq)
    is_int8 = _check_store_inputs("qk_norm_rope_store", k, v, k_cache, v_cache, slot_mapping,
                                   k_scale, v_scale)
    num_tokens, num_q_heads, head_dim = q.shape
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if num_tokens == 0:
        return q_out
    _qk_norm_rope_store_kernel[(num_tokens, num_q_heads + k.shape[1])](
        q_ptr=q, k_ptr=k, v_ptr=v, qw_ptr=q_weight, kw_ptr=k_weight, q_out_ptr=q_out,
        slot_ptr=slot_mapping, pos_ptr=positions, inv_freq_ptr=inv_freq,
        stride_qt=q.stride(0), stride_qh=q.stride(1), stride_kt=k.stride(0), stride_kh=k.stride(1),
        stride_vt=v.stride(0), stride_vh=v.stride(1),
        stride_qot=q_out.stride(0), stride_qoh=q_out.stride(1),
        **_pool_args(k_cache, v_cache, k_scale, v_scale, is_int8),
        eps=float(eps), attention_factor=float(attention_factor),
        NUM_Q_HEADS=num_q_heads, HEAD_DIM=head_dim,
        SIGNAL_DEPENDENTS=bool(pdl) and supports_pdl(q.device), **_launch_options(head_dim),
    )
    return q_out
