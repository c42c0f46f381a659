"""kernels/gemv.py (a decode step's projections, 1 to 16 rows) against kernels/reference.linear.

CPU (Triton interpreter): float32 and float16; 1 to 16 rows; K below, at and past one column block
(16-64 columns in the interpreter), with and without a column tail; N not a multiple of the rows
per program (clamped tail rows); strided rows; row invariance; ``gemv_swiglu`` against
``reference.silu_mul`` of ``reference.linear``, with each rounding checked; empty shapes; bad
input. The model wiring (steps of 1, 5, 16 tokens through the GEMVs, 17 through cuBLAS) against
the torch path. GPU (``-m gpu``): bfloat16 at the Qwen3-8B shapes, error against a float64
reference no worse than cuBLAS's (printed), every row bit-identical alone and among 16; float32
in full precision; ``gemv_swiglu`` at the 8B width.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernels import reference as ref
from kernels.gemv import gemv, gemv_swiglu
from kernels.tiles import GemvTiles, gemv_split_k

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3)}


def _case(n, k, dtype, device="cpu", m=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) / k ** 0.5).to(device=device, dtype=dtype)
    x = torch.randn(m, k, generator=g).to(device=device, dtype=dtype)
    return x, w


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (1, 5, 7), (3, 9, 64), (16, 37, 100),
                                   (2, 40, 200)])
def test_gemv_matches_reference(dtype, m, n, k):
    x, w = _case(n, k, dtype, m=m)
    got = gemv(x, w)
    assert got.shape == (m, n) and got.dtype == dtype and got.is_contiguous()
    torch.testing.assert_close(got, ref.linear(x, w), **TOL[dtype])


def test_gemv_every_row_and_column_counts():
    # one-hot inputs: output (i, j) must be exactly w[j, c_i] for each probed column c_i, so a
    # dropped column block, a tail row written from the clamped row, or a shifted row all fail
    n, k = 37, 150
    _, w = _case(n, k, torch.float32)
    probes = (0, 63, 64, 127, 149)
    x = torch.zeros(len(probes), k)
    for i, c in enumerate(probes):
        x[i, c] = 1.0
    assert torch.equal(gemv(x, w), w[:, probes].T)


@pytest.mark.parametrize("swiglu", [False, True])
def test_gemv_rows_are_independent_of_the_other_rows(swiglu):
    # row invariance: a row alone gives the bit-identical result it gives among 16. In the
    # interpreter tl.dot is numpy's matmul, whose BLAS may sum a row in another order depending on
    # the thread split (seen under pytest with OpenBLAS), so the CPU case uses small integers,
    # whose products and sums are exact in float32 in any order: a row that reads another row, or
    # a tail written from the wrong row, still fails. The GPU test checks real data bit for bit.
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-4, 5, (16, 200), generator=g).float()
    w = torch.randint(-4, 5, (30, 200), generator=g).float()
    fn = gemv_swiglu if swiglu else gemv
    together = fn(x, w)
    for i in (0, 7, 15):
        assert torch.equal(fn(x[i:i + 1], w), together[i:i + 1])


def test_gemv_strided_rows():
    base = torch.randn(6, 300)
    w = base[:, 10:250]  # row stride 300, K = 240
    xb = torch.randn(3, 260)
    x = xb[:, 5:245]  # row stride 260
    torch.testing.assert_close(gemv(x, w), ref.linear(x, w), **TOL[torch.float32])


@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m,inter,k", [(1, 3, 24), (4, 20, 70)])
def test_gemv_swiglu_matches_reference(dtype, m, inter, k):
    x, w = _case(2 * inter, k, dtype, m=m)
    w = w * 8  # projections of a few units: silu in its curved range
    w[0, :] = -1e3 if dtype == torch.float32 else -60.0  # exp(-gate) overflowing in row 0
    got = gemv_swiglu(x, w)
    assert got.shape == (m, inter)
    want = ref.silu_mul(ref.linear(x, w))
    torch.testing.assert_close(got, want, **TOL[dtype])


def test_gemv_swiglu_rounds_as_linear_then_silu_mul():
    # 0/1 weights: each projection is a sum of two float16 values, exact in float32, so each of
    # the three roundings to float16 (projection, silu, product) shows in the result
    k = 40
    x = torch.randn(3, k).half() * 4
    pair = torch.eye(k) + torch.eye(k).roll(1, dims=1)  # row j: x_j + x_{j+1}
    w = torch.cat([pair, pair.roll(5, dims=1)]).half()
    got = gemv_swiglu(x, w)
    want = ref.silu_mul(ref.linear(x, w))
    assert (got != want).float().mean().item() <= 0.01


def test_gemv_empty_shapes():
    assert gemv(torch.randn(1, 8), torch.randn(0, 8)).shape == (1, 0)
    assert gemv(torch.randn(0, 8), torch.randn(4, 8)).shape == (0, 4)  # as F.linear
    assert torch.equal(gemv(torch.randn(2, 0), torch.randn(3, 0)), torch.zeros(2, 3))
    assert torch.equal(gemv_swiglu(torch.randn(1, 0), torch.randn(4, 0)), torch.zeros(1, 2))


@pytest.mark.parametrize("swiglu", [False, True])
def test_gemv_takes_explicit_tiles(swiglu):
    """A ``GemvTiles`` value other than the default (several programs, K in several masked
    column blocks) computes the same result up to the summation order; bad values are
    ValueErrors."""
    x, w = torch.randn(3, 80), torch.randn(64 if swiglu else 40, 80)
    fn = gemv_swiglu if swiglu else gemv
    out = fn(x, w, tiles=GemvTiles(block_n=16, block_k=32, num_stages=2, num_warps=2))
    torch.testing.assert_close(out, fn(x, w), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="block_k"):
        GemvTiles(block_n=16, block_k=24, num_stages=1)
    with pytest.raises(ValueError, match=">= 16"):
        GemvTiles(block_n=8, block_k=16, num_stages=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m,n,k,split", [(1, 40, 200, 2), (16, 37, 100, 3), (5, 16, 64, 8),
                                         (2, 130, 33, 2)])
def test_gemv_split_k_matches_reference(dtype, m, n, k, split):
    """Split-K: K in ``split`` runs of 16-column tiles (a short last run; more splits than
    tiles clamp), the partials summed by the second kernel; one rounding at the end."""
    x, w = _case(n, k, dtype, m=m)
    tiles = GemvTiles(block_n=16, block_k=16, num_stages=1, split_k=split)
    got = gemv(x, w, tiles=tiles)
    assert got.shape == (m, n) and got.dtype == dtype
    torch.testing.assert_close(got, ref.linear(x, w), **TOL[dtype])
    assert torch.equal(gemv(x, w, tiles=tiles), got)  # deterministic: no atomics


def test_gemv_split_k_every_column_once_and_rows_invariant():
    # one-hot columns across every split boundary: a column summed twice or dropped fails; small
    # integers make every order exact (see the row-invariance test above)
    n, k = 21, 150
    _, w = _case(n, k, torch.float32)
    probes = (0, 15, 16, 47, 48, 100, 149)
    x = torch.zeros(len(probes), k)
    for i, c in enumerate(probes):
        x[i, c] = 1.0
    tiles = GemvTiles(block_n=16, block_k=16, num_stages=1, split_k=4)
    assert torch.equal(gemv(x, w, tiles=tiles), w[:, probes].T)
    g = torch.Generator().manual_seed(1)
    xi = torch.randint(-4, 5, (16, 150), generator=g).float()
    wi = torch.randint(-4, 5, (21, 150), generator=g).float()
    together = gemv(xi, wi, tiles=tiles)
    for i in (0, 9, 15):
        assert torch.equal(gemv(xi[i:i + 1], wi, tiles=tiles), together[i:i + 1])
    with pytest.raises(ValueError, match="split_k"):
        GemvTiles(block_n=16, block_k=16, num_stages=1, split_k=0)


@pytest.mark.parametrize("blocks,k_tiles,sms,want", [
    (32, 8, 132, 4),     # 0.6B o_proj: 32 programs -> 128, two tiles per split
    (32, 12, 132, 4),    # 0.6B down_proj
    (128, 16, 132, 1),   # 8B o_proj already fills the GPU
    (66, 64, 132, 2),    # doubled exactly to one wave
    (32, 3, 132, 1),     # too few tiles for two per split
    (1, 1000, 132, 8),   # max_split caps it
])
def test_gemv_split_k_policy(blocks, k_tiles, sms, want):
    got = gemv_split_k(blocks, k_tiles, sms)
    assert got == want
    assert blocks * got <= max(sms, blocks) and k_tiles >= 2 * got or got == 1


def test_gemv_rejects_bad_inputs():
    w = torch.randn(4, 8)
    with pytest.raises(ValueError, match="M <= 16"):
        gemv(torch.randn(17, 8), w)
    with pytest.raises(ValueError, match="on meta"):
        gemv(torch.randn(1, 8, device="meta"), w)
    with pytest.raises(ValueError, match="contiguous last dim"):
        gemv(torch.randn(8, 2).T, torch.randn(4, 2))
    with pytest.raises(ValueError, match="contiguous last dim"):
        gemv(torch.randn(1, 4), torch.randn(4, 8).T)
    with pytest.raises(ValueError, match="dtype"):
        gemv(torch.randn(1, 8).half(), w)
    with pytest.raises(ValueError, match="dtype"):
        gemv(torch.ones(1, 8, dtype=torch.int32), torch.ones(4, 8, dtype=torch.int32))
    with pytest.raises(ValueError, match="9 columns"):
        gemv(torch.randn(1, 9), w)
    with pytest.raises(ValueError, match="even row count"):
        gemv_swiglu(torch.randn(1, 8), torch.randn(5, 8))


@pytest.mark.parametrize("tokens", [1, 5, 16, 17])
def test_fused_decode_step_through_gemv_matches_torch_path(tiny_ckpt_factory, tokens):
    """A step of the fused path, run here in the interpreter, equals the torch path: up to 16
    tokens through the GEMVs (SwiGLU in the gate/up epilogue), 17 through cuBLAS and silu_mul;
    so do the lm_head logits through gemv."""
    from models.loader import load_model

    model = load_model(tiny_ckpt_factory(vocab_size=512), device="cpu", dtype=torch.float32)
    ids, pos = torch.randint(0, 512, (tokens,)), torch.arange(tokens) + 40
    with torch.no_grad():
        plain = model.forward(ids, pos)
        fused = model._forward_fused(model.model.embed_tokens(ids), pos, None, None)
        torch.testing.assert_close(fused, plain, rtol=1e-4, atol=1e-4)
        last = fused[-1:]
        torch.testing.assert_close(gemv(last, model.lm_head.weight).float(),
                                   model.compute_logits(plain[-1:]), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------- GPU

SHAPES_8B = {"qkv_proj": (6144, 4096), "o_proj": (4096, 4096), "gate_up_proj": (24576, 4096),
             "down_proj": (4096, 12288), "lm_head": (151936, 4096)}


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(SHAPES_8B))
def test_gpu_gemv_bf16_8b_shapes_no_worse_than_cublas(name):
    n, k = SHAPES_8B[name]
    x, w = _case(n, k, torch.bfloat16, device="cuda", m=16)
    truth = (x.double() @ w.double().T).float()
    got, cublas = gemv(x, w), F.linear(x, w)
    err, err_cublas = ((got.float() - truth).abs().max().item(),
                       (cublas.float() - truth).abs().max().item())
    differ = (got != cublas).float().mean().item()
    print(f"\ngemv bf16 {name} {n}x{k}, 16 rows: max abs err vs float64 {err:.3g} "
          f"(cuBLAS {err_cublas:.3g}), elements differing from cuBLAS {differ:.2%}")
    # both round a float32 sum once to bfloat16: the error is that rounding, ~1/2 ulp
    assert err <= 1.5 * err_cublas + 1e-6
    torch.testing.assert_close(got, cublas, rtol=1.6e-2, atol=1e-2)
    for i in range(16):  # row invariance on the tensor cores
        assert torch.equal(gemv(x[i:i + 1], w), got[i:i + 1])
    assert torch.equal(gemv(x[:5], w), got[:5])


@pytest.mark.gpu
def test_gpu_gemv_float32_is_full_precision():
    # float32 operands must not go through TF32 (10-bit mantissa): error ~1e-6, not ~1e-3
    x, w = _case(4096, 4096, torch.float32, device="cuda", m=3)
    truth = x.double() @ w.double().T
    rel = ((gemv(x, w).double() - truth).abs().max() / truth.abs().max()).item()
    print(f"\ngemv float32 4096x4096: max error relative to the largest output {rel:.3g}")
    assert rel < 1e-5


@pytest.mark.gpu
def test_gpu_gemv_swiglu_bf16_8b_gate_up():
    inter, k = 12288, 4096
    x, w = _case(2 * inter, k, torch.bfloat16, device="cuda", m=16)
    x = x * 4
    got = gemv_swiglu(x, w)
    gu = x.double() @ w.double().T
    g, u = gu[:, :inter], gu[:, inter:]
    truth = (g * torch.sigmoid(g) * u).float()
    torch_path = ref.silu_mul(F.linear(x, w))  # the model's path for longer steps
    err, err_torch = ((got.float() - truth).abs().max().item(),
                      (torch_path.float() - truth).abs().max().item())
    print(f"\ngemv_swiglu bf16 gate_up 16 rows: max abs err vs float64 {err:.3g} (cuBLAS + "
          f"silu_mul {err_torch:.3g})")
    assert err <= 1.5 * err_torch + 1e-3
    assert torch.equal(gemv_swiglu(x[3:4], w), got[3:4])


@pytest.mark.gpu
@pytest.mark.parametrize("split", [2, 4])
def test_gpu_gemv_split_k_bf16_narrow_weights(split):
    """The 0.6B's o_proj / down_proj shapes: split-K within bfloat16 rounding of the float64
    reference, and every row bit-identical alone and among 16."""
    from dataclasses import replace

    from kernels.tiles import gemv_tiles

    for n, k in ((1024, 2048), (1024, 3072)):
        x, w = _case(n, k, torch.bfloat16, device="cuda", m=16)
        tiles = replace(gemv_tiles("cuda", torch.bfloat16, n, k, False), split_k=split)
        got = gemv(x, w, tiles=tiles)
        want = x.double() @ w.double().T
        assert (got.double() - want).abs().max() <= 2e-2 * want.abs().max()
        for i in (0, 5, 15):
            assert torch.equal(gemv(x[i:i + 1], w, tiles=tiles), got[i:i + 1])
