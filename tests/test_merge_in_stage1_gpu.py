"""The split-KV combine folded into decode stage 1 (``kernels.decode_attention.MERGE_IN_STAGE1``)
on a GPU (``-m gpu``), bfloat16, where the combine (4 warps) and stage 1 (1 warp for INT8, 4 for
BF16) lay their tiles out differently: the same bits as the combine at the Qwen3-8B attention
shape (default split counts and a count past 256, with and without PDL), in a CUDA graph
replayed after the sequences grew, through the 4-layer 0.6B's layers (logits) and the engine
(greedy tokens, CUDA graphs and eagerly). The CPU tests: ``test_merge_in_stage1.py``.
"""

from __future__ import annotations

import pytest
import torch
from decode_case import TOL, Case
from test_merge_in_stage1 import fused_and_unfused, model_steps, ordered_combine  # noqa: F401

import kernels.decode_attention as da
from kernels.decode_plan import DecodeWorkspace, default_num_splits

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("pdl", [False, True], ids=["plain", "pdl"])
@pytest.mark.parametrize("splits", [None, 300], ids=["default", "300"])
@pytest.mark.parametrize("n", [1, 4])
@pytest.mark.parametrize("int8", [False, True], ids=["bf16", "int8"])
def test_gpu_merge_in_stage1_equals_the_combine(int8, n, splits, pdl, monkeypatch):
    """Lengths around pages, a long one and a padding sequence (exact zeros); 300 splits take
    the combine's two-pass path (and leave most splits empty)."""
    case = Case([5, 63, 64, 65, 3000, 0], n, kv_heads=8, group=4, head_dim=128, page_size=64,
                dtype=torch.bfloat16, int8=int8, device="cuda", k_gain=2.0)
    splits = splits or default_num_splits(1, 8, "cuda", torch.int8 if int8 else torch.bfloat16)
    ws = DecodeWorkspace.allocate(6, 8, 4 * n, splits, 128, "cuda")
    unfused, fused, again = fused_and_unfused(
        lambda out: case.run(num_splits=splits, workspace=ws, out=out, pdl=pdl), ws,
        monkeypatch, case.q)
    assert torch.equal(fused, unfused) and torch.equal(again, fused)
    assert torch.equal(fused[-n:], torch.zeros_like(fused[-n:]))
    torch.testing.assert_close(fused.float(), case.expected(), **TOL[torch.bfloat16])


@pytest.mark.parametrize("pdl", [False, True], ids=["plain", "pdl"])
@pytest.mark.parametrize("int8", [False, True], ids=["bf16", "int8"])
def test_gpu_merge_in_stage1_graph_replay(int8, pdl, monkeypatch):
    """Captured once with the merge in stage 1 (no memset of the counters in the graph),
    replayed twice after the sequences grew: the eager combine's bits each time, the counters
    back at 0."""
    case = Case([700, 2000], 1, kv_heads=8, group=4, head_dim=128, page_size=64,
                dtype=torch.bfloat16, int8=int8, device="cuda")
    c = case.cache
    splits = default_num_splits(1, 8, "cuda", torch.int8 if int8 else torch.bfloat16)
    ws = DecodeWorkspace.allocate(2, 8, 4, splits, 128, "cuda")
    out = torch.empty_like(case.q)
    lens = case.seq_lens.clone()
    lens.copy_(torch.tensor([300, 1000], dtype=torch.int32))

    def run(into):
        return da.decode_attention(case.q, c.k, c.v, lens, case.page_table, k_scale=c.k_scale,
                                   v_scale=c.v_scale, num_splits=splits, workspace=ws,
                                   out=into, tiles=case.tiles(pdl=pdl))

    monkeypatch.setattr(da, "MERGE_IN_STAGE1", True)
    run(out)  # compile outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run(out)
    monkeypatch.setattr(da, "MERGE_IN_STAGE1", False)
    lens.copy_(case.seq_lens)
    want = run(torch.empty_like(out))
    for _ in range(2):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, want)
        assert not ws.counters.any()
    torch.testing.assert_close(out.float(), case.expected(), **TOL[torch.bfloat16])


@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_gpu_model_merge_in_stage1_equals_combine(gpu_qwen3_4l, kv_cache, monkeypatch):
    """The 4-layer bfloat16 0.6B through TritonAttention (its default splits, the PDL chain as
    shipped): the same logits bit for bit, no combine launched with the merge in stage 1."""
    on, combines_on = model_steps(gpu_qwen3_4l, kv_cache, True, monkeypatch, num_splits=None)
    off, combines_off = model_steps(gpu_qwen3_4l, kv_cache, False, monkeypatch, num_splits=None)
    assert (combines_on, combines_off) == (0, 2 * gpu_qwen3_4l.config.num_hidden_layers)
    for a, b in zip(on, off, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_gpu_engine_merge_in_stage1_same_tokens(gpu_qwen3_4l, kv_cache, monkeypatch):
    """The 4-layer 0.6B through the engine (CUDA graphs and eagerly): the same greedy tokens
    with the merge in stage 1 and without."""
    from mock_engine import greedy_by_flag

    out = greedy_by_flag(gpu_qwen3_4l, kv_cache, monkeypatch, da, "MERGE_IN_STAGE1")
    assert len(out[False, False]) == 40
    assert out[True, True] == out[True, False] == out[False, True] == out[False, False]
