"""Balanced rows of the decode GEMV (``GemvTiles.rows``, ``kernels.tiles.balanced_rows``): a
program owns ``rows <= block_n`` weight rows and its tile's other rows re-read its last row.

CPU (Triton interpreter): results against ``kernels.reference.linear`` (plain, SwiGLU, split-K;
float32 and float16; N not a multiple of the rows), every output column written once from its
own weight row (one-hot inputs, exact), the tile check, and the picker: which weights it spreads
and that ``gemv_tiles`` sets it only with ``GEMV_BALANCE_ROWS`` and without split-K. GPU
(``-m gpu``): the Qwen3-8B qkv_proj in bfloat16 against a float64 reference and the default
tiles, rows bit-identical alone and among 16.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from kernels import reference as ref
from kernels import tiles as tiles_module
from kernels.gemv import gemv, gemv_swiglu
from kernels.tiles import GemvTiles, balanced_rows, gemv_tiles

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3)}


def _case(n, k, dtype, device="cpu", m=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) / k ** 0.5).to(device=device, dtype=dtype)
    x = torch.randn(m, k, generator=g).to(device=device, dtype=dtype)
    return x, w


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m,n,k,rows,split", [(1, 37, 100, 9, 1), (7, 40, 64, 16, 1),
                                              (3, 33, 50, 11, 1), (2, 37, 100, 9, 2)])
def test_gemv_balanced_rows_matches_reference(dtype, m, n, k, rows, split):
    x, w = _case(n, k, dtype, m=m)
    tiles = GemvTiles(block_n=16, block_k=16, num_stages=1, rows=rows, split_k=split)
    got = gemv(x, w, tiles=tiles)
    assert got.shape == (m, n) and got.dtype == dtype
    torch.testing.assert_close(got, ref.linear(x, w), **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_gemv_swiglu_balanced_rows_matches_reference(dtype):
    x, w = _case(2 * 27, 70, dtype, m=4)
    tiles = GemvTiles(block_n=16, block_k=32, num_stages=1, rows=10)
    torch.testing.assert_close(gemv_swiglu(x, w, tiles=tiles), ref.silu_mul(ref.linear(x, w)),
                               **TOL[dtype])


@pytest.mark.parametrize("rows", [1, 7, 16])
def test_gemv_balanced_rows_write_each_column_once_from_its_row(rows):
    # w[j, c] = j + c / 1000 is distinct per row; one-hot x picks column c: output (i, j) must be
    # exactly w[j, c_i], so a column written from the clamped row, or not written, fails
    n, k = 45, 40
    w = torch.arange(n)[:, None] + torch.arange(k)[None, :] / 1000.0
    probes = (0, 17, 39)
    x = torch.zeros(len(probes), k)
    for i, c in enumerate(probes):
        x[i, c] = 1.0
    tiles = GemvTiles(block_n=16, block_k=16, num_stages=1, rows=rows)
    assert torch.equal(gemv(x, w, tiles=tiles), w[:, probes].T)


def test_gemv_tiles_rows_are_checked():
    for bad in (-1, 17, 2.5):
        with pytest.raises(ValueError, match="rows"):
            GemvTiles(block_n=16, block_k=16, num_stages=1, rows=bad)


@pytest.mark.parametrize("n,block_n,sms,want", [
    (6144, 64, 132, 47),    # 8B qkv_proj: 96 programs -> 131
    (3072, 32, 132, 24),    # 0.6B gate/up, one half: 96 -> 128
    (7168, 64, 132, 55),    # 14B qkv_proj: 112 -> 131
    (4096, 32, 132, 0),     # 128 blocks of 32 already: no fewer rows would do
    (151936, 64, 132, 0),   # lm_head fills the GPU many times over
    (12288, 32, 132, 0),    # 8B gate/up: 384 programs
    (100, 64, 132, 0),      # a tiny weight: 1 row a program would fill 1/64 of a tile
])
def test_balanced_rows_policy(n, block_n, sms, want):
    got = balanced_rows(n, block_n, sms)
    assert got == want
    if got:
        assert -(-n // got) <= sms < -(-n // block_n) * 2 and got <= block_n


def test_gemv_tiles_balance_only_with_the_flag_and_without_split_k(monkeypatch):
    monkeypatch.setattr(tiles_module, "capability", lambda device: (9, 0))
    monkeypatch.setattr(tiles_module, "sm_count", lambda device: 132)
    bf16 = torch.bfloat16
    assert gemv_tiles("cuda", bf16, 6144, 4096, False).rows == 0  # off as shipped
    monkeypatch.setattr(tiles_module, "GEMV_BALANCE_ROWS", True)
    assert gemv_tiles("cuda", bf16, 6144, 4096, False).rows == 47
    assert gemv_tiles("cuda", bf16, 3072, 1024, True).rows == 24
    o_proj = gemv_tiles("cuda", bf16, 1024, 2048, False)  # the 0.6B's: split-K 4 instead
    assert o_proj.split_k > 1 and o_proj.rows == 0


@pytest.mark.gpu
def test_gpu_gemv_balanced_rows_bf16_8b_qkv():
    n, k = 6144, 4096
    x, w = _case(n, k, torch.bfloat16, device="cuda", m=16)
    default = gemv_tiles("cuda", torch.bfloat16, n, k, False)
    rows = balanced_rows(n, default.block_n, torch.cuda.get_device_properties(0)
                         .multi_processor_count)
    tiles = replace(default, rows=rows or default.block_n // 2 + 1)
    got, plain = gemv(x, w, tiles=tiles), gemv(x, w, tiles=default)
    truth = (x.double() @ w.double().T).float()
    err, err_plain = ((got.float() - truth).abs().max().item(),
                      (plain.float() - truth).abs().max().item())
    differ = (got != plain).float().mean().item()
    print(f"\ngemv bf16 qkv {n}x{k}, rows {tiles.rows}: max abs err vs float64 {err:.3g} "
          f"(default tiles {err_plain:.3g}), elements differing from them {differ:.2%}")
    assert err <= 1.5 * err_plain + 1e-6
    for i in (0, 7, 15):  # row invariance
        assert torch.equal(gemv(x[i:i + 1], w, tiles=tiles), got[i:i + 1])
