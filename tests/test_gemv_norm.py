"""kernels/gemv_norm.py (the RMSNorm between two decode GEMVs folded into them) against
``kernels.reference``: the producer ``gemv_residual_norm`` (``o_proj`` / ``down_proj`` with the
residual add, ``round(g * s)`` and per-program sums of ``s^2``) and the consumer ``gemv_rstd``
(qkv / gate-up with the norm's ``rstd`` after the dot), and the model's ``NORM_IN_GEMV``.

CPU (Triton interpreter, float32 and float16): the producer's stream against ``residual +
reference.linear``, its scaled rows bit for bit against ``norm_weight * stream``, its sums of
squares (shape, per-row totals, zero padding rows) for 1, 3 and 16 rows with a tail of rows and of
columns; the consumer, plain and SwiGLU, against ``reference.linear_rstd`` and, more loosely,
against the unfused ``gemv(reference.rms_norm(...))``; that it rounds once (float16) and takes its
rstd from the sums it is given; row invariance of both; bad input. The model's use of them:
``tests/test_gemv_norm_model.py``; the GPU tests: ``tests/test_gemv_norm_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch
import triton

from kernels import reference as ref
from kernels.gemv import gemv, gemv_swiglu
from kernels.gemv_norm import PendingNorm, gemv_residual_norm, gemv_rstd
from kernels.tiles import GemvTiles, gemv_tiles

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3)}
# the unfused path rounds the normed rows twice (x * rstd, then g * that), the fused one g * s
# once: the two differ by about one rounding of the operand, well inside these
LOOSE = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float16: dict(rtol=2e-2, atol=2e-2)}
SPLIT = GemvTiles(16, 16, 1, split_k=2)


def _producer_case(m, n, k, dtype, device="cpu", seed=0):
    """x [m, k], the producer's weight [n, k], the residual [m, n] and the norm weight [n]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    w = torch.randn(n, k, generator=g) / k ** 0.5
    res = torch.randn(m, n, generator=g)
    norm_w = 1 + 0.2 * torch.randn(n, generator=g)
    return [t.to(device=device, dtype=dtype) for t in (x, w, res, norm_w)]


def _weight(n, k, dtype, device="cpu", seed=1, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, k, generator=g) * scale / k ** 0.5).to(device=device, dtype=dtype)


# ---------------------------------------------------------------------------- producer


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m", [1, 3, 16])
def test_producer_matches_reference(dtype, m):
    # N = 100: 7 programs of 16 rows, the last with 4 (clamped tail rows); K = 72: one full
    # 64-column block and a masked tail
    n, k = 100, 72
    x, w, res, norm_w = _producer_case(m, n, k, dtype, seed=m)
    stream, pending = gemv_residual_norm(x, w, res, norm_w, 1e-6)
    assert stream.shape == (m, n) and stream.dtype == dtype and stream.is_contiguous()
    torch.testing.assert_close(stream, res + ref.linear(x, w), **TOL[dtype])
    # the torch path's roundings: the projection rounded (the plain GEMV, the same dot and
    # tiles), then the add rounded; one rounding of the float32 sum differs in float16
    assert torch.equal(stream, res + gemv(x, w))
    assert isinstance(pending, PendingNorm) and pending.eps == 1e-6
    assert pending.scaled.shape == (m, n) and pending.scaled.dtype == dtype
    assert torch.equal(pending.scaled, norm_w * stream)  # one rounding of an exact product
    block_n = gemv_tiles("cpu", dtype, n, k, swiglu=False).block_n
    sq = pending.sumsq
    assert sq.shape == (triton.cdiv(n, block_n), 16) and sq.dtype == torch.float32
    assert sq.is_contiguous()
    torch.testing.assert_close(sq.sum(0)[:m], stream.float().pow(2).sum(-1), rtol=1e-5, atol=0)
    assert torch.equal(sq[:, m:], torch.zeros_like(sq[:, m:]))  # padding rows exactly zero


