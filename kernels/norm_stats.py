"""An add + RMSNorm split between the GEMV that writes a row and the GEMV that reads it: the
``@triton.jit`` helpers of ``kernels/gemv.py``'s residual epilogue and normalizing prologue.

- Epilogue (``add_residual_and_stats``, in ``o_proj``/``down_proj``): the projection rounded to
  the model dtype plus the residual stream, added in float32 and rounded (the value
  ``kernels/rmsnorm.py`` forms), is stored as the new stream, and each program stores the float32
  sum of squares of its ``BLOCK_N`` columns of it: ``stats[m, j]`` for row ``m`` and column block
  ``j`` (``[M, NB]``, ``NB`` = the producer's column blocks).
- Prologue (``rstd_from_stats``, ``normalize_tile``, in the next ``qkv``/gate-up GEMV): each
  program sums a row's ``NB`` partials in one fixed order (one load of ``NB`` floats per row from
  L2, where recomputing the statistics from the row would be a serial walk over K in every
  program), takes ``rstd = rsqrt(sum / K + eps)``, and normalizes each ``x`` tile as it loads it,
  with ``kernels/rmsnorm.py``'s roundings: ``x * rstd`` rounded to the model dtype, times the norm
  weight, rounded again.

Only the summation order of the squares differs from ``kernels/rmsnorm.py``. A row's partials and
their sum depend on that row alone, and the tiles on the weights alone, so a row's result is
the same whatever the other rows (``kernels/gemv.py``'s row invariance), and deterministic.

Idea: vLLM's and TensorRT-LLM's fused add + norm epilogues; the statistics handed from the
producer to the consumer as in the persistent "megakernel" decoders (Hazy Research 2025).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def add_residual_and_stats(acc, res_ptr, y_ptr, stats_ptr, rows_m, out_n, in_m, omask,
                           stride_rm, stride_ym, col_block, nb):
    """Store ``round(round(acc) + residual)`` ([BLOCK_M, BLOCK_N], float32 ``acc``) at ``y_ptr``
    and its rows' sums of squares at ``stats[rows_m, col_block]`` (row stride ``nb``)."""
    dtype = y_ptr.dtype.element_ty
    r = tl.load(res_ptr + rows_m[:, None] * stride_rm + out_n[None, :], mask=omask, other=0.0)
    y = (acc.to(dtype).to(tl.float32) + r.to(tl.float32)).to(dtype)
    tl.store(y_ptr + rows_m[:, None] * stride_ym + out_n[None, :], y, mask=omask)
    yf = tl.where(omask, y.to(tl.float32), 0.0)
    tl.store(stats_ptr + rows_m * nb + col_block, tl.sum(yf * yf, axis=1), mask=in_m)


@triton.jit
def rstd_from_stats(stats_ptr, rows_m, in_m, K, eps, NB: tl.constexpr, BLOCK_NB: tl.constexpr):
    """``rsqrt(mean of squares + eps)`` per row (float32 [BLOCK_M]) from the row's ``NB``
    partial sums (``BLOCK_NB``: ``NB`` rounded up to a power of two)."""
    offs = tl.arange(0, BLOCK_NB)
    s = tl.load(stats_ptr + rows_m[:, None] * NB + offs[None, :],
                mask=in_m[:, None] & (offs < NB)[None, :], other=0.0)
    return tl.math.rsqrt(tl.sum(s, axis=1) / K + eps)


@triton.jit
def normalize_tile(x, rstd, norm_w_ptr, k_idx, k_mask):
    """The RMSNorm of an ``x`` tile [BLOCK_M, BLOCK_K] (model dtype) at columns ``k_idx``:
    ``round(w * round(x * rstd))``; masked columns give 0."""
    dtype = x.dtype
    xn = (x.to(tl.float32) * rstd[:, None]).to(dtype).to(tl.float32)
    w = tl.load(norm_w_ptr + k_idx, mask=k_mask, other=0.0).to(tl.float32)
    return (w[None, :] * xn).to(dtype)


def stats_blocks(n: int, block_n: int) -> tuple[int, int]:
    """``(NB, BLOCK_NB)``: the partials per row a producer with ``block_n`` columns per program
    writes for ``n`` columns, and that count rounded up to a power of two."""
    nb = triton.cdiv(n, block_n)
    return nb, triton.next_power_of_2(nb)
