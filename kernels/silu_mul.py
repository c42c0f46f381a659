"""SwiGLU's gate, ``silu(gate) * up``, as one kernel over the fused gate/up projection's output.

The torch path takes two kernels (``F.silu`` on the strided gate half, then the multiply); in a
decode step each costs a launch for a few KB of work. One program covers ``BLOCK`` columns of one
row. Numerics follow the torch ops step by step: ``gate / (1 + exp(-gate))`` in float32 rounded to
the model dtype, then the product with ``up`` in float32 rounded again
(``kernels.reference.silu_mul``). On a GPU Triton's float32 ``exp`` and division are approximate (a
few ulp), so a 16-bit result may differ from torch's by one unit in the last place. The fused kernel
is vLLM's ``silu_and_mul``; SwiGLU is Shazeer 2020 ("GLU Variants Improve Transformer").
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def silu_mul_rounded(g, u, dtype: tl.constexpr):
    """float32 ``gate``/``up`` values (already in the model dtype) -> ``silu(gate) * up`` in
    float32, rounded to ``dtype`` after silu and after the product as the torch ops round (shared
    with ``kernels/gemv.py``'s gate/up epilogue)."""
    s = (g / (1.0 + tl.exp(-g))).to(dtype).to(tl.float32)
    return (s * u).to(dtype).to(tl.float32)


@triton.jit
def _silu_mul_kernel(
    x_ptr,  # [T, 2 * I] model dtype: gate columns 0..I-1, up columns I..2I-1
    out_ptr,  # [T, I] model dtype
    stride_xt, stride_ot,  # row strides (elements)
    INTER: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < INTER
    dtype = out_ptr.dtype.element_ty
    x_row = x_ptr + row * stride_xt
    g = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(x_row + INTER + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_ot + cols, silu_mul_rounded(g, u, dtype).to(dtype),
             mask=mask)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` of ``gate_up = [gate | up]`` (SwiGLU), one kernel.

    Args:
        gate_up: [T, 2 * I] float16/bfloat16/float32, last dim contiguous (any row stride).

    Returns:
        A new contiguous [T, I] tensor in ``gate_up``'s dtype (allocation only, no sync: safe
        under CUDA graph capture). Matches ``kernels.reference.silu_mul`` up to the rounding of
        float32 ``exp`` and division (module notes).

    Raises:
        ValueError: on a rank other than 2, an odd last dim, a non-float dtype or a
            non-contiguous last dim.
    """
    if gate_up.dim() != 2 or gate_up.shape[1] % 2:
        raise ValueError(f"gate_up must be [T, 2 * I], got {tuple(gate_up.shape)}")
    if gate_up.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"gate_up must be float16/bfloat16/float32, got {gate_up.dtype}")
    if gate_up.stride(1) != 1 and gate_up.shape[1] > 1:
        raise ValueError("gate_up needs a contiguous last dim")
    num_tokens, inter = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty((num_tokens, inter), dtype=gate_up.dtype, device=gate_up.device)
    if num_tokens > 0 and inter > 0:
        block = min(1024, triton.next_power_of_2(inter))
        _silu_mul_kernel[(num_tokens, triton.cdiv(inter, block))](
            gate_up, out, gate_up.stride(0), out.stride(0), INTER=inter, BLOCK=block,
            num_warps=4)
    return out
