"""RMSNorm (with the fused residual add) folded into the prologue of the decode GEMM that follows
it: ``gemv(rmsnorm(x, g, eps, residual))`` as one kernel, the normalized rows never stored.

``kernels/gemv.py``'s ``_gemv_kernel`` with ``NORM=True``: each program first walks the whole of
K once over ``x`` (and the residual), forming ``s = x + residual`` exactly as
``kernels/rmsnorm.py`` does (added in float32, rounded to the model dtype) and each row's float32
sum of squares, so ``rstd = rsqrt(sum / K + eps)``. Its main loop then forms each operand tile
again, ``round(g * round(s * rstd))`` with rmsnorm's two roundings to the model dtype, before the
dot. Every program (every split of split-K too) needs rstd over all of K, so each recomputes it;
the ``[16, K]`` rows are small next to the weight it streams. Program 0 alone stores ``s`` (the
new residual stream); no program reads it back, so there is no race.

Numerics: those of ``rmsnorm`` then ``gemv`` (``gemv_swiglu``) but for the order of the sum of
squares (rmsnorm sums a whole row at once, here in ``BLOCK_K`` chunks), which can move rstd by
an ulp; the new residual is bit-identical to rmsnorm's. Rows stay invariant (the tiles do not
depend on M, and each row's rstd is its own).

The add + norm semantics are vLLM's ``fused_add_rms_norm`` (residual = x + residual; normalize
that), here moved into the prologue of the projection that consumes the normalized rows.
"""

from __future__ import annotations

import torch

from kernels.gemv import _check, _launch
from kernels.tiles import GemvTiles


def _norm_args(x: torch.Tensor, norm_weight: torch.Tensor, eps: float,
               residual: torch.Tensor | None, name: str) -> tuple[dict, torch.Tensor | None]:
    """The NORM kernel arguments for ``_launch`` and the new residual's tensor (or None)."""
    k = x.shape[1]
    if norm_weight.shape != (k,) or norm_weight.dtype != x.dtype:
        raise ValueError(f"{name}: norm_weight must be [{k}] in {x.dtype}, got "
                         f"{norm_weight.dtype} {tuple(norm_weight.shape)}")
    if norm_weight.device != x.device or (k > 1 and norm_weight.stride(0) != 1):
        raise ValueError(f"{name}: norm_weight must be contiguous and on {x.device}")
    args = dict(g_ptr=norm_weight, eps=float(eps), NORM=True)
    if residual is None:
        return args, None
    if residual.shape != x.shape or residual.dtype != x.dtype or residual.device != x.device:
        raise ValueError(f"{name}: residual must match x ({x.dtype} {tuple(x.shape)} on "
                         f"{x.device}), got {residual.dtype} {tuple(residual.shape)} on "
                         f"{residual.device}")
    if residual.stride(1) != 1 and k > 1:
        raise ValueError(f"{name}: residual needs a contiguous last dim")
    res_out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.shape[0] and k:
        args.update(res_ptr=residual, res_out_ptr=res_out, stride_rm=residual.stride(0),
                    HAS_RESIDUAL=True)
    return args, res_out


def _run(x, weight, norm_weight, eps, residual, tiles, swiglu: bool):
    n, k = _check(x, weight, 2 if swiglu else 1)
    name = "gemv_swiglu_rmsnorm" if swiglu else "gemv_rmsnorm"
    norm, res_out = _norm_args(x, norm_weight, eps, residual, name)
    y = _launch(x, weight, n, k, swiglu=swiglu, tiles=tiles, norm=norm)
    if res_out is not None and n == 0 and x.shape[0] and k:  # no program ran to store it
        res_out.copy_((x.float() + residual.float()).to(x.dtype))
    return y, res_out


def gemv_rmsnorm(x: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                 residual: torch.Tensor | None = None, *, tiles: GemvTiles | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``gemv(rmsnorm(x, norm_weight, eps, residual), weight)`` in one kernel (module notes).

    Args:
        x: [M, K] float16/bfloat16/float32, M <= 16, last dim contiguous: the sublayer output
            (or, without ``residual``, the rows to normalize).
        weight: [N, K] in x's dtype, last dim contiguous.
        norm_weight: [K] in x's dtype, contiguous (the RMSNorm's ``weight``).
        eps: added to the mean of squares before the rsqrt.
        residual: None, or [M, K] in x's dtype with a contiguous last dim: the residual stream.
        tiles: as in ``kernels.gemv.gemv`` (split-K included).

    Returns:
        ``(y, new_residual)``: y [M, N] in x's dtype, ``gemv`` of the normalized rows, equal to
        ``gemv(rmsnorm(...))`` up to the sum-of-squares order; ``new_residual`` = x + residual
        [M, K] contiguous, bit-identical to ``rmsnorm``'s, or None without ``residual``. New
        tensors, allocation only, no sync: safe under CUDA graph capture.

    Raises:
        ValueError: as ``gemv``, or a norm weight or residual of the wrong shape, dtype, device
            or layout.
    """
    return _run(x, weight, norm_weight, eps, residual, tiles, swiglu=False)


def gemv_swiglu_rmsnorm(x: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor,
                        eps: float, residual: torch.Tensor | None = None, *,
                        tiles: GemvTiles | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``gemv_swiglu(rmsnorm(x, norm_weight, eps, residual), weight)`` in one kernel.

    Args:
        x, norm_weight, eps, residual: as in ``gemv_rmsnorm``.
        weight: [2I, K], the gate rows then the up rows (``gate_up_proj.weight``).
        tiles: as in ``kernels.gemv.gemv_swiglu`` (no split-K).

    Returns:
        ``(y [M, I], new_residual)``, y as ``gemv_swiglu`` of the normalized rows (up to the
        sum-of-squares order), ``new_residual`` as in ``gemv_rmsnorm``.

    Raises:
        ValueError: as ``gemv_rmsnorm``, or an odd weight row count.
    """
    return _run(x, weight, norm_weight, eps, residual, tiles, swiglu=True)
