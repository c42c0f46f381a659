"""The decode GEMVs with the add + RMSNorm folded in (``kernels/gemv_residual_norm.py``) against
the unfused kernels and the plain-PyTorch oracle, and the model with ``FUSED_RESIDUAL_NORM``.

CPU (interpreter, float16/float32, tiny shapes with tails): the residual epilogue's stream is bit
for bit ``kernels/rmsnorm.py``'s ``h + residual`` and its partials sum to each row's squares;
the normalizing prologue matches ``reference.rms_norm`` then ``reference.linear`` (and SwiGLU),
with split-K, an odd K and every row count; a row's result is the same alone and among 16; bad
arguments raise. GPU: bfloat16 at the 8B's shapes against the unfused pair, and the engine's
greedy tokens with the fusion on and off, with CUDA graphs and eagerly.
"""

from __future__ import annotations

import pytest
import torch

from kernels import reference
from kernels.gemv import gemv, gemv_swiglu
from kernels.gemv_residual_norm import gemv_add_residual, gemv_rmsnorm
from kernels.rmsnorm import rmsnorm
from kernels.tiles import GemvTiles

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float16: dict(rtol=2e-2, atol=2e-2),
       torch.bfloat16: dict(rtol=5e-2, atol=5e-2)}


def _case(rows, k, n, dtype, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k, generator=gen).to(dtype)
    w = (torch.randn(n, k, generator=gen) / k ** 0.5).to(dtype)
    residual = torch.randn(rows, n, generator=gen).to(dtype)
    norm_w = (torch.rand(n, generator=gen) + 0.5).to(dtype)
    return [t.to(device) for t in (x, w, residual, norm_w)]


def _norm_weight(k, dtype, seed=7):
    return (torch.rand(k, generator=torch.Generator().manual_seed(seed)) + 0.5).to(dtype)


