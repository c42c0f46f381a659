"""Per-head q/k RMSNorm followed by RoPE, for q and k in one launch.

Grid ``(T, (Hq + Hkv) / G)``: one program per token and group of ``G`` heads
(``heads_per_program``), each head a row of ``head_dim`` values, which it loads as the two
rotate-half halves ``x1 = x[:D/2]`` and ``x2 = x[D/2:]``. It computes the token's cos/sin itself
from ``positions`` and ``inv_freq`` (no table: any position works, and nothing is read on the
host), once for its ``G`` heads, then writes ``(n1 cos - n2 sin, n2 cos + n1 sin)`` where
``n = weight * rmsnorm(x)`` for each. ``G`` is 1 for steps of up to ``MAX_DECODE_ROWS`` tokens
(the decode and verify steps, where a step is latency-bound and its few programs run side by
side) and up to 8 for prefill chunks, where one program per head would compute the same
full-range ``cosf``/``sinf`` once per head of every token and launch one one-warp program per
head. A head's row is computed by the same code with the same cos/sin in either case, so the
results do not depend on ``G`` (tested bit for bit).

Numerics mirror ``models/qwen3.py`` + ``models/rope.py`` (transformers' Qwen3) step by step,
including every rounding to the model dtype: the norm as in ``kernels/rmsnorm.py``;
``freqs = float32(position) * inv_freq``, ``cos(freqs) * attention_factor`` rounded to the model
dtype (likewise sin); each of ``n * cos`` and ``rotate_half(n) * sin`` rounded, then their sum.
On CUDA cos/sin are libdevice's ``cosf``/``sinf`` (the same full-range functions torch's CUDA
kernels call; ``tl.cos`` lowers to the approximate instruction, which loses accuracy at
positions in the tens of thousands). Under the Triton interpreter (CPU tests) they are numpy's.

On the PDL chain (``kernels/pdl_chain.py``) the angles are computed before the kernel waits for
the qkv projection.

RoPE: Su et al. 2021 (RoFormer), rotate-half layout; QK-norm as in Qwen3. Fusion after vLLM's
and SGLang's fused qk-norm + rope kernels.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from kernels.checks import check_contiguous, check_last_dim_contiguous
from kernels.pdl_chain import chain_pdl


@triton.jit
def _rope_cos_sin(pos_ptr, inv_freq_ptr, tok, attention_factor, offs, mask,
                  DTYPE: tl.constexpr, PRECISE_TRIG: tl.constexpr):
    """cos and sin of token ``tok``'s angles times ``attention_factor``, each rounded to the
    model dtype ``DTYPE`` and returned as float32 (BLOCK_HALF,)."""
    freqs = tl.load(pos_ptr + tok).to(tl.float32) * tl.load(inv_freq_ptr + offs, mask=mask,
                                                              other=0.0)
    return rope_trig(freqs, attention_factor, DTYPE, PRECISE_TRIG)


@triton.jit
def rope_trig(freqs, attention_factor, DTYPE: tl.constexpr, PRECISE_TRIG: tl.constexpr):
    """cos and sin of the float32 angles ``freqs`` times ``attention_factor``, each rounded to
    the model dtype ``DTYPE`` and returned as float32 (any shape). PRECISE_TRIG: libdevice's
    full-range ``cosf``/``sinf`` (GPU), else ``tl.cos``/``tl.sin`` (the interpreter's numpy)."""
    if PRECISE_TRIG:
        cos = libdevice.cos(freqs)
        sin = libdevice.sin(freqs)
    else:
        cos = tl.cos(freqs)
        sin = tl.sin(freqs)
    cos = (cos * attention_factor).to(DTYPE).to(tl.float32)
    sin = (sin * attention_factor).to(DTYPE).to(tl.float32)
    return cos, sin


@triton.jit
def _norm_rope_halves(x_ptr, w_ptr, cos, sin, eps, offs, mask,
                      HEAD_DIM: tl.constexpr, HALF: tl.constexpr):
    """Normalize the head row at ``x_ptr`` and rotate it: its two halves ``(o1, o2)``, each
    (BLOCK_HALF,) in the row's dtype (lanes past ``mask`` hold 0).
    cos/sin: float32 (BLOCK_HALF,), already rounded to the model dtype."""
    dtype = x_ptr.dtype.element_ty
    x1 = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + HALF + offs, mask=mask, other=0.0).to(tl.float32)
    mean_sq = (tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0)) / HEAD_DIM
    rstd = tl.math.rsqrt(mean_sq + eps)
    w1 = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    w2 = tl.load(w_ptr + HALF + offs, mask=mask, other=0.0).to(tl.float32)
    n1 = (w1 * (x1 * rstd).to(dtype).to(tl.float32)).to(dtype).to(tl.float32)
    n2 = (w2 * (x2 * rstd).to(dtype).to(tl.float32)).to(dtype).to(tl.float32)
    o1 = (n1 * cos).to(dtype).to(tl.float32) - (n2 * sin).to(dtype).to(tl.float32)
    o2 = (n2 * cos).to(dtype).to(tl.float32) + (n1 * sin).to(dtype).to(tl.float32)
    return o1.to(dtype), o2.to(dtype)


