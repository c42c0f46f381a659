"""RMSNorm with an optional fused residual add: one kernel instead of ~8 torch ops per norm.

One program per row (token) loads the whole row as one ``BLOCK = next_power_of_2(hidden)`` tile.
With a residual it first forms ``new_residual = x + residual`` (added in float32, rounded to the
model dtype: the same value as torch's model-dtype add) and stores it, then normalizes that sum.
The norm follows transformers' Qwen3 ``RMSNorm`` step by step: mean of squares and rsqrt in float32,
``x * rsqrt(mean + eps)`` cast back to the model dtype, then multiplied by the weight and rounded
to the model dtype again. Only the reduction order (and rsqrt's last bit) differs from torch.

On the PDL chain (``kernels/pdl_chain.py``) it loads the weight, signals its dependents and then
waits for its predecessor before loading the rows.

``x`` may also be a split-K projection not yet reduced (``kernels.splitk.SplitKPartials``, from
``gemv(..., reduce=False)``): the kernel then adds each row's float32 partials in the reduce
kernel's order and rounds them to the model dtype as it loads them, so ``x`` has the same bits as
after the reduce, and the reduce's launch is saved.

Semantics after vLLM's ``fused_add_rms_norm`` (residual = x + residual; out = norm(residual)),
but functional: both outputs are new tensors, and the inputs are left alone.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.checks import check_contiguous, check_last_dim_contiguous
from kernels.pdl_chain import chain_pdl
from kernels.splitk import SplitKPartials, reduce_rows


@triton.jit
def _rmsnorm_kernel(
    x_ptr,  # [T, HIDDEN] model dtype (last dim contiguous); SPLITS >= 1: float32 partials
    res_ptr,  # [T, HIDDEN] model dtype residual stream (HAS_RESIDUAL only)
    w_ptr,  # [HIDDEN] model dtype
    out_ptr,  # [T, HIDDEN] model dtype, the normalized rows
    res_out_ptr,  # [T, HIDDEN] model dtype, x + residual (HAS_RESIDUAL only)
    stride_xt, stride_rt, stride_ot, stride_rot,  # row strides (elements)
    eps,  # float32
    HIDDEN: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    USE_PDL: tl.constexpr,  # on the PDL chain (kernels/pdl_chain.py)
    SPLITS: tl.constexpr = 0,  # >= 1: x_ptr is a split-K workspace [SPLITS, >= T, HIDDEN] float32
    SPLIT_STRIDE: tl.constexpr = 0,  # elements between its splits
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < HIDDEN
    dtype = out_ptr.dtype.element_ty
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)  # a weight: never written
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()  # the next GEMV may take the SMs
        tl.extra.cuda.gdc_wait()  # x and the residual come from the predecessors
    if SPLITS > 0:  # the split-K reduce's adds and rounding (kernels/splitk.py)
        x = reduce_rows(x_ptr, row * tl.cast(stride_xt, tl.int64) + offs, mask, SPLIT_STRIDE,
                        SPLITS).to(dtype)
    else:
        x = tl.load(x_ptr + row * tl.cast(stride_xt, tl.int64) + offs, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(res_ptr + row * tl.cast(stride_rt, tl.int64) + offs, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(dtype)
        tl.store(res_out_ptr + row * tl.cast(stride_rot, tl.int64) + offs, x, mask=mask)
    xf = x.to(tl.float32)
    mean_sq = tl.sum(xf * xf, axis=0) / HIDDEN
    xn = (xf * tl.math.rsqrt(mean_sq + eps)).to(dtype).to(tl.float32)
    tl.store(out_ptr + row * tl.cast(stride_ot, tl.int64) + offs, (w * xn).to(dtype), mask=mask)


def rmsnorm(x: torch.Tensor | SplitKPartials, weight: torch.Tensor, eps: float,
            residual: torch.Tensor | None = None
            ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm of each row, optionally after adding the residual stream (fused add + norm).

    Args:
        x: [T, hidden] float16/bfloat16/float32, last dim contiguous (any row stride); or a
            ``kernels.splitk.SplitKPartials`` of that shape and dtype (module notes: the same
            result as its ``reduce()``, one launch fewer).
        weight: [hidden], same dtype as ``x``.
        eps: added to the mean of squares before the rsqrt.
        residual: None, or [T, hidden] in ``x``'s dtype, last dim contiguous.

    Returns:
        Without ``residual``: ``out`` [T, hidden] = ``weight * rmsnorm(x)`` (contiguous, x's dtype).
        With it: ``(out, new_residual)`` where ``new_residual = x + residual`` (model-dtype add) and
        ``out = weight * rmsnorm(new_residual)``. Both are new tensors (allocation only, no sync:
        safe under CUDA graph capture).

    Matches ``kernels.reference.rms_norm`` (transformers' Qwen3 numerics) up to the float32
    reduction order.

    Raises:
        ValueError: naming the argument, on wrong ranks, shapes, dtypes or a last dim that is not
            contiguous.
    """
    splits = x.splits if isinstance(x, SplitKPartials) else 0
    shape, dtype = (x.shape, x.dtype)
    if len(shape) != 2 or weight.shape != (shape[1],):
        raise ValueError(f"x must be [T, hidden] and weight [hidden], got {tuple(shape)} and "
                         f"{tuple(weight.shape)}")
    if dtype not in (torch.float16, torch.bfloat16, torch.float32) or weight.dtype != dtype:
        raise ValueError(f"x and weight must share a float dtype, got {dtype} and "
                         f"{weight.dtype}")
    if residual is not None and (residual.shape != shape or residual.dtype != dtype):
        raise ValueError(f"residual must match x ({dtype} {tuple(shape)}), got "
                         f"{residual.dtype} {tuple(residual.shape)}")
    if splits:
        check_contiguous("rmsnorm", partials=x.ws)
        x_arg, stride_xt, split_stride = x.ws, shape[1], x.ws.stride(0)
    else:
        check_last_dim_contiguous("rmsnorm", x=x)
        x_arg, stride_xt, split_stride = x, x.stride(0), 0
    check_contiguous("rmsnorm", weight=weight)
    num_tokens, hidden = shape
    out = torch.empty((num_tokens, hidden), dtype=dtype, device=weight.device)
    if residual is None:
        res, res_out = (out if splits else x), out  # placeholders, never touched
    else:
        check_last_dim_contiguous("rmsnorm", residual=residual)
        res, res_out = residual, torch.empty_like(out)
    if num_tokens > 0:
        block = triton.next_power_of_2(hidden)
        pdl = chain_pdl(weight.device)
        _rmsnorm_kernel[(num_tokens,)](
            x_ptr=x_arg, res_ptr=res, w_ptr=weight, out_ptr=out, res_out_ptr=res_out,
            stride_xt=stride_xt, stride_rt=res.stride(0), stride_ot=out.stride(0),
            stride_rot=res_out.stride(0), eps=float(eps),
            HIDDEN=hidden, BLOCK=block, HAS_RESIDUAL=residual is not None, USE_PDL=pdl,
            num_warps=max(1, min(8, block // 256)), **({"launch_pdl": True} if pdl else {}),
            **({"SPLITS": splits, "SPLIT_STRIDE": split_stride} if splits else {}),
        )
    return out if residual is None else (out, res_out)
