"""kernels/gemv.py's weight tiles loaded before the PDL wait (``GemvTiles.prefetch``).

The peeled tiles are multiplied first, in the loop's order of the k-steps: CPU (interpreter,
float32 and float16) for the plain GEMV, SwiGLU and split-K, with K shorter than the prefetch
(clamped), with a column tail, and rows 1..16, exact on small integers and within rounding on
random values; row invariance; the tile policy's flag; bad values. GPU (``-m gpu``): bfloat16
at the Qwen3-8B shapes with the chain on (the loads before ``gdc_wait``), bit-identical to no
prefetch on random values.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import kernels.tiles
from kernels import reference as ref
from kernels.gemv import gemv, gemv_swiglu
from kernels.tiles import GemvTiles, gemv_tiles

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3)}


def _case(n, k, dtype, device="cpu", m=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) / k ** 0.5).to(device=device, dtype=dtype)
    x = torch.randn(m, k, generator=g).to(device=device, dtype=dtype)
    return x, w


CASES = [(swiglu, 1, 40, 64, 1) for swiglu in (False, True)] + \
    [(swiglu, 16, 37, 100, 1) for swiglu in (False, True)] + \
    [(swiglu, 3, 20, 16, 1) for swiglu in (False, True)] + \
    [(False, 2, 40, 200, 2), (False, 5, 33, 100, 3)]  # split-K: the plain GEMV only


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("swiglu,m,n,k,split", CASES)
def test_prefetch_matches_none(dtype, swiglu, m, n, k, split):
    """Depths 1 and 2 against 0, 16-column tiles: K=16 has fewer tiles than the depth (the
    launcher clamps it), K=100 ends in a partial tile (the masked peel). Small integers are
    exact in any order, so there the bits must match; random values within rounding (the
    interpreter's dot over 32 columns may round unlike two dots over 16; tensor cores do not:
    the GPU test)."""
    fn = gemv_swiglu if swiglu else gemv
    tiles = GemvTiles(block_n=16, block_k=16, num_stages=2, split_k=split)
    g = torch.Generator().manual_seed(5)
    rows = 2 * n if swiglu else n
    xi = torch.randint(-3, 4, (m, k), generator=g).to(dtype)
    wi = (torch.randint(-3, 4, (rows, k), generator=g) / 64).to(dtype)  # silu stays exact-ish
    x, w = _case(rows, k, dtype, m=m)
    want_i, want = fn(xi, wi, tiles=tiles), fn(x, w, tiles=tiles)
    expect = ref.silu_mul(ref.linear(x, w)) if swiglu else ref.linear(x, w)
    torch.testing.assert_close(want, expect, **TOL[dtype])
    for depth in (1, 2):
        pre = replace(tiles, prefetch=depth)
        assert torch.equal(fn(xi, wi, tiles=pre), want_i), depth
        torch.testing.assert_close(fn(x, w, tiles=pre), want, **TOL[dtype])


def test_prefetch_keeps_rows_invariant():
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-4, 5, (16, 96), generator=g).float()
    w = torch.randint(-4, 5, (24, 96), generator=g).float()
    tiles = GemvTiles(block_n=16, block_k=16, num_stages=2, prefetch=2)
    together = gemv(x, w, tiles=tiles)
    assert torch.equal(together, x @ w.T)  # small integers: exact in any order
    for i in (0, 7, 15):
        assert torch.equal(gemv(x[i:i + 1], w, tiles=tiles), together[i:i + 1])


def test_gemv_tiles_prefetch_follows_the_flag(monkeypatch):
    monkeypatch.setattr(kernels.tiles, "GEMV_PREFETCH", False)
    assert gemv_tiles("cpu", torch.float32, 64, 64, False).prefetch == 0
    monkeypatch.setattr(kernels.tiles, "GEMV_PREFETCH", True)
    assert gemv_tiles("cpu", torch.float32, 64, 64, False).prefetch == \
        kernels.tiles.PREFETCH_TILES
    for bad in (-1, 3, 1.5):
        with pytest.raises(ValueError, match="prefetch"):
            GemvTiles(block_n=16, block_k=16, num_stages=1, prefetch=bad)


@pytest.mark.gpu
@pytest.mark.parametrize("name,n,k,swiglu", [("qkv", 6144, 4096, False), ("o_proj", 4096, 4096,
                                              False), ("gate_up", 24576, 4096, True),
                                             ("down", 4096, 12288, False),
                                             ("o_proj_0.6b", 1024, 2048, False)])
def test_gpu_prefetch_is_bit_identical(name, n, k, swiglu):
    """On the GPU with the PDL chain's launch (the loads before ``gdc_wait``), 1 and 16 rows."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    fn = gemv_swiglu if swiglu else gemv
    tiles = gemv_tiles("cuda", torch.bfloat16, n // 2 if swiglu else n, k, swiglu)
    for m in (1, 16):
        x, w = _case(n, k, torch.bfloat16, device="cuda", m=m)
        want = fn(x, w, tiles=replace(tiles, prefetch=0))
        for depth in (1, 2):
            assert torch.equal(fn(x, w, tiles=replace(tiles, prefetch=depth)), want), (m, depth)
