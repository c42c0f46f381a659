"""The decode GEMVs with a decoder layer's add + RMSNorm folded in: the residual add and the
partial statistics in the epilogue of ``o_proj``/``down_proj`` (``gemv_add_residual``), the
RMSNorm in the prologue of the ``qkv``/gate-up projection that follows (``gemv_rmsnorm``).

Together they replace ``kernels/rmsnorm.py``'s add + norm launch between two projections: a
decode layer runs 8 launches instead of 10. The split and its numerics are
``kernels/norm_stats.py``'s; the GEMV, its tiles, split-K and row invariance
``kernels/gemv.py``'s. Oracle: ``kernels.reference.linear`` then ``kernels.reference.rms_norm``
(the unfused path), equal up to the summation order of the squares.
"""

from __future__ import annotations

import torch

from kernels.gemv import SPLITK_REDUCE_COLUMNS, _check, _launch
from kernels.norm_stats import stats_blocks
from kernels.tiles import GemvTiles, gemv_tiles


def gemv_add_residual(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor, *,
                      tiles: GemvTiles | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``round(x @ weight.T) + residual`` (the new residual stream) and its RMSNorm statistics.

    Args:
        x: [M, K] as in ``kernels.gemv.gemv`` (M <= 16).
        weight: [N, K] in x's dtype, last dim contiguous.
        residual: [M, N] in x's dtype, last dim contiguous: the stream before this sublayer.
        tiles: as in ``gemv``.

    Returns:
        ``(stream, stats)``: a new [M, N] tensor in x's dtype, rounded as
        ``kernels/rmsnorm.py`` rounds ``h + residual``, and float32 [M, NB] partial sums of
        squares of it (``NB`` column blocks; ``gemv_rmsnorm`` takes them). Allocation only,
        no sync: safe under CUDA graph capture.

    Raises:
        ValueError: as ``gemv``, or a residual that is not [M, N] in x's dtype with a
            contiguous last dim.
    """
    n, k = _check(x, weight, 1)
    if residual.shape != (x.shape[0], n) or residual.dtype != x.dtype or (
            residual.stride(-1) != 1 and n > 1) or residual.device != x.device:
        raise ValueError(f"gemv_add_residual: residual must be {x.dtype} {(x.shape[0], n)} on "
                         f"{x.device} with a contiguous last dim, got {residual.dtype} "
                         f"{tuple(residual.shape)}")
    if tiles is None:
        tiles = gemv_tiles(x.device, x.dtype, n, k, False)
    split = tiles.split_k > 1
    nb, _ = stats_blocks(n, SPLITK_REDUCE_COLUMNS if split else tiles.block_n)
    stream = torch.empty((x.shape[0], n), dtype=x.dtype, device=x.device)
    stats = torch.empty((x.shape[0], nb), dtype=torch.float32, device=x.device)
    if k == 0:  # an empty projection: the stream is the residual
        stream.copy_(residual)
        stats.copy_(_sums_of_squares(stream, nb))
        return stream, stats
    epilogue = dict(res_ptr=residual, stats_out_ptr=stats, stride_rm=residual.stride(0),
                    RES_OUT=True)
    _launch(x, weight, n, k, False, tiles, y=stream, epilogue=epilogue)
    return stream, stats


def gemv_rmsnorm(stream: torch.Tensor, stats: torch.Tensor, norm_weight: torch.Tensor,
                 eps: float, weight: torch.Tensor, *, swiglu: bool = False,
                 tiles: GemvTiles | None = None) -> torch.Tensor:
    """``rmsnorm(stream) @ weight.T`` (or its SwiGLU), the norm from ``gemv_add_residual``'s
    ``stats`` and applied to each tile of ``stream`` as it is loaded.

    Args:
        stream: [M, K] the residual stream (``gemv_add_residual``'s first output), M <= 16.
        stats: float32 [M, NB], its partial sums of squares (the second output), contiguous.
        norm_weight: [K] in stream's dtype, contiguous (the RMSNorm weight).
        eps: the RMSNorm epsilon.
        weight: [N, K] (``swiglu``: [2I, K], the gate rows then the up rows) in stream's dtype.
        swiglu: return ``silu(gate) * up`` as ``kernels.gemv.gemv_swiglu`` does.
        tiles: as in ``gemv`` / ``gemv_swiglu``.

    Returns:
        A new [M, N] (``swiglu``: [M, I]) tensor in stream's dtype: ``gemv`` of
        ``kernels/rmsnorm.py``'s normalized rows, up to the summation order of the squares.

    Raises:
        ValueError: as ``gemv``, or stats / norm_weight of the wrong shape, dtype or layout.
    """
    n, k = _check(stream, weight, 2 if swiglu else 1)
    rows = stream.shape[0]
    if stats.dim() != 2 or stats.shape[0] != rows or stats.dtype != torch.float32 or \
            not stats.is_contiguous() or stats.device != stream.device:
        raise ValueError(f"gemv_rmsnorm: stats must be contiguous float32 [{rows}, NB] on "
                         f"{stream.device}, got {stats.dtype} {tuple(stats.shape)}")
    if norm_weight.shape != (k,) or norm_weight.dtype != stream.dtype or \
            not norm_weight.is_contiguous():
        raise ValueError(f"gemv_rmsnorm: norm_weight must be contiguous {stream.dtype} [{k}], "
                         f"got {norm_weight.dtype} {tuple(norm_weight.shape)}")
    nb = stats.shape[1]
    fused = dict(stats_in_ptr=stats, norm_w_ptr=norm_weight, eps=float(eps), NORM_IN=True,
                 NB_IN=nb, BLOCK_NB_IN=stats_blocks(nb, 1)[1])
    return _launch(stream, weight, n, k, swiglu, tiles, fused=fused)


def _sums_of_squares(stream: torch.Tensor, nb: int) -> torch.Tensor:
    """All of each row's sum of squares in partial 0, zeros after (K = 0 only)."""
    out = torch.zeros((stream.shape[0], nb), dtype=torch.float32, device=stream.device)
    out[:, 0] = stream.float().pow(2).sum(-1)
    return out
