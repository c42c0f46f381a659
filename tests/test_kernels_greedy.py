"""kernels/greedy.py (greedy decoding's argmax in two kernels) against torch's float32 argmax.

CPU (Triton interpreter, 128-column blocks): float32 and float16; random rows; ties everywhere
(small integers), within a block, across a block boundary, between the first and the last block,
+0 against -0; NaN, +inf and -inf rows, and NaN/inf past ``vocab_limit`` (ignored);
``vocab_limit`` None, V, 1, mid-block, past a block; strided and broadcast rows; empty and bad
input. ``infer.sampling``'s dispatch: ``sample`` and ``verify_sample`` through the kernels give the
torch path's tokens and acceptance flags. GPU (``-m gpu``): bfloat16 and float32 at Qwen3's
vocabulary with planted ties, NaN and inf rows; a captured graph, no host sync; the engine's greedy
tokens with the flag on and off, graphs and eager.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import infer.sampling as sampling
from infer.sampling_params import SamplingParams
from kernels.greedy import INTERPRETER_BLOCK as B
from kernels.greedy import NON_FINITE, greedy_tokens

NAN, INF = float("nan"), float("inf")


def reference(logits: torch.Tensor, vocab_limit: int | None = None) -> torch.Tensor:
    """torch: the first index of the float32 max over ids < vocab_limit, NON_FINITE where that
    max is not finite (NaN propagates through amax)."""
    x = logits.float().clone()
    if vocab_limit is not None:
        x[:, vocab_limit:] = -INF
    return torch.where(torch.isfinite(x.amax(-1)), x.argmax(-1), NON_FINITE)


def check(logits, vocab_limit=None):
    got = greedy_tokens(logits, vocab_limit)
    assert got.dtype == torch.int64 and got.shape == (logits.shape[0],)
    want = reference(logits, vocab_limit)
    assert torch.equal(got, want), (got.tolist(), want.tolist())
    return got


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("rows,vocab,limit", [(1, 1000, None), (16, 1000, 950), (5, 5000, 4999),
                                              (3, 130, 65), (2, 1, None), (4, 64, 64)])
def test_random_rows(dtype, rows, vocab, limit):
    g = torch.Generator().manual_seed(rows * vocab)
    check((torch.randn(rows, vocab, generator=g) * 4).to(dtype), limit)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_ties_everywhere_first_index_wins(dtype):
    # values in -3..3: each row's max is held by dozens of ids across many blocks
    g = torch.Generator().manual_seed(1)
    check(torch.randint(-3, 4, (16, 1500), generator=g).to(dtype))
    check(torch.randint(-3, 4, (16, 1500), generator=g).to(dtype), 1000)
    check(torch.zeros(3, 1000, dtype=dtype))  # a constant row: id 0


def test_planted_ties():
    vocab = 10 * B + 7  # a short last block
    x = torch.randn(10, vocab).clamp(max=5.0)
    planted = [(B + 10, B + 20),  # within one block
               (B - 1, B),  # the last of a block and the first of the next
               (2 * B - 1, 9 * B + 3),  # a block and the short last block
               (9 * B + 2, vocab - 1),  # within the short last block
               (3, 10 * B),  # the first block and the last block's first id
               (7 * B, 4 * B + 5),  # the later id planted first
               (0, vocab - 1)]  # the ends
    for r, ids in enumerate(planted):
        x[r, list(ids)] = 9.0
    x[7, :] = -1.0
    x[7, [4 * B + 1, 6 * B]] = torch.tensor([-0.0, 0.0])  # -0 == +0: the first wins
    x[8, [2 * B, 5 * B, 8 * B]] = 9.0  # three blocks tie
    x[9, B + 1], x[9, 2 * B + 1] = 9.0, 9.000001  # no tie: the larger, later one
    got = check(x)
    assert got[:7].tolist() == [min(ids) for ids in planted]
    assert got[7:].tolist() == [4 * B + 1, 2 * B, 2 * B + 1]
    check(x.half())


def test_non_finite_rows():
    vocab, limit = 5 * B + 9, 4 * B + 30  # limit mid-block
    x = torch.randn(12, vocab)
    x[0, 0] = NAN  # NaN at id 0
    x[1, 2 * B + 7] = NAN  # ... in the middle
    x[2, limit - 1] = NAN  # ... the last allowed id
    x[3, limit] = NAN  # past the limit: ignored, a token
    x[3, limit + 5:] = NAN
    x[4, 3 * B] = INF
    x[5, limit - 1] = INF
    x[6, limit:] = INF  # past the limit: ignored
    x[7] = -INF  # every id -inf
    x[8, :limit] = -INF  # only ids past the limit finite
    x[9, : 3 * B] = -INF  # -inf mixed with finite values: a token
    x[9, 3 * B + 1:] = -INF
    x[10, 5] = NAN  # NaN beside +inf and a planted max
    x[10, 6], x[10, 7] = INF, 50.0
    x[11, 1:] = -INF  # only id 0 usable
    got = check(x, limit)
    assert [r for r in range(12) if got[r] == NON_FINITE] == [0, 1, 2, 4, 5, 7, 8, 10]
    assert got[9] == 3 * B and got[11] == 0
    check(x.half(), limit)
    check(x)  # no limit: the rows with NaN/inf past it turn non-finite


@pytest.mark.parametrize("limit", [None, 3 * B + 7, 3 * B, 3 * B + 1, 1, 17])
def test_vocab_limit(limit):
    vocab = 3 * B + 7
    x = torch.randn(4, vocab)
    x[:, -1] = 100.0  # the largest logit on the last id: masked by any limit below V
    x[1, 0] = 100.0
    got = check(x, limit)
    assert (got < (limit or vocab)).all()


def test_strided_and_broadcast_rows():
    wide = torch.randn(6, 1000)
    x = wide[:, 13:13 + 700]  # row stride 1000
    assert x.stride() == (1000, 1)
    check(x, 650)
    check(wide[::2, :900])  # row stride 2000
    row = torch.randint(-2, 3, (1, 500)).float()
    check(row.expand(5, -1))  # row stride 0


def test_empty_and_bad_input():
    for dtype in (torch.float32, torch.float16):
        out = greedy_tokens(torch.empty(0, 100, dtype=dtype), 50)
        assert out.shape == (0,) and out.dtype == torch.int64
    with pytest.raises(ValueError, match=r"\[N, V\]"):
        greedy_tokens(torch.randn(100))
    with pytest.raises(ValueError, match="float16, bfloat16 or float32"):
        greedy_tokens(torch.ones(2, 100, dtype=torch.int32))
    with pytest.raises(ValueError, match="float16, bfloat16 or float32"):
        greedy_tokens(torch.ones(2, 100, dtype=torch.float64))
    with pytest.raises(ValueError, match="contiguous last dim"):
        greedy_tokens(torch.randn(100, 2).T)
    for limit in (0, -1, 101):
        with pytest.raises(ValueError, match="vocab_limit must be 1..100"):
            greedy_tokens(torch.randn(2, 100), limit)
    with pytest.raises(ValueError, match="no columns"):
        greedy_tokens(torch.randn(2, 0))
    for limit in (True, 2.5, "50"):
        with pytest.raises(ValueError, match="vocab_limit must be an int or None"):
            greedy_tokens(torch.randn(2, 100), limit)


# ---------------------------------------------------------------- infer.sampling's dispatch

def test_fused_path_is_taken_only_for_greedy_without_penalty(monkeypatch):
    cuda = SimpleNamespace(is_cuda=True)
    seen = torch.zeros(10, dtype=torch.bool)
    use = sampling._use_fused_greedy
    greedy = SamplingParams(temperature=0.0)
    assert use(cuda, greedy, None) and use(cuda, greedy, seen)  # no penalty to apply
    assert use(cuda, SamplingParams(temperature=0.0, presence_penalty=1.0), None)
    assert not use(cuda, SamplingParams(temperature=0.0, presence_penalty=1.0), seen)
    assert not use(cuda, SamplingParams(temperature=0.7), None)
    assert not use(SimpleNamespace(is_cuda=False), greedy, None)  # the CPU: torch ops
    monkeypatch.setattr(sampling, "FUSED_GREEDY", False)
    assert not use(cuda, greedy, None)


@pytest.fixture
def fused_on_cpu(monkeypatch):
    """``infer.sampling`` taking the kernels for CPU logits as for CUDA ones; yields the list of
    ``greedy_tokens`` calls (a spy)."""
    real_use, real_tokens = sampling._use_fused_greedy, sampling.greedy_tokens
    calls = []

    def tokens(logits, vocab_limit=None):
        calls.append(vocab_limit)
        return real_tokens(logits, vocab_limit)

    monkeypatch.setattr(sampling, "_use_fused_greedy",
                        lambda logits, params, presence: real_use(
                            SimpleNamespace(is_cuda=True), params, presence))
    monkeypatch.setattr(sampling, "greedy_tokens", tokens)
    return calls


def dispatch_logits(dtype=torch.float32, vocab=1200):
    """[16, vocab]: ties everywhere, a NaN row, an inf row, an all -inf row, NaN/inf past 1100."""
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-4, 5, (16, vocab), generator=g).float()
    x[1, 500] = NAN
    x[2, 7] = INF
    x[3] = -INF
    x[4, 1100:] = NAN
    x[5, 1150] = INF
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("limit", [None, 1100, 1200, 5000])  # 5000 > V: masks nothing
def test_sample_through_the_kernels_equals_the_torch_path(fused_on_cpu, monkeypatch, dtype,
                                                           limit):
    x = dispatch_logits(dtype)
    seen = torch.zeros(1200, dtype=torch.bool)
    seen[:600] = True
    greedy = SamplingParams(temperature=0.0)
    penalized = SamplingParams(temperature=0.0, presence_penalty=2.0)
    got = sampling.sample(x, greedy, vocab_limit=limit)
    got_pen = sampling.sample(x, penalized, presence=seen, vocab_limit=limit)
    assert fused_on_cpu == [None if limit is None else min(limit, 1200)]  # not the penalty
    monkeypatch.setattr(sampling, "FUSED_GREEDY", False)
    assert torch.equal(got, sampling.sample(x, greedy, vocab_limit=limit))
    assert torch.equal(got_pen, sampling.sample(x, penalized, presence=seen, vocab_limit=limit))
    assert got.tolist()[1:4] == [NON_FINITE] * 3 and len(fused_on_cpu) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("limit", [None, 1100])
def test_verify_sample_through_the_kernels_equals_the_torch_path(fused_on_cpu, monkeypatch,
                                                                 dtype, limit):
    x = dispatch_logits(dtype)
    best = reference(x, limit)
    drafts = best.clone()  # accepted where finite
    drafts[6:9] = (best[6:9] + 1) % 1100  # wrong drafts
    drafts[9:13] = torch.tensor([-1, 1200, 99999, -7])  # no draft / out of range
    drafts[1:4] = torch.tensor([-1, 7, 0])  # the bad rows: -1 == NON_FINITE is not accepted
    params = SamplingParams(temperature=0.0)
    got = sampling.verify_sample(x, drafts, params, vocab_limit=limit)
    assert len(fused_on_cpu) == 1
    monkeypatch.setattr(sampling, "FUSED_GREEDY", False)
    want = sampling.verify_sample(x, drafts, params, vocab_limit=limit)
    assert got.dtype == want.dtype == torch.int64 and torch.equal(got, want)
    assert got[1, 1:4].tolist() == [0, 0, 0] and got[1, 0] == 1


# ---------------------------------------------------------------------------- GPU

QWEN3_VOCAB, QWEN3_LIMIT = 151936, 151669


def planted(dtype, device="cuda"):
    """[16, 151936] random logits with planted ties, NaN and inf rows."""
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(16, QWEN3_VOCAB, generator=g, device=device) * 3
    x[1, [1023, 1024]] = 40.0  # a tie across the GPU block boundary
    x[2, [QWEN3_LIMIT - 1, 77]] = 40.0  # the first and the last allowed block
    x[3, QWEN3_LIMIT:] = 99.0  # padded ids with the largest logits
    x[4, 70000] = NAN
    x[5, 3] = INF
    x[6] = -INF
    x[7, :QWEN3_LIMIT] = -INF
    x[8, QWEN3_LIMIT + 3] = NAN  # past the limit
    x[9] = torch.randint(-3, 4, (QWEN3_VOCAB,), generator=g, device=device).float()
    x[10, 0] = NAN
    return x.to(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("limit", [None, QWEN3_LIMIT])
def test_gpu_qwen3_vocabulary_equals_torch(dtype, limit):
    x = planted(dtype)
    got = check(x, limit)
    assert got[4] == got[5] == got[6] == got[10] == NON_FINITE
    assert (got[7] == NON_FINITE) == (got[8] >= 0) == (limit is not None)  # finite past it
    assert got[1] == 1023 and got[2] == 77 and (got[3] < QWEN3_LIMIT) == (limit is not None)
    for n in (1, 5):  # fewer rows, and a row alone
        assert torch.equal(greedy_tokens(x[:n], limit), got[:n])
    assert torch.equal(greedy_tokens(x[9:10], limit), got[9:10])


@pytest.mark.gpu
def test_gpu_graph_replays_and_no_host_sync():
    x = planted(torch.bfloat16)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        greedy_tokens(x, QWEN3_LIMIT)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    s = torch.cuda.Stream()  # warm up on a side stream, then capture
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        greedy_tokens(x, QWEN3_LIMIT)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = greedy_tokens(x, QWEN3_LIMIT)
    for seed in (1, 2):
        x.copy_(planted(torch.bfloat16).roll(seed, dims=1))
        graph.replay()
        assert torch.equal(out, reference(x, QWEN3_LIMIT))


@pytest.mark.gpu
def test_gpu_engine_fused_greedy_same_tokens(gpu_qwen3_4l, monkeypatch):
    """The 4-layer 0.6B through the engine (CUDA graphs and eagerly): the same greedy tokens
    with the argmax in the kernels and in torch."""
    from mock_engine import greedy_by_flag

    out = greedy_by_flag(gpu_qwen3_4l, "bf16", monkeypatch, sampling, "FUSED_GREEDY")
    assert len(out[False, False]) == 40
    assert out[True, True] == out[True, False] == out[False, True] == out[False, False]
