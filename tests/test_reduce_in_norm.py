"""A split-K projection's reduce done by the add + RMSNorm after it (``kernels/splitk.py``,
``models.qwen3_fused.REDUCE_IN_NORM``): the same bits as the reduce kernel then the norm.

CPU (Triton interpreter): ``gemv(reduce=False)``'s partials against ``gemv``, ``rmsnorm`` of the
partials against ``rmsnorm`` of their reduce (float32 and float16, 1 to 16 rows, with and without
the residual, 1 to 4 splits), and the tiny Qwen3's fused forward with split-K forced on: the same
logits with the flag on and off, with no reduce launched when on. GPU (``-m gpu``): the 4-layer
bfloat16 0.6B, whose ``o_proj`` and ``down_proj`` take split-K on a GPU: the same logits bit for
bit, and the same greedy tokens through the engine with CUDA graphs and eagerly.
"""

from __future__ import annotations

import pytest
import torch

import kernels.splitk as splitk
from kernels.gemv import gemv
from kernels.rmsnorm import rmsnorm
from kernels.splitk import SplitKPartials
from kernels.tiles import GemvTiles


def _split_case(dtype, m, hidden, k, split, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen).to(dtype)
    w = (torch.randn(hidden, k, generator=gen) / k ** 0.5).to(dtype)
    tiles = GemvTiles(block_n=16, block_k=16, num_stages=1, split_k=split)
    return x, w, tiles


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m,hidden,k,split", [(1, 48, 64, 4), (5, 40, 48, 3), (16, 32, 64, 2)])
def test_partials_reduce_to_the_gemv_result(dtype, m, hidden, k, split):
    x, w, tiles = _split_case(dtype, m, hidden, k, split)
    parts = gemv(x, w, tiles=tiles, reduce=False)
    assert isinstance(parts, SplitKPartials)
    assert parts.shape == (m, hidden) and parts.dtype == dtype and parts.splits == split
    assert torch.equal(parts.reduce(), gemv(x, w, tiles=tiles))
    # without split-K there is nothing to fold: the tensor as usual
    plain = gemv(x, w, tiles=GemvTiles(block_n=16, block_k=16, num_stages=1), reduce=False)
    assert isinstance(plain, torch.Tensor) and plain.shape == (m, hidden)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m,hidden,k,split", [(1, 48, 64, 4), (7, 40, 48, 3), (16, 32, 64, 2),
                                              (3, 24, 16, 1)])
@pytest.mark.parametrize("with_residual", [False, True])
def test_rmsnorm_of_partials_equals_rmsnorm_of_their_reduce(dtype, m, hidden, k, split,
                                                            with_residual):
    x, w, tiles = _split_case(dtype, m, hidden, k, split, seed=m + split)
    gen = torch.Generator().manual_seed(9)
    norm_w = (1 + 0.1 * torch.randn(hidden, generator=gen)).to(dtype)
    parts = gemv(x, w, tiles=tiles, reduce=False)
    if split == 1:  # one run of K: gemv keeps its tensor, so make the one-split partials here
        ws = torch.zeros(1, 16, hidden)
        ws[0, :m] = x.float() @ w.float().T
        parts = SplitKPartials(ws, m, dtype)
    reduced = parts.reduce()
    if with_residual:
        r = torch.randn(m, hidden, generator=gen).to(dtype)
        out, res = rmsnorm(parts, norm_w, 1e-6, residual=r)
        want_out, want_res = rmsnorm(reduced, norm_w, 1e-6, residual=r)
        assert torch.equal(res, want_res)
    else:
        out, want_out = rmsnorm(parts, norm_w, 1e-6), rmsnorm(reduced, norm_w, 1e-6)
    assert out.shape == (m, hidden) and out.dtype == dtype
    assert torch.equal(out, want_out)


