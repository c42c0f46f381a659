"""The decode GEMVs with the RMSNorm between them folded in: no norm kernel between ``o_proj`` and
gate/up, or between ``down_proj`` and the next layer's qkv projection.

A pre-norm decoder layer computes ``s = residual + h @ W_o^T`` and then ``y = norm(s) @ W^T`` with
``norm(s) = g * s * rstd(s)`` and ``rstd(s) = rsqrt(mean(s^2) + eps)``. ``rstd`` is one number per
row, so it can be taken out of the dot: ``y = rstd(s) * ((g * s) @ W^T)``. The work then splits
between the two GEMVs with no kernel between them:

- **the producer** (``gemv_residual_norm``: ``o_proj``, ``down_proj``) adds the residual in its
  epilogue, exactly as the torch path does (the projection rounded to the model dtype, then the
  model-dtype add), and stores three things: the new stream ``s``, the next norm's operand
  ``round(g * s)``, and, per program, the float32 sum of ``s^2`` over its ``BLOCK_N`` columns
  (``[programs, 16]``; no atomics, so the sum's order is fixed);
- **the consumer** (``gemv_rstd``: qkv, the SwiGLU gate/up) streams its weight against
  ``round(g * s)`` with the plain GEMV's loop, adds the producer's partial sums in program order,
  and multiplies its float32 accumulator by ``rstd`` before the rounding.

Both kernels issue their extra loads (the residual; the partial sums) right after the PDL wait,
before the weight stream, and use them after it: the loop itself is the plain GEMV's. Every
consumer program reads all the producer's sums of its rows (the 8B: 128 floats a row, from L2;
held in registers across the loop, ``SQ_BLOCKS`` x 16 floats a program, masked to the M rows):
a few hundred bytes a program against the tens of KB of weight it streams.

**Numerics.** The stream ``s`` is the torch path's bit for bit. The consumer's result differs from
``norm(s) @ W^T`` in its roundings only: transformers rounds ``s * rstd`` and then ``g * that`` to
the model dtype before the matmul; here ``g * s`` is rounded once and ``rstd`` is applied in
float32 to the sum. The error is of the same size (one bf16 rounding of the operand against two),
but it is not the same bits, so this path has its own oracle (``kernels.reference``'s
``linear_rstd``) and the model's tests compare it with the unfused path by tolerance and greedy
tokens (``models.qwen3_fused.NORM_IN_GEMV``). Rows stay invariant (each row's sums are its own).

Producers that run split-K (the small models' narrow ``o_proj``, ``kernels.tiles.gemv_split_k``)
are not supported: their partials go through the reduce in the add + RMSNorm instead.

The idea (the per-row scale of a norm moved past the matmul that follows it) is the one
FlashNorm (Graef et al. 2024) applies with the norm weights folded into the next weights; here
the weights are left as they are, and ``g * s`` is formed by the producer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from kernels.gemv import MAX_ROWS, _check, launch_unsplit
from kernels.tiles import GemvTiles, gemv_tiles


@dataclass(frozen=True)
class PendingNorm:
    """Rows whose RMSNorm is pending: what ``gemv_residual_norm`` leaves for ``gemv_rstd``.

    Attributes:
        scaled: [M, K] model dtype, ``round(g * s)`` (``g`` the norm's weight, ``s`` the stream).
        sumsq: float32 [programs, 16], contiguous: ``sumsq[p, m]`` is the sum of ``s[m, j]^2``
            over program ``p``'s columns (rows ``>= M`` zero).
        eps: the norm's epsilon.
    """

    scaled: torch.Tensor
    sumsq: torch.Tensor
    eps: float


def gemv_residual_norm(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor,
                       norm_weight: torch.Tensor, eps: float, *,
                       tiles: GemvTiles | None = None) -> tuple[torch.Tensor, PendingNorm]:
    """``s = residual + x @ weight.T`` (the torch path's roundings) and the next RMSNorm's inputs.

    Args:
        x: [M, K] float16/bfloat16/float32, 1 <= M <= 16, last dim contiguous.
        weight: [N, K] in x's dtype (``o_proj`` or ``down_proj``), last dim contiguous.
        residual: [M, N] in x's dtype, contiguous.
        norm_weight: [N] in x's dtype, contiguous: the weight of the norm that follows.
        eps: that norm's epsilon.
        tiles: a ``GemvTiles`` without split-K; None: ``gemv_tiles`` for the weight (which
            splits the small models' narrow weights on a GPU: those raise, and
            ``models.qwen3_fused.norm_in_gemv`` keeps them on the unfused path).

    Returns:
        ``(s, pending)``: the new stream [M, N] (a new tensor, bit for bit
        ``residual + round(x @ weight.T)`` in the model dtype, up to the dot's summation order)
        and a ``PendingNorm`` for ``gemv_rstd``. Allocation only, no sync: safe under CUDA graph
        capture.

    Raises:
        ValueError: as ``kernels.gemv.gemv``; M outside 1..16; a residual or norm weight of
            another shape or dtype; tiles with split-K.
    """
    n, k = _check(x, weight, 1)
    m = x.shape[0]
    if m < 1:
        raise ValueError("gemv_residual_norm: x needs 1 to 16 rows, got 0")
    if residual.shape != (m, n) or residual.dtype != x.dtype or not residual.is_contiguous():
        raise ValueError(f"gemv_residual_norm: residual must be a contiguous [{m}, {n}] "
                         f"{x.dtype} tensor, got {residual.dtype} {tuple(residual.shape)}")
    if norm_weight.shape != (n,) or norm_weight.dtype != x.dtype or not norm_weight.is_contiguous():
        raise ValueError(f"gemv_residual_norm: norm_weight must be a contiguous [{n}] {x.dtype} "
                         f"tensor, got {norm_weight.dtype} {tuple(norm_weight.shape)}")
    tiles = _unsplit(tiles, x, n, k, False, "gemv_residual_norm")
    programs = triton.cdiv(n, tiles.block_n)
    scaled = torch.empty((m, n), dtype=x.dtype, device=x.device)
    stream = torch.empty_like(scaled)
    if n == 0:  # nothing to project; one program's zero sums keep ``gemv_rstd``'s contract
        return stream, PendingNorm(scaled, torch.zeros((1, MAX_ROWS), dtype=torch.float32,
                                                       device=x.device), float(eps))
    sumsq = torch.empty((programs, MAX_ROWS), dtype=torch.float32, device=x.device)
    launch_unsplit(x, weight, scaled, n, k, False, tiles, res_ptr=residual, g_ptr=norm_weight,
                   s_ptr=stream, sq_ptr=sumsq, stride_rm=n, RESIDUAL_OUT=True)
    return stream, PendingNorm(scaled, sumsq, float(eps))


def _unsplit(tiles: GemvTiles | None, x: torch.Tensor, n: int, k: int, swiglu: bool,
             who: str) -> GemvTiles:
    """``tiles``, or ``gemv_tiles``'s for the weight; split-K tiles raise (module notes)."""
    if tiles is None:
        tiles = gemv_tiles(x.device, x.dtype, n, k, swiglu)
    if tiles.split_k != 1:
        raise ValueError(f"{who}: split-K tiles are not supported (module notes)")
    return tiles


def gemv_rstd(pending: PendingNorm, weight: torch.Tensor, *, swiglu: bool = False,
              tiles: GemvTiles | None = None) -> torch.Tensor:
    """``rmsnorm(s) @ weight.T`` from a ``PendingNorm`` (module notes), or with ``swiglu`` the
    MLP's ``silu(. @ W_gate^T) * (. @ W_up^T)`` as ``kernels.gemv.gemv_swiglu`` computes it.

    Args:
        pending: from ``gemv_residual_norm``; ``pending.scaled`` is [M, K].
        weight: [N, K] (with ``swiglu``: [2I, K], gate rows then up rows) in the rows' dtype.
        swiglu: the gate/up projection with SwiGLU in the epilogue.
        tiles: a ``GemvTiles`` without split-K; None: ``gemv_tiles`` for the weight (a
            weight it splits raises, as in ``gemv_residual_norm``).

    Returns:
        A new [M, N] (``swiglu``: [M, I]) tensor in the rows' dtype: the float32 sum times
        ``rsqrt(sum(sumsq) / K + eps)``, then rounded (and for SwiGLU rounded as in
        ``gemv_swiglu``). Oracle: ``kernels.reference.linear_rstd``. Safe under graph capture.

    Raises:
        ValueError: as ``kernels.gemv.gemv``; sums of squares that are not a contiguous float32
            [programs, 16] with at least one program; tiles with split-K.
    """
    x = pending.scaled
    n, k = _check(x, weight, 2 if swiglu else 1)
    sq = pending.sumsq
    if sq.dim() != 2 or sq.shape[0] < 1 or sq.shape[1] != MAX_ROWS \
            or sq.dtype != torch.float32 or not sq.is_contiguous():
        raise ValueError(f"gemv_rstd: sumsq must be a contiguous float32 [programs, {MAX_ROWS}], "
                         f"got {sq.dtype} {tuple(sq.shape)}")
    tiles = _unsplit(tiles, x, n, k, swiglu, "gemv_rstd")
    y = torch.empty((x.shape[0], n), dtype=x.dtype, device=x.device)
    if n == 0 or x.shape[0] == 0:
        return y
    if k == 0:  # an empty sum: 0 whatever rstd, and silu(0) * 0 = 0
        return y.zero_()
    launch_unsplit(x, weight, y, n, k, swiglu, tiles, sq_ptr=sq, eps=pending.eps,
                   NUM_SQ=sq.shape[0], RSTD_IN=True,
                   SQ_BLOCKS=triton.next_power_of_2(sq.shape[0]))
    return y