@triton.jit
def _norm_rope_row(x_ptr, w_ptr, o_ptr, cos, sin, eps, offs, mask,
                   HEAD_DIM: tl.constexpr, HALF: tl.constexpr):
    """Normalize one head row at ``x_ptr``, rotate it and store it at ``o_ptr`` (same dtype)."""
    o1, o2 = _norm_rope_halves(x_ptr, w_ptr, cos, sin, eps, offs, mask, HEAD_DIM, HALF)
    tl.store(o_ptr + offs, o1, mask=mask)
    tl.store(o_ptr + HALF + offs, o2, mask=mask)


@triton.jit
def _qk_norm_rope_kernel(
    q_ptr,  # [T, Hq, D] model dtype (last dim contiguous; views into a fused qkv are fine)
    k_ptr,  # [T, Hkv, D]
    qw_ptr,  # [D] q_norm weight
    kw_ptr,  # [D] k_norm weight
    q_out_ptr,  # [T, Hq, D] contiguous
    k_out_ptr,  # [T, Hkv, D] contiguous
    pos_ptr,  # int64 [T]
    inv_freq_ptr,  # float32 [D/2]
    stride_qt, stride_qh, stride_kt, stride_kh,
    stride_qot, stride_qoh, stride_kot, stride_koh,
    eps,  # float32
    attention_factor,  # float32, multiplies cos and sin
    NUM_Q_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    PRECISE_TRIG: tl.constexpr,
    HEADS_PER_PROGRAM: tl.constexpr = 1,  # G: divides Hq + Hkv (heads_per_program)
    USE_PDL: tl.constexpr = False,  # on the PDL chain (kernels/pdl_chain.py)
):
    tok = tl.program_id(0).to(tl.int64)
    group = tl.program_id(1)
    HALF: tl.constexpr = HEAD_DIM // 2
    dtype = q_out_ptr.dtype.element_ty
    offs = tl.arange(0, BLOCK_HALF)
    mask = offs < HALF
    # positions and inv_freq are no chain kernel's output: the angles before the wait
    cos, sin = _rope_cos_sin(pos_ptr, inv_freq_ptr, tok, attention_factor, offs, mask, dtype,
                             PRECISE_TRIG)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()  # q and k: the qkv GEMV's output
    for i in tl.static_range(HEADS_PER_PROGRAM):
        head = group * HEADS_PER_PROGRAM + i
        if head < NUM_Q_HEADS:
            h = head.to(tl.int64)
            _norm_rope_row(q_ptr + tok * stride_qt + h * stride_qh, qw_ptr,
                           q_out_ptr + tok * stride_qot + h * stride_qoh,
                           cos, sin, eps, offs, mask, HEAD_DIM, HALF)
        else:
            h = (head - NUM_Q_HEADS).to(tl.int64)
            _norm_rope_row(k_ptr + tok * stride_kt + h * stride_kh, kw_ptr,
                           k_out_ptr + tok * stride_kot + h * stride_koh,
                           cos, sin, eps, offs, mask, HEAD_DIM, HALF)


MAX_DECODE_ROWS = 16  # steps of up to this many tokens keep one head per program


def heads_per_program(num_tokens: int, num_heads: int) -> int:
    """``G``, the heads of one token per program of ``_qk_norm_rope_kernel``: 1 for a step of
    at most ``MAX_DECODE_ROWS`` tokens, else the largest of 8, 4, 2 that divides ``num_heads``
    (Hq + Hkv; 1 if none does)."""
    if num_tokens <= MAX_DECODE_ROWS:
        return 1
    return next((g for g in (8, 4, 2) if num_heads % g == 0), 1)