def test_partials_are_checked():
    with pytest.raises(ValueError, match="contiguous float32"):
        SplitKPartials(torch.zeros(2, 16, 8, dtype=torch.float16), 1, torch.float16)
    with pytest.raises(ValueError, match="at least 17 rows"):
        SplitKPartials(torch.zeros(2, 16, 8), 17, torch.float32)
    parts = SplitKPartials(torch.zeros(2, 16, 8), 3, torch.float32)
    with pytest.raises(ValueError, match="weight"):
        rmsnorm(parts, torch.ones(9), 1e-6)
    with pytest.raises(ValueError, match="residual must match"):
        rmsnorm(parts, torch.ones(8), 1e-6, residual=torch.zeros(2, 8))


def _forced_split_tiles(device, dtype, n, k, swiglu):
    """Split-K for every plain projection, as a GPU gives the 0.6B's narrow ones."""
    return GemvTiles(16, 16, 1, split_k=1 if swiglu else 3)


def _fused_logits(model, ids, pos, flag, monkeypatch):
    import models.qwen3_fused as fused

    reduces = []
    real = splitk.SplitKPartials.reduce

    def counted(self):
        reduces.append(1)
        return real(self)

    monkeypatch.setattr(fused, "REDUCE_IN_NORM", flag)
    monkeypatch.setattr(splitk.SplitKPartials, "reduce", counted)
    with torch.no_grad():
        hidden = model._forward_fused(model.model.embed_tokens(ids), pos, None, None)
    return model.compute_logits(hidden), len(reduces)


@pytest.mark.parametrize("tokens", [1, 6])
def test_model_reduce_in_norm_equals_reduce_kernel_cpu(tiny_ckpt_factory, tokens, monkeypatch):
    """The tiny Qwen3 with split-K on every plain projection: the same logits bit for bit with
    the reduce folded into the norms and without; folded, only the qkv projections (and the
    lm_head, on a GPU) still reduce on their own."""
    import kernels.gemv as gemv_module
    from models.loader import load_model

    model = load_model(tiny_ckpt_factory(vocab_size=512), device="cpu", dtype=torch.float32)
    monkeypatch.setattr(gemv_module, "gemv_tiles", _forced_split_tiles)
    ids, pos = torch.randint(0, 512, (tokens,)), torch.arange(tokens) + 20
    off, reduces_off = _fused_logits(model, ids, pos, False, monkeypatch)
    on, reduces_on = _fused_logits(model, ids, pos, True, monkeypatch)
    layers = model.config.num_hidden_layers
    assert reduces_off == 3 * layers  # qkv, o_proj, down per layer (the CPU lm_head: torch)
    assert reduces_on == layers
    assert torch.equal(on, off)


# ---------------------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_gpu_model_reduce_in_norm_bit_exact(gpu_qwen3_4l, monkeypatch):
    """The 4-layer bfloat16 0.6B (split-K o_proj and down_proj on a GPU): the same logits bit
    for bit at 1 and 16 rows, two reduce launches a layer fewer."""
    torch.manual_seed(0)
    for tokens in (1, 16):
        ids = torch.randint(0, 151669, (tokens,), device="cuda")
        pos = torch.arange(tokens, device="cuda") + 100
        off, reduces_off = _fused_logits(gpu_qwen3_4l, ids, pos, False, monkeypatch)
        on, reduces_on = _fused_logits(gpu_qwen3_4l, ids, pos, True, monkeypatch)
        assert reduces_off - reduces_on == 2 * gpu_qwen3_4l.config.num_hidden_layers
        assert torch.equal(on, off)


@pytest.mark.gpu
@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_gpu_engine_reduce_in_norm_same_tokens(gpu_qwen3_4l, kv_cache, monkeypatch):
    """The 4-layer 0.6B through the engine (Triton attention, CUDA graphs and eagerly): the
    same greedy tokens with the reduce in the norms and without."""
    from mock_engine import greedy_by_flag

    import models.qwen3_fused as fused

    out = greedy_by_flag(gpu_qwen3_4l, kv_cache, monkeypatch, fused, "REDUCE_IN_NORM")
    assert len(out[False, False]) == 40
    assert out[True, True] == out[True, False] == out[False, True] == out[False, False]
