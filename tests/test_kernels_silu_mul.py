"""kernels/silu_mul.py against kernels/reference.silu_mul (the model's MLP numerics).

CPU (Triton interpreter): float32 and float16, widths below, at and past one 1024-column block,
strided rows, empty input, bad input. float16 must equal the reference bit for bit in almost every
element (so a kernel that skipped the rounding after silu fails). bfloat16 is not testable here:
the interpreter truncates float32 to bfloat16 instead of rounding to nearest. GPU (``-m gpu``):
bfloat16 at the Qwen3-8B width (I = 12288), max error printed. Whole models with the fused kernels
against the torch path: tests/test_model_fused_forward.py (CPU and GPU).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernels import reference as ref
from kernels.silu_mul import silu_mul

TOL = {torch.float32: dict(rtol=1e-6, atol=1e-6), torch.float16: dict(rtol=1e-3, atol=1e-3),
       torch.bfloat16: dict(rtol=8e-3, atol=8e-3)}


def _gate_up(tokens, inter, dtype, device="cpu", scale=4.0):
    return (torch.randn(tokens, 2 * inter) * scale).to(device=device, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_is_transformers_mlp_gate(dtype):
    # transformers' Qwen3MLP: act_fn(gate_proj(x)) * up_proj(x), act_fn = silu, model dtype
    x = _gate_up(5, 24, dtype)
    gate, up = x[:, :24].contiguous(), x[:, 24:].contiguous()
    want = F.silu(gate) * up
    if dtype == torch.float32:  # torch's vectorized and scalar exp differ in the last bit
        torch.testing.assert_close(ref.silu_mul(x), want, rtol=1e-6, atol=1e-7)
    else:
        assert torch.equal(ref.silu_mul(x), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("tokens,inter", [(1, 7), (3, 96), (2, 1024), (2, 1500)])
def test_silu_mul_matches_reference(dtype, tokens, inter):
    x = _gate_up(tokens, inter, dtype)
    x[0, 0], x[-1, inter - 1] = -80.0, 60.0  # exp(-g) overflowing and vanishing
    got = silu_mul(x)
    assert got.shape == (tokens, inter) and got.dtype == dtype and got.is_contiguous()
    want = ref.silu_mul(x)
    torch.testing.assert_close(got, want, **TOL[dtype])
    if dtype == torch.float16:
        assert (got != want).float().mean().item() <= 0.01


def test_silu_mul_strided_rows_and_empty():
    base = _gate_up(4, 100, torch.float32)
    x = base[:, 20:180]  # row stride 200, 2 * I = 160
    torch.testing.assert_close(silu_mul(x), ref.silu_mul(x), **TOL[torch.float32])
    assert silu_mul(torch.empty(0, 16)).shape == (0, 8)


def test_silu_mul_rejects_bad_inputs():
    with pytest.raises(ValueError, match="2 \\* I"):
        silu_mul(torch.randn(2, 7))
    with pytest.raises(ValueError, match="2 \\* I"):
        silu_mul(torch.randn(2, 3, 8))
    with pytest.raises(ValueError, match="float"):
        silu_mul(torch.ones(2, 8, dtype=torch.int32))
    with pytest.raises(ValueError, match="contiguous"):
        silu_mul(torch.randn(8, 2).t())


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 300])
def test_gpu_silu_mul_bf16_8b_width(tokens):
    x = _gate_up(tokens, 12288, torch.bfloat16, device="cuda")
    got, want = silu_mul(x), ref.silu_mul(x)
    err = (got.float() - want.float()).abs().max().item()
    print(f"\nsilu_mul bf16 T={tokens}: max abs err {err:.3g}, exact {torch.equal(got, want)}")
    torch.testing.assert_close(got, want, **TOL[torch.bfloat16])
