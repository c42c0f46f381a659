"""kernels/topk_sample.py on a GPU (``-m gpu``): bfloat16 and float32 at Qwen3's vocabulary, 1 to
16 rows, sampling and the verify rule, against the torch path (float32) or a tie-stable top-k
(bfloat16 logits tie often near the k-th value); a captured graph replays with fresh noise and no
host sync; the engine's seeded sampled tokens with the kernels and with torch, graphs and eager.
The CPU tests (and the helpers) are in ``test_kernels_topk_sample.py``.
"""

from __future__ import annotations

import pytest
import torch
from test_kernels_topk_sample import NAN, check, run_verify, torch_verify, verify_drafts

import infer.noise_keys as noise_keys
import infer.sampling as sampling
from infer.sampling import make_generator
from infer.sampling_params import SamplingParams
from kernels.topk_sample import MAX_TOP_K, NON_FINITE

QWEN3_VOCAB, QWEN3_LIMIT = 151936, 151669


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [1, 5, 16])
def test_gpu_qwen3_vocabulary_equals_torch(dtype, rows):
    g = torch.Generator(device="cuda").manual_seed(rows)
    x = (torch.randn(rows, QWEN3_VOCAB, generator=g, device="cuda") * 4).to(dtype)
    if rows > 1:
        x[1, QWEN3_LIMIT:] = 99.0  # padded ids with the largest logits
        x[-1, 5] = NAN
    for seed, p in enumerate([SamplingParams(temperature=0.6, top_k=20, top_p=0.95),
                              SamplingParams(temperature=1.0, top_k=MAX_TOP_K, min_p=0.05),
                              SamplingParams(temperature=0.2, top_k=1)]):
        # bfloat16 logits tie often near the k-th (8 bits of mantissa over 151936 values), and
        # torch.topk keeps any of the tied ids: the torch path's token only for float32
        tok, _, _ = check(x, p, seed, QWEN3_LIMIT, ties=dtype == torch.bfloat16)
        assert tok.lt(QWEN3_LIMIT).all()
        assert (tok[-1] == NON_FINITE) == (rows > 1)


@pytest.mark.gpu
def test_gpu_verify_equals_torch():
    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(16, QWEN3_VOCAB, generator=g, device="cuda") * 3  # float32: no ties
    x[9, 33] = NAN
    drafts = verify_drafts(x, QWEN3_LIMIT)
    p = SamplingParams(temperature=0.6, top_k=20, top_p=0.95)
    for seed in range(3):
        got = run_verify(x, drafts, p, seed, QWEN3_LIMIT)
        assert torch.equal(got, torch_verify(x, drafts, p, seed, QWEN3_LIMIT))
        assert got[:, 9].tolist() == [NON_FINITE, 0]


@pytest.mark.gpu
def test_gpu_graph_replays_and_no_host_sync():
    x = torch.randn(4, QWEN3_VOCAB, device="cuda").bfloat16()
    p = SamplingParams(temperature=0.6, top_k=20, top_p=0.95)
    gen = make_generator(0, "cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        sampling.sample(x, p, gen, vocab_limit=QWEN3_LIMIT)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        sampling.sample(x, p, gen, vocab_limit=QWEN3_LIMIT)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    graph.register_generator_state(gen.graphsafe_get_state())
    with torch.cuda.graph(graph):
        out = sampling.sample(x, p, gen, vocab_limit=QWEN3_LIMIT)
    draws = []
    for _ in range(50):
        graph.replay()
        draws.append(out.clone())
    draws = torch.stack(draws)  # [50, 4]
    top = torch.topk(x.float()[:, :QWEN3_LIMIT], 20).indices
    assert all(torch.isin(draws[:, r], top[r]).all() for r in range(4))
    assert all(len(set(draws[:, r].tolist())) > 1 for r in range(4))  # fresh noise per replay


@pytest.mark.gpu
def test_gpu_engine_fused_topk_same_tokens(gpu_qwen3_4l, monkeypatch):
    """The 4-layer 0.6B through the engine (CUDA graphs and eagerly), Qwen3's sampling with a
    seed: the same tokens with the draw in the kernels and in torch, where torch keeps the
    smallest ids among logits tied at the k-th value as the kernels do (the bfloat16 logits tie
    often; ``torch.topk`` keeps any of them)."""
    from mock_engine import greedy_by_flag

    def stable_topk_probs(x, params):
        vals, idx = torch.sort(x, dim=-1, descending=True, stable=True)
        vals, idx = vals[:, :params.top_k], idx[:, :params.top_k]
        return real_topk_probs(vals, params)[0], idx  # vals: its own top-k, in order

    real_topk_probs = sampling.topk_probs
    monkeypatch.setattr(sampling, "topk_probs", stable_topk_probs)
    monkeypatch.setattr(noise_keys, "KEYED_NOISE", False)  # both paths: the generator's noise
    sp = SamplingParams(temperature=0.6, top_k=20, top_p=0.95, seed=11, max_new_tokens=40)
    out = greedy_by_flag(gpu_qwen3_4l, "bf16", monkeypatch, sampling, "FUSED_TOPK", sp=sp)
    assert len(out[False, False]) == 40
    assert out[True, True] == out[True, False] == out[False, True] == out[False, False]
