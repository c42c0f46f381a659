"""kernels/gemv.py (a decode step's projections, 1 to 16 rows) against kernels/reference.linear.

CPU (Triton interpreter): float32 and float16; 1 to 16 rows; K below, at and past one column block
(16-64 columns in the interpreter), with and without a column tail; N not a multiple of the rows
per program (clamped tail rows); strided rows; row invariance; ``gemv_swiglu`` against
``reference.silu_mul`` of ``reference.linear``, with each rounding checked; empty shapes; bad
input. The model wiring (steps of 1, 5, 16 tokens through the GEMVs, 17 through cuBLAS) against
the torch path. ``gemv_rmsnorm``/``gemv_swiglu_rmsnorm`` (RMSNorm in the prologue) against
``rmsnorm`` then the GEMV and the reference, with and without residual, split-K, exact rows; the
model with ``FUSED_NORM_GEMV`` on against it off. GPU (``-m gpu``): bfloat16 at the Qwen3-8B
shapes, error against a float64 reference no worse than cuBLAS's (printed), every row
bit-identical alone and among 16; float32 in full precision; ``gemv_swiglu`` at the 8B width.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernels import reference as ref
from kernels.gemv import gemv, gemv_swiglu
from kernels.gemv_norm import gemv_rmsnorm, gemv_swiglu_rmsnorm
from kernels.rmsnorm import rmsnorm
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


# ---------------------------------------------------------------- RMSNorm in the prologue

def _norm_case(m, k, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, r = torch.randn(m, k, generator=g).to(dtype), torch.randn(m, k, generator=g).to(dtype)
    return x, r, (1 + torch.randn(k, generator=g) / 4).to(dtype)


@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m,n,k", [(1, 5, 7), (3, 9, 64), (16, 37, 100), (2, 40, 200)])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("swiglu", [False, True])
def test_gemv_rmsnorm_matches_rmsnorm_then_gemv(dtype, m, n, k, residual, swiglu):
    """The result is the GEMV of rmsnorm's rows up to the sum-of-squares order (one column block
    or several, with and without a tail); the new residual is rmsnorm's, bit for bit."""
    x, r, g = _norm_case(m, k, dtype)
    _, w = _case(2 * n if swiglu else n, k, dtype, seed=1)
    r = r if residual else None
    fused, plain = (gemv_swiglu_rmsnorm, gemv_swiglu) if swiglu else (gemv_rmsnorm, gemv)
    got, new = fused(x, w, g, 1e-6, r)
    assert got.shape == (m, n) and got.dtype == dtype
    h = rmsnorm(x, g, 1e-6, r)
    if residual:
        h, want_new = h
        assert new.shape == (m, k) and new.is_contiguous() and torch.equal(new, want_new)
    else:
        assert new is None
    torch.testing.assert_close(got, plain(h, w), **TOL[dtype])
    lin = ref.linear(ref.rms_norm(x, g, 1e-6, r)[0] if residual else ref.rms_norm(x, g, 1e-6), w)
    torch.testing.assert_close(got, ref.silu_mul(lin) if swiglu else lin, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m,n,k,split", [(1, 40, 200, 2), (16, 37, 100, 3), (2, 130, 33, 2)])
@pytest.mark.parametrize("residual", [False, True])
def test_gemv_rmsnorm_split_k(dtype, m, n, k, split, residual):
    """Split-K: every split computes rstd over all of K; only split 0 of program 0 stores the
    new residual."""
    x, r, g = _norm_case(m, k, dtype)
    _, w = _case(n, k, dtype, seed=1)
    r = r if residual else None
    tiles = GemvTiles(block_n=16, block_k=16, num_stages=1, split_k=split)
    got, new = gemv_rmsnorm(x, w, g, 1e-5, r, tiles=tiles)
    h = rmsnorm(x, g, 1e-5, r)
    if residual:
        h, want_new = h
        assert torch.equal(new, want_new)
    torch.testing.assert_close(got, gemv(h, w, tiles=tiles), **TOL[dtype])


@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
@pytest.mark.parametrize("swiglu,split", [(False, 1), (False, 3), (True, 1)])  # SwiGLU: no split-K
def test_gemv_rmsnorm_rows_exact_and_invariant(swiglu, split):
    # exact values (see the row-invariance test above): each row of s = x + residual is
    # +-2^p_i (p_i its own), so rstd is 2^-p_i exactly (eps = 2^-40 is lost in rounding the
    # mean of squares, >= 2^-6; it keeps the zero padding rows finite), the normalized rows are
    # +-g with small integers g, and every product and sum is exact in any order. A row that
    # used another row's rstd, its residual or a wrong column block fails the exact check.
    gen = torch.Generator().manual_seed(0)
    m, k = 16, 150
    scale = 2.0 ** torch.arange(-3, 13).float()[:, None]  # row i: 2^(i - 3)
    s = torch.where(torch.rand(m, k, generator=gen) < 0.5, -1.0, 1.0) * scale
    r = torch.randint(-4, 5, (m, k), generator=gen).float()
    x = s - r  # exact: x + r == s
    g = torch.randint(1, 5, (k,), generator=gen).float()
    w = torch.randint(-4, 5, (60 if swiglu else 30, k), generator=gen).float()
    tiles = GemvTiles(block_n=16, block_k=32, num_stages=1, split_k=split)
    fn = gemv_swiglu_rmsnorm if swiglu else gemv_rmsnorm
    eps = 2.0 ** -40
    together, new = fn(x, w, g, eps, r, tiles=tiles)
    assert torch.equal(new, s)
    normed = torch.sign(s) * g  # exact
    if not swiglu:
        assert torch.equal(together, normed @ w.T)
    for i in (0, 7, 15):
        alone, new_i = fn(x[i:i + 1], w, g, eps, r[i:i + 1], tiles=tiles)
        assert torch.equal(alone, together[i:i + 1]) and torch.equal(new_i, s[i:i + 1])


def test_gemv_rmsnorm_empty_shapes_and_bad_inputs():
    x, r, g = _norm_case(2, 8, torch.float32)
    y, new = gemv_rmsnorm(x, torch.randn(0, 8), g, 1e-6, r)  # no program ran: the add still
    assert y.shape == (2, 0) and torch.equal(new, x + r)
    y, new = gemv_rmsnorm(x[:0], torch.randn(4, 8), g, 1e-6, r[:0])
    assert y.shape == (0, 4) and new.shape == (0, 8)
    w = torch.randn(4, 8)
    with pytest.raises(ValueError, match="norm_weight must be"):
        gemv_rmsnorm(x, w, torch.randn(7), 1e-6)
    with pytest.raises(ValueError, match="norm_weight must be"):
        gemv_rmsnorm(x, w, g.half(), 1e-6)
    with pytest.raises(ValueError, match="contiguous"):
        gemv_rmsnorm(x, w, torch.randn(16)[::2], 1e-6)
    with pytest.raises(ValueError, match="residual must match"):
        gemv_rmsnorm(x, w, g, 1e-6, r[:1])
    with pytest.raises(ValueError, match="residual must match"):
        gemv_rmsnorm(x, w, g, 1e-6, r.half())
    with pytest.raises(ValueError, match="residual needs a contiguous"):
        gemv_rmsnorm(x, w, g, 1e-6, torch.randn(8, 2).T)
    with pytest.raises(ValueError, match="M <= 16"):
        gemv_rmsnorm(torch.randn(17, 8), w, g, 1e-6)
    with pytest.raises(ValueError, match="even row count"):
        gemv_swiglu_rmsnorm(x, torch.randn(5, 8), g, 1e-6, r)


@pytest.mark.parametrize("tokens", [1, 5, 16, 17])
def test_fused_norm_gemv_switch_matches_it_off(tiny_ckpt_factory, monkeypatch, tokens):
    """``FUSED_NORM_GEMV`` on: up to 16 tokens run both norms of each layer in the qkv and
    gate/up GEMVs' prologue (17 take rmsnorm and cuBLAS); the hidden states equal the switch
    off (and the torch path) up to the summation order."""
    from models import qwen3
    from models.loader import load_model

    model = load_model(tiny_ckpt_factory(vocab_size=512), device="cpu", dtype=torch.float32)
    ids, pos = torch.randint(0, 512, (tokens,)), torch.arange(tokens) + 40
    calls = []
    monkeypatch.setattr(qwen3, "gemv_rmsnorm",
                        lambda *a, **kw: calls.append(1) or gemv_rmsnorm(*a, **kw))
    with torch.no_grad():
        emb = model.model.embed_tokens(ids)
        off = model._forward_fused(emb, pos, None, None)
        assert not calls
        monkeypatch.setattr(qwen3, "FUSED_NORM_GEMV", True)
        on = model._forward_fused(emb, pos, None, None)
        assert len(calls) == (model.config.num_hidden_layers if tokens <= 16 else 0)
        torch.testing.assert_close(on, off, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(on, model.forward(ids, pos), rtol=1e-4, atol=1e-4)


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
@pytest.mark.parametrize("swiglu", [False, True])
def test_gpu_gemv_rmsnorm_bf16_8b_shapes(swiglu):
    """bfloat16, the 8B's qkv (6144 x 4096) and gate/up (2 x 12288 x 4096): the fused norm
    against rmsnorm then the GEMV (the same roundings; only the sum of squares' order differs),
    the new residual bit-equal, every row bit-identical alone and among 16."""
    n, k = (24576, 4096) if swiglu else (6144, 4096)
    x, w = _case(n, k, torch.bfloat16, device="cuda", m=16)
    res = torch.randn_like(x)
    g = (1 + 0.1 * torch.randn(k, device="cuda")).to(torch.bfloat16)
    fused, plain = (gemv_swiglu_rmsnorm, gemv_swiglu) if swiglu else (gemv_rmsnorm, gemv)
    y, new = fused(x, w, g, 1e-6, res)
    normed, want_res = rmsnorm(x, g, 1e-6, res)
    want = plain(normed, w)
    assert torch.equal(new, want_res)
    assert (y.float() - want.float()).abs().max() <= 2e-2 * want.float().abs().max()
    for i in (0, 7, 15):
        yi, _ = fused(x[i:i + 1], w, g, 1e-6, res[i:i + 1])
        assert torch.equal(yi, y[i:i + 1])


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
