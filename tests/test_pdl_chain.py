"""The PDL chain (``kernels/pdl_chain.py``): when it is on, what the launchers pass, and that it
never changes a result.

CPU: the switch (never on a CPU), the GEMV tiles it sets, what the launcher passes and an
unchanged result under the interpreter. The PTX placement of the wait and the signal is checked
by ``tests/test_kernels_compile.py``. GPU: chain on == chain off bit for bit, for each GEMV
shape of the 8B and the 0.6B, for a norm -> GEMV -> norm sequence repeated back to back (a
missing wait would read stale rows) and for the engine's greedy tokens with CUDA graphs and
eagerly.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kernels import device, gemv, pdl_chain
from kernels.rmsnorm import rmsnorm
from kernels.tiles import GemvTiles, gemv_tiles

GPU = torch.device("cuda", 0)


@pytest.fixture
def fake_h200(monkeypatch):
    """``kernels.device`` answers as an H200 would (sm_90, 132 SMs) without a GPU."""
    monkeypatch.setattr(device, "_capability", lambda index: (9, 0))
    monkeypatch.setattr(device, "_sm_count", lambda index: 132)


def test_chain_is_never_on_for_a_cpu(monkeypatch):
    monkeypatch.setattr(pdl_chain, "ENABLED", True)
    assert pdl_chain.chain_pdl("cpu") is False


@pytest.mark.parametrize("chain", [False, True])
@pytest.mark.parametrize("n, k, swiglu", [(6144, 4096, False), (12288, 4096, True),
                                          (1024, 2048, False)])
def test_gemv_tiles_follow_the_chain_switch(fake_h200, monkeypatch, chain, n, k, swiglu):
    monkeypatch.setattr(pdl_chain, "ENABLED", chain)
    t = gemv_tiles(GPU, torch.bfloat16, n, k, swiglu)
    assert t.pdl is chain
    monkeypatch.setattr(pdl_chain, "ENABLED", not chain)
    other = gemv_tiles(GPU, torch.bfloat16, n, k, swiglu)
    assert (other.block_n, other.block_k, other.num_stages, other.split_k) == (
        t.block_n, t.block_k, t.num_stages, t.split_k)  # the tiles themselves never move


@pytest.mark.parametrize("pdl", [False, True])
def test_chain_options_follow_the_tiles_and_the_device(monkeypatch, pdl):
    tiles = GemvTiles(64, 128, 5, pdl=pdl)
    assert gemv._chain_options(torch.device("cpu"), tiles) == {}  # the interpreter: never
    monkeypatch.setattr(gemv, "supports_pdl", lambda dev: True)
    want = {"USE_PDL": True, "launch_pdl": True} if pdl else {}
    assert gemv._chain_options(torch.device("cpu"), tiles) == want


def test_gemv_with_chain_tiles_on_a_cpu_is_unchanged():
    """Chain tiles on the interpreter launch exactly what plain tiles do (no PDL on a CPU)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 64, generator=gen)
    w = torch.randn(48, 64, generator=gen)
    plain = GemvTiles(16, 32, 1)
    chain = dataclasses.replace(plain, pdl=True)
    assert torch.equal(gemv.gemv(x, w, tiles=chain), gemv.gemv(x, w, tiles=plain))
    torch.testing.assert_close(gemv.gemv(x, w, tiles=chain), x @ w.T, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------- GPU


def _both(monkeypatch, fn):
    """``fn()`` with the chain off, then on (the same inputs), synchronized."""
    out = {}
    for chain in (False, True):
        monkeypatch.setattr(pdl_chain, "ENABLED", chain)
        out[chain] = fn()
        torch.cuda.synchronize()
    return out[False], out[True]


@pytest.mark.gpu
@pytest.mark.parametrize("n, k, swiglu", [
    (6144, 4096, False), (4096, 4096, False), (12288, 4096, True), (4096, 12288, False),
    (1024, 2048, False), (4096, 1024, False), (3072, 1024, True), (1000, 1000, False)])
@pytest.mark.parametrize("rows", [1, 16])
def test_gpu_gemv_chain_equals_plain(monkeypatch, n, k, swiglu, rows):
    torch.manual_seed(0)
    x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2 * n if swiglu else n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    run = (lambda: gemv.gemv_swiglu(x, w)) if swiglu else (lambda: gemv.gemv(x, w))
    off, on = _both(monkeypatch, run)
    assert torch.equal(on, off)


@pytest.mark.gpu
def test_gpu_chain_back_to_back_reads_fresh_rows(monkeypatch):
    """norm -> GEMV -> add + norm -> GEMV, 40 times back to back in one stream: each kernel reads
    its predecessor's output, so a wait in the wrong place shows as a mismatch somewhere."""
    torch.manual_seed(1)
    hidden, inner = 4096, 12288
    w_up = torch.randn(2 * inner, hidden, device="cuda", dtype=torch.bfloat16) / hidden ** 0.5
    w_down = torch.randn(hidden, inner, device="cuda", dtype=torch.bfloat16) / inner ** 0.5
    norm_w = torch.rand(hidden, device="cuda", dtype=torch.bfloat16) + 0.5
    x0 = torch.randn(1, hidden, device="cuda", dtype=torch.bfloat16)

    def chain():
        h, residual, outs = x0, x0, []
        for _ in range(40):
            h, residual = rmsnorm(h, norm_w, 1e-6, residual)
            h = gemv.gemv(gemv.gemv_swiglu(h, w_up), w_down)
            outs.append(h)
        return torch.stack(outs)

    off, on = _both(monkeypatch, chain)
    assert torch.isfinite(off).all()
    assert torch.equal(on, off)


@pytest.mark.gpu
@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_gpu_engine_chain_equals_plain(gpu_qwen3_4l, kv_cache, monkeypatch):
    """A 4-layer 0.6B through the engine: the same greedy tokens with the chain on and off,
    with CUDA graphs and eagerly."""
    from mock_engine import greedy_by_flag

    out = greedy_by_flag(gpu_qwen3_4l, kv_cache, monkeypatch, pdl_chain, "ENABLED")
    assert len(out[False, False]) == 40
    assert out[True, True] == out[True, False] == out[False, True] == out[False, False]