def qk_norm_rope(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor,
                 k_weight: torch.Tensor, eps: float, positions: torch.Tensor,
                 inv_freq: torch.Tensor, attention_factor: float = 1.0
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head RMSNorm of q and k (weights ``q_weight``/``k_weight``), then RoPE at ``positions``.

    Args:
        q: [T, Hq, head_dim] float16/bfloat16/float32, last dim contiguous (any other strides,
            e.g. a view into the fused qkv output).
        k: [T, Hkv, head_dim], same dtype and layout rules.
        q_weight, k_weight: [head_dim] in the same dtype.
        eps: the RMSNorm epsilon.
        positions: int64 [T] on the same device, each token's position (read on the device only).
        inv_freq: float32 [head_dim // 2] on the same device, radians per position of each rotated
            pair (``models.rope.rope_parameters``, YaRN included).
        attention_factor: multiplies cos and sin (YaRN's mscale; 1.0 without YaRN).

    Returns:
        ``(q_out, k_out)``: new contiguous tensors shaped and typed like q and k (allocation only,
        no host sync: safe under CUDA graph capture).

    Matches ``kernels.reference.qk_norm_rope`` (the model's torch path) up to the float32
    reduction order and the last bit of rsqrt/cos/sin.

    Raises:
        ValueError: naming the argument, on wrong shapes, dtypes, strides (see Args) or an odd
            head_dim.
    """
    _check_inputs("qk_norm_rope", q, k, q_weight, k_weight, positions, inv_freq)
    num_tokens, num_q_heads, head_dim = q.shape
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    if num_tokens == 0:
        return q_out, k_out
    pdl = chain_pdl(q.device)
    num_heads = num_q_heads + k.shape[1]
    group = heads_per_program(num_tokens, num_heads)
    _qk_norm_rope_kernel[(num_tokens, num_heads // group)](
        q_ptr=q, k_ptr=k, qw_ptr=q_weight, kw_ptr=k_weight, q_out_ptr=q_out, k_out_ptr=k_out,
        pos_ptr=positions, inv_freq_ptr=inv_freq,
        stride_qt=q.stride(0), stride_qh=q.stride(1), stride_kt=k.stride(0), stride_kh=k.stride(1),
        stride_qot=q_out.stride(0), stride_qoh=q_out.stride(1),
        stride_kot=k_out.stride(0), stride_koh=k_out.stride(1),
        eps=float(eps), attention_factor=float(attention_factor),
        NUM_Q_HEADS=num_q_heads, HEAD_DIM=head_dim, HEADS_PER_PROGRAM=group,
        **_launch_options(head_dim), **({"USE_PDL": True, "launch_pdl": True} if pdl else {}),
    )
    return q_out, k_out


def _check_inputs(where: str, q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor,
                  k_weight: torch.Tensor, positions: torch.Tensor,
                  inv_freq: torch.Tensor) -> None:
    """The checks of ``qk_norm_rope``'s Raises (``where``: the launcher, for the messages)."""
    if q.dim() != 3 or k.dim() != 3 or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
        raise ValueError(f"q must be [T, Hq, D] and k [T, Hkv, D], got {tuple(q.shape)} and "
                         f"{tuple(k.shape)}")
    num_tokens, _, head_dim = q.shape
    if head_dim % 2:
        raise ValueError(f"RoPE needs an even head_dim, got {head_dim}")
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32) or any(
            t.dtype != q.dtype for t in (k, q_weight, k_weight)):
        raise ValueError(f"q, k, q_weight and k_weight must share a float dtype, got {q.dtype}, "
                         f"{k.dtype}, {q_weight.dtype}, {k_weight.dtype}")
    if q_weight.shape != (head_dim,) or k_weight.shape != (head_dim,):
        raise ValueError(f"q_weight and k_weight must be [{head_dim}]")
    if positions.shape != (num_tokens,) or positions.dtype != torch.int64:
        raise ValueError(f"positions must be int64 [{num_tokens}], got {positions.dtype} "
                         f"{tuple(positions.shape)}")
    if inv_freq.shape != (head_dim // 2,) or inv_freq.dtype != torch.float32:
        raise ValueError(f"inv_freq must be float32 [{head_dim // 2}], got {inv_freq.dtype} "
                         f"{tuple(inv_freq.shape)}")
    check_last_dim_contiguous(where, q=q, k=k)
    check_contiguous(where, q_weight=q_weight, k_weight=k_weight, inv_freq=inv_freq,
                     positions=positions)


def _launch_options(head_dim: int) -> dict:
    """The constexprs and launch options a row kernel takes for ``head_dim`` (the same in every
    launcher of ``_norm_rope_halves``, so that its reduction runs in the same order)."""
    return dict(BLOCK_HALF=triton.next_power_of_2(head_dim // 2),
                PRECISE_TRIG=os.environ.get("TRITON_INTERPRET") != "1",
                num_warps=1 if head_dim <= 128 else 2)