SPLIT = GemvTiles(16, 16, 1, split_k=2)  # two runs of K on the interpreter's small tiles


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("rows, k, n", [(1, 64, 48), (5, 40, 70), (16, 64, 32)])
@pytest.mark.parametrize("tiles", [None, SPLIT], ids=["plain", "split_k"])
def test_add_residual_stream_is_the_unfused_sum(dtype, rows, k, n, tiles):
    x, w, residual, norm_w = _case(rows, k, n, dtype)
    stream, stats = gemv_add_residual(x, w, residual, tiles=tiles)
    _, want = rmsnorm(gemv(x, w, tiles=tiles), norm_w, 1e-6, residual)
    assert torch.equal(stream, want)
    assert stats.dtype == torch.float32 and stats.shape[0] == rows
    torch.testing.assert_close(stats.sum(1), stream.double().pow(2).sum(1).float(),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("rows, k, n", [(1, 64, 48), (3, 70, 40), (16, 48, 64)])
@pytest.mark.parametrize("swiglu", [False, True])
def test_rmsnorm_prologue_matches_the_oracle(dtype, rows, k, n, swiglu):
    x, _, residual, _ = _case(rows, 32, k, dtype, seed=1)
    w = _case(rows, k, 2 * n if swiglu else n, dtype, seed=2)[1]
    norm_w = _norm_weight(k, dtype)
    stream, stats = gemv_add_residual(x, _case(rows, 32, k, dtype, seed=3)[1], residual)
    y = gemv_rmsnorm(stream, stats, norm_w, 1e-6, w, swiglu=swiglu)
    normed = reference.rms_norm(stream, norm_w, 1e-6)
    want = reference.linear(normed, w)
    if swiglu:
        want = reference.silu_mul(want)
    torch.testing.assert_close(y, want, **TOL[dtype])
    unfused = (gemv_swiglu if swiglu else gemv)(rmsnorm(stream, norm_w, 1e-6), w)
    torch.testing.assert_close(y, unfused, **TOL[dtype])
    if dtype == torch.float32:  # only the order of the squares' sum differs
        torch.testing.assert_close(y, unfused, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tiles", [None, SPLIT], ids=["plain", "split_k"])
def test_rows_are_independent_of_the_other_rows(tiles):
    x, w, residual, _ = _case(16, 64, 48, torch.float16)
    w2 = _case(16, 48, 40, torch.float16, seed=4)[1]
    norm_w = _norm_weight(48, torch.float16)
    stream, stats = gemv_add_residual(x, w, residual, tiles=tiles)
    y = gemv_rmsnorm(stream, stats, norm_w, 1e-6, w2)
    for r in (0, 7, 15):
        s1, st1 = gemv_add_residual(x[r:r + 1], w, residual[r:r + 1], tiles=tiles)
        assert torch.equal(s1, stream[r:r + 1]) and torch.equal(st1, stats[r:r + 1])
        assert torch.equal(gemv_rmsnorm(s1, st1, norm_w, 1e-6, w2), y[r:r + 1])


def test_stats_are_what_the_norm_uses():
    """Partials of another stream give another result: the prologue reads them."""
    x, w, residual, norm_w = _case(2, 32, 48, torch.float32)
    stream, stats = gemv_add_residual(x, w, residual)
    w2 = _case(2, 48, 24, torch.float32, seed=5)[1]
    y = gemv_rmsnorm(stream, stats, norm_w, 1e-6, w2)
    torch.testing.assert_close(gemv_rmsnorm(stream, stats * 4, norm_w, 1e-6, w2), y / 2,
                               rtol=1e-4, atol=1e-5)


def test_bad_arguments_raise():
    x, w, residual, norm_w = _case(2, 32, 48, torch.float32)
    with pytest.raises(ValueError, match="residual"):
        gemv_add_residual(x, w, residual[:, :40])
    with pytest.raises(ValueError, match="residual"):
        gemv_add_residual(x, w, residual.half())
    stream, stats = gemv_add_residual(x, w, residual)
    w2 = _case(2, 48, 24, torch.float32)[1]
    with pytest.raises(ValueError, match="stats"):
        gemv_rmsnorm(stream, stats.double(), norm_w, 1e-6, w2)
    with pytest.raises(ValueError, match="stats"):
        gemv_rmsnorm(stream, stats[:1], norm_w, 1e-6, w2)
    with pytest.raises(ValueError, match="norm_weight"):
        gemv_rmsnorm(stream, stats, norm_w[:40], 1e-6, w2)
    with pytest.raises(ValueError, match="M <= 16"):
        gemv_rmsnorm(torch.zeros(17, 48), torch.zeros(17, 3), norm_w, 1e-6, w2)


def test_model_decode_step_with_fused_residual_norm(tiny_ckpt_factory, monkeypatch):
    """The tiny Qwen3's fused path on 1 and 5 rows with ``FUSED_RESIDUAL_NORM`` on: the same
    hidden states as with it off up to float32 rounding; a 20-row step (prefill) is unchanged
    bit for bit."""
    import models.qwen3 as qwen3
    from models.loader import load_model

    model = load_model(tiny_ckpt_factory(vocab_size=512), device="cpu", dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for t in (1, 5, 20):
            ids = torch.randint(0, 512, (t,), generator=gen)
            pos = torch.arange(t)
            out = {}
            for fused in (False, True):
                monkeypatch.setattr(qwen3, "FUSED_RESIDUAL_NORM", fused)
                out[fused] = model._forward_fused(model.model.embed_tokens(ids), pos, None, None)
            if t > 16:
                assert torch.equal(out[True], out[False])
            else:
                torch.testing.assert_close(out[True], out[False], rtol=1e-4, atol=1e-4)
                ref = model.model.norm(model.model.embed_tokens(ids))  # a different answer
                assert not torch.allclose(out[True], ref, atol=1e-2)


# ---------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("k, n, swiglu", [(4096, 6144, False), (4096, 12288, True),
                                          (1024, 4096, False), (1024, 3072, True)])
@pytest.mark.parametrize("rows", [1, 16])
def test_gpu_fused_residual_norm_8b_shapes(k, n, swiglu, rows):
    """bfloat16: o_proj-shaped producer (4096 or the 0.6B's 1024 wide, split-K there), then the
    consumer, against rmsnorm then the GEMV; the stream bit for bit."""
    torch.manual_seed(0)
    x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    w_o = torch.randn(k, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    residual = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    norm_w = torch.rand(k, device="cuda", dtype=torch.bfloat16) + 0.5
    w = torch.randn(2 * n if swiglu else n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    stream, stats = gemv_add_residual(x, w_o, residual)
    normed, want_stream = rmsnorm(gemv(x, w_o), norm_w, 1e-6, residual)
    assert torch.equal(stream, want_stream)
    y = gemv_rmsnorm(stream, stats, norm_w, 1e-6, w, swiglu=swiglu)
    want = (gemv_swiglu if swiglu else gemv)(normed, w)
    torch.testing.assert_close(y, want, **TOL[torch.bfloat16])
    # a bfloat16 rounding step at most, in a small share of the outputs
    assert (y != want).float().mean().item() < 0.05


@pytest.mark.gpu
@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_gpu_engine_fused_residual_norm(gpu_qwen3_4l, kv_cache, monkeypatch):
    """A 4-layer 0.6B through the engine: graphs == eager with the fusion on, and the greedy
    tokens the same as with it off."""
    from types import SimpleNamespace

    import models.qwen3 as qwen3
    from infer import Engine, EngineConfig, SamplingParams

    tok = SimpleNamespace(stop_ids=set(), vocab_limit=151669)
    prompt = torch.randint(0, 151669, (100,), generator=torch.Generator().manual_seed(0)).tolist()
    sp = SamplingParams(temperature=0.0, max_new_tokens=40)
    out = {}
    for fused in (False, True):
        monkeypatch.setattr(qwen3, "FUSED_RESIDUAL_NORM", fused)
        for graphs in (False, True):
            cfg = EngineConfig("unused", ctx=512, kv_cache=kv_cache, page_size=16,
                               device="cuda", attention="triton", cuda_graphs=graphs)
            eng = Engine(cfg, model=gpu_qwen3_4l, tokenizer=tok)
            out[fused, graphs] = list(eng.new_session().generate(prompt, sp))
    assert len(out[True, True]) == 40
    assert out[True, True] == out[True, False]
    assert out[True, True] == out[False, True]