def test_producer_sums_are_per_program():
    # one-hot stream: row i of the projection is 0 and the residual is a single 1 at column c_i,
    # so only the program that owns c_i has a nonzero sum for row i (exactly 1)
    n, k, block_n = 100, 40, 32
    probes = (0, 31, 32, 99)
    x = torch.zeros(len(probes), k)
    w = torch.randn(n, k)
    res = torch.zeros(len(probes), n)
    for i, c in enumerate(probes):
        res[i, c] = 1.0
    stream, pending = gemv_residual_norm(x, w, res, torch.full((n,), 3.0), 1e-6,
                                         tiles=GemvTiles(block_n, 16, 1))
    assert torch.equal(stream, res) and torch.equal(pending.scaled, 3 * res)
    want = torch.zeros(triton.cdiv(n, block_n), 16)
    for i, c in enumerate(probes):
        want[c // block_n, i] = 1.0
    assert torch.equal(pending.sumsq, want)


# ---------------------------------------------------------------------------- consumer


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m", [1, 16])
def test_consumer_matches_reference(dtype, m):
    # the consumer's K is the producer's N (100: one full 64-column block and a tail); its N
    # (37 rows, 20 per SwiGLU half) has a tail of rows too. eps = 0.1 against a mean square of
    # about 2 so that a dropped or misplaced eps shows.
    n, k, eps = 100, 72, 0.1
    x, w, res, norm_w = _producer_case(m, n, k, dtype, seed=10 + m)
    stream, pending = gemv_residual_norm(x, w, res, norm_w, eps)
    w_qkv = _weight(37, n, dtype)
    w_gu = _weight(40, n, dtype, seed=2, scale=4.0)  # projections of a few units: curved silu

    got = gemv_rstd(pending, w_qkv)
    assert got.shape == (m, 37) and got.dtype == dtype
    torch.testing.assert_close(got, ref.linear_rstd(stream, norm_w, eps, w_qkv), **TOL[dtype])
    unfused = gemv(ref.rms_norm(stream, norm_w, eps), w_qkv)
    torch.testing.assert_close(got, unfused, **LOOSE[dtype])

    act = gemv_rstd(pending, w_gu, swiglu=True)
    assert act.shape == (m, 20) and act.dtype == dtype
    want = ref.silu_mul(ref.linear_rstd(stream, norm_w, eps, w_gu))
    torch.testing.assert_close(act, want, **TOL[dtype])
    unfused = gemv_swiglu(ref.rms_norm(stream, norm_w, eps), w_gu)
    torch.testing.assert_close(act, unfused, **LOOSE[dtype])


def test_consumer_rounds_once():
    """float16: the float32 sum times rstd rounded once, as ``linear_rstd`` (and in the SwiGLU,
    ``gemv_swiglu``'s roundings after it). Only sums within float32 error of a rounding boundary
    may round the other way (well under 1 %); rounding the sum before the rstd, or the operand
    twice as the unfused path does, changes about a quarter of the elements or more."""
    dt = torch.float16
    x, w, res, norm_w = _producer_case(16, 100, 72, dt, seed=4)
    stream, pending = gemv_residual_norm(x, w, res, norm_w, 1e-6)
    w2 = _weight(200, 100, dt)
    got = gemv_rstd(pending, w2)
    assert (got != ref.linear_rstd(stream, norm_w, 1e-6, w2)).float().mean().item() <= 0.01
    w_gu = _weight(400, 100, dt, seed=2, scale=4.0)
    act = gemv_rstd(pending, w_gu, swiglu=True)
    want = ref.silu_mul(ref.linear_rstd(stream, norm_w, 1e-6, w_gu))
    assert (act != want).float().mean().item() <= 0.01


def test_consumer_takes_rstd_from_the_sums():
    """The consumer's scale comes from the producer's sums (not from the scaled rows): four times
    the sums halve the result (up to eps); the producer's tiles need not be the consumer's."""
    n, k = 100, 48
    x, w, res, norm_w = _producer_case(3, n, k, torch.float32, seed=5)
    stream, pending = gemv_residual_norm(x, w, res, norm_w, 1e-6, tiles=GemvTiles(32, 16, 1))
    assert pending.sumsq.shape == (4, 16)
    w2 = _weight(24, n, torch.float32)
    got = gemv_rstd(pending, w2, tiles=GemvTiles(16, 32, 1))
    torch.testing.assert_close(got, ref.linear_rstd(stream, norm_w, 1e-6, w2), **TOL[torch.float32])
    quad = PendingNorm(pending.scaled, pending.sumsq * 4, pending.eps)
    torch.testing.assert_close(gemv_rstd(quad, w2), got / 2, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------- row invariance


def test_rows_are_independent_of_the_other_rows():
    # a row alone gives the bit-identical results it gives among 16, producer and consumer. In
    # the interpreter tl.dot is numpy's matmul, whose BLAS may sum a row in another order
    # depending on the thread split, so the CPU case uses small integers, whose products and sums
    # (and sums of squares, < 2^24) are exact in float32 in any order: a row that reads another
    # row's data or sums still fails. The GPU test checks real data bit for bit.
    n, k = 100, 72
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-2, 3, (16, k), generator=g).float()
    w = torch.randint(-2, 3, (n, k), generator=g).float()
    res = torch.randint(-4, 5, (16, n), generator=g).float()
    norm_w = torch.randint(1, 4, (n,), generator=g).float()
    w_qkv = torch.randint(-2, 3, (37, n), generator=g).float()
    w_gu = torch.randint(-2, 3, (40, n), generator=g).float()
    stream, pending = gemv_residual_norm(x, w, res, norm_w, 1e-6)
    qkv, act = gemv_rstd(pending, w_qkv), gemv_rstd(pending, w_gu, swiglu=True)
    assert pending.sumsq.abs().max() < 2 ** 24
    for i in (0, 7, 15):
        s1, p1 = gemv_residual_norm(x[i:i + 1], w, res[i:i + 1], norm_w, 1e-6)
        assert torch.equal(s1, stream[i:i + 1])
        assert torch.equal(p1.scaled, pending.scaled[i:i + 1])
        assert torch.equal(p1.sumsq[:, 0], pending.sumsq[:, i])
        assert not p1.sumsq[:, 1:].any()
        assert torch.equal(gemv_rstd(p1, w_qkv), qkv[i:i + 1])
        assert torch.equal(gemv_rstd(p1, w_gu, swiglu=True), act[i:i + 1])


# ---------------------------------------------------------------------------- bad input


def test_bad_inputs_raise():
    m, n, k = 2, 40, 24
    x, w, res, norm_w = _producer_case(m, n, k, torch.float32)
    with pytest.raises(ValueError, match="residual must be"):
        gemv_residual_norm(x, w, res[:, :-1].contiguous(), norm_w, 1e-6)
    with pytest.raises(ValueError, match="residual must be"):
        gemv_residual_norm(x, w, res.half(), norm_w, 1e-6)
    with pytest.raises(ValueError, match="residual must be"):
        gemv_residual_norm(x, w, res.T.contiguous().T, norm_w, 1e-6)  # [m, n], not contiguous
    with pytest.raises(ValueError, match="norm_weight must be"):
        gemv_residual_norm(x, w, res, norm_w[:-1], 1e-6)
    with pytest.raises(ValueError, match="norm_weight must be"):
        gemv_residual_norm(x, w, res, norm_w.half(), 1e-6)
    with pytest.raises(ValueError, match="split-K"):
        gemv_residual_norm(x, w, res, norm_w, 1e-6, tiles=SPLIT)
    with pytest.raises(ValueError, match="1 to 16 rows"):
        gemv_residual_norm(x[:0], w, res[:0], norm_w, 1e-6)
    with pytest.raises(ValueError, match="M <= 16"):
        gemv_residual_norm(torch.randn(17, k), w, torch.randn(17, n), norm_w, 1e-6)

    _, pending = gemv_residual_norm(x, w, res, norm_w, 1e-6)
    w2 = torch.randn(8, n)
    with pytest.raises(ValueError, match="split-K"):
        gemv_rstd(pending, w2, tiles=SPLIT)
    for bad in (pending.sumsq.double(), torch.zeros(pending.sumsq.shape[0], 8),
                pending.sumsq[0], torch.zeros(16, pending.sumsq.shape[0]).T):
        with pytest.raises(ValueError, match="sumsq must be"):
            gemv_rstd(PendingNorm(pending.scaled, bad, 1e-6), w2)
    with pytest.raises(ValueError, match="columns"):
        gemv_rstd(pending, torch.randn(8, n + 1))
    with pytest.raises(ValueError, match="even row count"):
        gemv_rstd(pending, torch.randn(7, n), swiglu=True)
    with pytest.raises(ValueError, match="sumsq must be"):  # no program's sums at all
        gemv_rstd(PendingNorm(pending.scaled, torch.zeros(0, 16), 1e-6), w2)


def test_empty_projection_feeds_an_empty_sum():
    """A producer of no columns (N = 0) leaves one program's zero sums, and the consumer of its
    zero columns returns zeros (an empty sum), plain and SwiGLU."""
    x, w, res, norm_w = _producer_case(2, 0, 24, torch.float32)
    stream, pending = gemv_residual_norm(x, w, res, norm_w, 1e-6)
    assert stream.shape == (2, 0) and pending.sumsq.shape == (1, 16)
    assert torch.equal(gemv_rstd(pending, torch.randn(6, 0)), torch.zeros(2, 6))
    assert torch.equal(gemv_rstd(pending, torch.randn(6, 0), swiglu=True), torch.zeros(2, 3))
