"""The INT8 code conversions of decode attention (``kernels/decode_block.py``): cvt, the magic
number with integer ops and the packed inline PTX (GPU) give every code exactly, and decode with
each of them matches the reference."""

from __future__ import annotations

import math

import pytest
import torch
import triton
import triton.language as tl
from decode_case import TOL, Case, _lengths

from kernels.decode_block import _int8_to_f16


@pytest.mark.parametrize("magic", [0, 1, 2])
def test_decode_int8_conversions_agree(magic):
    """Each INT8 conversion (cvt, magic number; 2 runs as 1 on a CPU) matches the reference."""
    n = 2
    case = Case(_lengths(n, 16), n, kv_heads=2, group=4, head_dim=32, page_size=16,
                dtype=torch.float16, int8=True)
    out = case.run(num_splits=3, block_n=16, int8_magic=magic)
    torch.testing.assert_close(out.float(), case.expected(), **TOL[torch.float16])
    assert torch.equal(out[-n:], torch.zeros_like(out[-n:]))
    with pytest.raises(ValueError, match="int8_magic"):
        case.run(int8_magic=3)


@triton.jit
def _codes_kernel(x_ptr, y_ptr, N: tl.constexpr, MODE: tl.constexpr):
    offs = tl.arange(0, N)
    c = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, _int8_to_f16(c, MODE))


def _check_magic(mode, device):
    codes = torch.arange(-128, 128, dtype=torch.int16).to(torch.int8)
    perm = torch.randperm(256)  # codes in random order: no reliance on element position
    x = codes[perm].reshape(16, 16).t().contiguous().reshape(-1).to(device)
    y = torch.full((256,), math.nan, dtype=torch.float16, device=device)
    _codes_kernel[(1,)](x, y, N=256, MODE=mode, num_warps=1)  # 8 codes per thread (pack 4)
    assert torch.equal(y.cpu(), x.cpu().to(torch.float16))  # exact, every one of the 256 codes


def test_int8_magic_conversion_exact():
    """The magic-number conversion (integer ops) gives every int8 code exactly as float16."""
    _check_magic(1, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [1, 2])
def test_int8_magic_conversion_exact_gpu(mode):
    """Compiled: the integer-op and the packed inline-PTX conversion, every code exactly."""
    _check_magic(mode, "cuda")
