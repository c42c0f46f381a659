"""kernels/topk_sample.py (top-k sampling in two kernels) against the torch path of
``infer.sampling``.

CPU (Triton interpreter, 64-column blocks): float32 and float16; the kept ids against a stable
descending sort (ties: the smallest id), the probabilities against ``topk_probs``, the token
against ``sample``'s torch path with the same generator seed, over k in 1..V-1, top-p, min-p,
``vocab_limit`` and temperatures; ties at the k-th value, -0 against +0, a -inf tail; NaN, +inf
and all -inf rows (``NON_FINITE``), NaN/inf past ``vocab_limit`` (ignored); strided rows; bad
input. ``topk_verify`` against ``verify_sample``'s torch path (drafts in and out of the top-k,
none, out of range, a NaN row). ``infer.sampling``'s dispatch. The GPU tests are in
``test_kernels_topk_sample_gpu.py``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from keyed_helpers import topk_kernels_on_cpu

import infer.sampling as sampling
from infer.sampling import make_generator
from infer.sampling_filters import topk_probs
from infer.sampling_params import SamplingParams
from kernels.topk_sample import INTERPRETER_BLOCK as B
from kernels.topk_sample import MAX_TOP_K, NON_FINITE, topk_sample, topk_verify

NAN, INF = float("nan"), float("inf")


def masked(x: torch.Tensor, limit: int | None) -> torch.Tensor:
    x = x.float().clone()
    if limit is not None:
        x[:, limit:] = -INF
    return x


def torch_tokens(x, params, seed, limit=None):
    """``sample``'s torch path (the kernels off)."""
    saved = sampling.FUSED_TOPK
    sampling.FUSED_TOPK = False
    try:
        return sampling.sample(x, params, make_generator(seed, x.device), vocab_limit=limit)
    finally:
        sampling.FUSED_TOPK = saved


def run(x, params, seed, limit=None):
    """The kernels with the noise ``sample`` would draw from ``seed``."""
    noise = torch.empty((x.shape[0], params.top_k), device=x.device).exponential_(
        1.0, generator=make_generator(seed, x.device))
    return topk_sample(x, noise, params.top_k, params.temperature, params.top_p, params.min_p,
                       limit)


def reference(x, params, seed, limit=None):
    """The filters and the race on the k best of a stable descending sort (ties: the smallest
    ids, where ``torch.topk`` keeps any), with ``run``'s noise: (tokens, probs, ids)."""
    m = masked(x, limit)
    vals, ids = torch.sort(m, dim=-1, descending=True, stable=True)
    vals, ids = vals[:, :params.top_k], ids[:, :params.top_k]
    probs = torch.softmax(vals / params.temperature, dim=-1)
    if params.top_p < 1.0:
        probs = probs.masked_fill(torch.cumsum(probs, -1) - probs >= params.top_p, 0.0)
    probs = probs.masked_fill(probs < params.min_p * probs[:, :1], 0.0)
    noise = torch.empty_like(probs).exponential_(1.0, generator=make_generator(seed, x.device))
    pick = (probs / noise.clamp(min=torch.finfo(torch.float32).tiny)).argmax(-1)
    tok = ids.gather(-1, pick[:, None]).squeeze(-1)
    return torch.where(torch.isfinite(m.amax(-1)), tok, NON_FINITE), probs, ids


def check(x, params, seed=0, limit=None, ties=False):
    """Ids, probabilities and token as ``reference``'s; without ``ties`` (no two logits equal
    near the k-th), the probabilities as ``topk_probs``'s and the token as the torch path's."""
    tok, probs, ids = run(x, params, seed, limit)
    k = params.top_k
    assert tok.shape == (x.shape[0],) and probs.shape == ids.shape == (x.shape[0], k)
    want, want_p, want_ids = reference(x, params, seed, limit)
    finite = want >= 0
    assert torch.equal(ids[finite], want_ids[finite])
    torch.testing.assert_close(probs[finite], want_p[finite], rtol=1e-5, atol=1e-7)
    assert torch.equal(tok, want), (tok.tolist(), want.tolist())
    if not ties:
        m = masked(x, limit)
        torch.testing.assert_close(probs[finite], topk_probs(m / params.temperature, params)[0][
            finite], rtol=1e-5, atol=1e-7)
        assert torch.equal(tok, torch_tokens(x, params, seed, limit))
    return tok, probs, ids


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("rows,vocab,k,limit", [(1, 1000, 20, None), (6, 1000, 20, 950),
                                                (3, 300, 1, None), (4, 65, 64, None),
                                                (2, 130, 50, 129), (5, 200, 7, 3)])
def test_random_rows(dtype, rows, vocab, k, limit):
    g = torch.Generator().manual_seed(rows * vocab + k)
    x = (torch.randn(rows, vocab, generator=g) * 3).to(dtype)
    sets = [(0.6, 0.95, 0.0), (1.0, 1.0, 0.0), (0.3, 0.5, 0.05), (2.0, 0.999, 0.2)]
    for seed, (t, top_p, min_p) in enumerate(sets[:2] if dtype == torch.float16 else sets):
        check(x, SamplingParams(temperature=t, top_k=k, top_p=top_p, min_p=min_p), seed, limit)


def test_filters_and_the_draw():
    x = torch.tensor([[5.0, 4.0, 3.0, 2.0, 1.0, 0.0] + [-5.0 - i for i in range(58)]] * 4)
    one = SamplingParams(temperature=1.0, top_k=4, top_p=0.1)  # only the best survives
    tok, probs, ids = check(x, one, seed=1)
    assert tok.tolist() == [0] * 4 and ids[0].tolist() == [0, 1, 2, 3]
    assert probs[:, 1:].eq(0).all() and probs[:, 0].gt(0.6).all()
    tok, probs, _ = check(x, SamplingParams(temperature=1.0, top_k=4, min_p=0.3), seed=2)
    assert probs[0, :2].gt(0).all() and probs[0, 2:].eq(0).all()  # e^-2 < 0.3 < e^-1
    assert set(tok.tolist()) <= {0, 1}
    _, probs, _ = check(x, SamplingParams(temperature=1.0, top_k=6), seed=3)
    assert probs.gt(0).all()  # top_p 1, min_p 0: all k kept
    torch.testing.assert_close(probs.sum(-1), torch.ones(4))
    # k == 1: the argmax whatever the noise
    for seed in range(3):
        assert check(x, SamplingParams(temperature=1.5, top_k=1), seed)[0].eq(0).all()


def test_ties_keep_the_smallest_ids():
    vocab = 6 * B + 9  # a short last block
    g = torch.Generator().manual_seed(2)
    x = torch.randint(-3, 4, (8, vocab), generator=g).float()  # ties everywhere
    check(x, SamplingParams(temperature=0.7, top_k=20, top_p=0.9), seed=4, ties=True)
    y = torch.full((3, vocab), -1.0)
    y[0, [B - 1, B, 5 * B + 2, vocab - 1]] = 2.0  # 4 tie for 3 places across blocks
    y[1, [2 * B, 3 * B]] = torch.tensor([-0.0, 0.0])  # -0 == +0: the smaller id first
    y[1, :B] = -INF
    y[2, :] = -INF  # all -inf but a few
    y[2, [7, 3 * B + 1]] = 1.0
    _, _, ids = check(y, SamplingParams(temperature=1.0, top_k=3), seed=5, ties=True)
    assert ids[0].tolist() == [B - 1, B, 5 * B + 2]
    assert ids[1, :2].tolist() == [2 * B, 3 * B]
    assert ids[2].tolist() == [7, 3 * B + 1, 0]  # then the first -inf id


def test_non_finite_rows():
    x = torch.randn(8, 5 * B) * 2
    x[1, 100] = NAN
    x[2, 7] = INF
    x[3] = -INF
    x[4, 4 * B + 5] = NAN  # past the limit: ignored
    x[5, 4 * B + 6] = INF  # past the limit: ignored
    x[6, : 4 * B] = -INF  # every allowed id -inf
    x[7, 0] = -INF
    p = SamplingParams(temperature=0.6, top_k=20, top_p=0.95)
    tok, _, _ = check(x, p, seed=6, limit=4 * B)
    assert tok[[1, 2, 3, 6]].eq(NON_FINITE).all() and tok[[0, 4, 5, 7]].ge(0).all()
    assert tok.lt(4 * B).all()


def test_strided_rows_and_empty():
    base = torch.randn(4, 700)
    x = base[:, :600]  # row stride 700
    check(x, SamplingParams(temperature=0.9, top_k=30, top_p=0.8), seed=7)
    tok, probs, ids = run(torch.empty(0, 100), SamplingParams(top_k=5), 0)
    assert tok.shape == (0,) and probs.shape == ids.shape == (0, 5)


@pytest.mark.parametrize("bad", [
    dict(x=torch.randn(3, 100, dtype=torch.float64)), dict(x=torch.randn(100)),
    dict(x=torch.randn(100, 3).t()), dict(k=0), dict(k=100), dict(k=MAX_TOP_K + 1),
    dict(k=True), dict(noise=torch.ones(3, 4)), dict(noise=torch.ones(3, 5).double()),
    dict(temperature=0.0), dict(top_p=0.0), dict(top_p=1.5), dict(min_p=-0.1),
    dict(limit=0), dict(limit=101), dict(limit=2.5)])
def test_bad_input(bad):
    x = bad.get("x", torch.randn(3, 100))
    k = bad.get("k", 5)
    noise = bad.get("noise", torch.ones(x.shape[0] if x.dim() == 2 else 1, 5))
    with pytest.raises(ValueError, match="topk_sample"):
        topk_sample(x, noise, k, bad.get("temperature", 1.0), bad.get("top_p", 1.0),
                    bad.get("min_p", 0.0), bad.get("limit"))


def torch_verify(x, drafts, params, seed, limit=None):
    """``verify_sample``'s torch path (the kernels off)."""
    saved = sampling.FUSED_TOPK
    sampling.FUSED_TOPK = False
    try:
        return sampling.verify_sample(x, drafts, params, make_generator(seed, x.device),
                                      vocab_limit=limit)
    finally:
        sampling.FUSED_TOPK = saved


def run_verify(x, drafts, params, seed, limit=None):
    """``topk_verify`` with the u and noise ``verify_sample`` draws from ``seed``."""
    g = make_generator(seed, x.device)
    u = torch.rand(x.shape[0], device=x.device, generator=g)
    noise = torch.empty((x.shape[0], params.top_k), device=x.device).exponential_(1.0,
                                                                                  generator=g)
    return topk_verify(x, drafts, u, noise, params.top_k, params.temperature, params.top_p,
                       params.min_p, limit)


def verify_drafts(x, limit=None):
    """Per row of ``x`` [N >= 12, V >= 71]: the best, the 2nd and 5th best, the 71st,
    none (-1), and ids past V or below -1, cycling."""
    order = torch.sort(masked(x, limit), dim=-1, descending=True, stable=True).indices
    choices = [order[:, 0], order[:, 1], order[:, 4], order[:, 70], torch.full_like(
        order[:, 0], -1), torch.full_like(order[:, 0], x.shape[1] + 3), torch.full_like(
        order[:, 0], -5)]
    return torch.stack([choices[r % len(choices)][r] for r in range(x.shape[0])])


@pytest.mark.parametrize("k,vocab,limit", [(20, 1200, None), (5, 1200, 1100), (64, 300, 290)])
def test_verify_equals_the_torch_path(k, vocab, limit):
    g = torch.Generator().manual_seed(k)
    x = torch.randn(14, vocab, generator=g) * 3
    x[9, 33] = NAN
    drafts = verify_drafts(x, limit)
    x[[0, 7], drafts[[0, 7]]] += 3.0  # rows 0 and 7 draft their best: make it likely
    accepted = 0
    for seed, (t, top_p, min_p) in enumerate([(0.6, 0.95, 0.0), (1.3, 0.7, 0.02)]):
        p = SamplingParams(temperature=t, top_k=k, top_p=top_p, min_p=min_p)
        got = run_verify(x, drafts, p, seed, limit)
        want = torch_verify(x, drafts, p, seed, limit)
        assert got.dtype == torch.int64 and got.shape == (2, 14)
        assert torch.equal(got, want), (got.tolist(), want.tolist())
        assert got[:, 9].tolist() == [NON_FINITE, 0]
        accepted += int(got[1].sum())
    assert 0 < accepted < 2 * 13  # some drafts accepted, some rejected


def test_verify_bad_input():
    x, p = torch.randn(3, 100), SamplingParams(top_k=5)
    with pytest.raises(ValueError, match="topk_verify: drafts"):
        run_verify(x, torch.zeros(3, dtype=torch.int32), p, 0)
    with pytest.raises(ValueError, match="topk_verify: u"):
        topk_verify(x, torch.zeros(3, dtype=torch.int64), torch.rand(2), torch.ones(3, 5), 5, 1.0)
    with pytest.raises(ValueError, match="topk_verify: logits"):
        topk_verify(x[0], torch.zeros(3, dtype=torch.int64), torch.rand(3), torch.ones(3, 5), 5,
                    1.0)
    out = run_verify(torch.empty(0, 100), torch.empty(0, dtype=torch.int64), p, 0)
    assert out.shape == (2, 0)


# ---------------------------------------------------------------- infer.sampling's dispatch

def test_fused_path_is_taken_only_for_top_k_sampling_without_penalty(monkeypatch):
    cuda = SimpleNamespace(is_cuda=True, shape=(4, 1000))
    seen = torch.zeros(1000, dtype=torch.bool)
    use = sampling._use_fused_topk
    qwen3 = SamplingParams(temperature=0.6, top_k=20, top_p=0.95)
    assert use(cuda, qwen3, None) and use(cuda, qwen3, seen)
    assert use(cuda, SamplingParams(top_k=MAX_TOP_K), None)
    assert not use(cuda, SamplingParams(top_k=MAX_TOP_K + 1), None)
    assert not use(cuda, SamplingParams(top_k=0), None)  # no top-k: the whole vocabulary
    assert not use(SimpleNamespace(is_cuda=True, shape=(4, 20)), qwen3, None)  # k >= V
    assert not use(cuda, SamplingParams(temperature=0.0, top_k=20), None)  # greedy
    pen = SamplingParams(top_k=20, presence_penalty=1.0)
    assert use(cuda, pen, None) and not use(cuda, pen, seen)
    assert not use(SimpleNamespace(is_cuda=False, shape=(4, 1000)), qwen3, None)
    monkeypatch.setattr(sampling, "FUSED_TOPK", False)
    assert not use(cuda, qwen3, None)


def kernels_on_cpu(monkeypatch, name: str) -> list:
    """``infer.sampling`` taking the kernels for CPU logits as for CUDA ones; returns the list of
    the ``vocab_limit`` each call of ``sampling.<name>`` (``topk_sample``/``topk_verify``) got."""
    real = getattr(sampling, name)
    calls = []

    def spy(*args):
        calls.append(args[-1])
        return real(*args)

    topk_kernels_on_cpu(monkeypatch)
    monkeypatch.setattr(sampling, name, spy)
    return calls


@pytest.mark.parametrize("limit", [1100, 5000])  # 5000 > V: masks nothing
def test_sample_through_the_kernels_equals_the_torch_path(monkeypatch, limit):
    calls = kernels_on_cpu(monkeypatch, "topk_sample")
    g = torch.Generator().manual_seed(8)
    x = torch.randn(6, 1200, generator=g) * 2
    x[2, 9] = NAN
    p = SamplingParams(temperature=0.6, top_k=20, top_p=0.95, min_p=0.01)
    for seed in range(2):
        got = sampling.sample(x, p, make_generator(seed, "cpu"), vocab_limit=limit)
        assert torch.equal(got, torch_tokens(x, p, seed, limit))
        assert got[2] == NON_FINITE
    assert calls == [min(limit, 1200)] * 2
    seen = torch.zeros(1200, dtype=torch.bool)
    sampling.sample(x, SamplingParams(top_k=5, presence_penalty=1.0), presence=seen)
    assert len(calls) == 2  # the penalty: the torch ops


def test_verify_sample_through_the_kernels_equals_the_torch_path(monkeypatch):
    calls = kernels_on_cpu(monkeypatch, "topk_verify")
    x = torch.randn(12, 800, generator=torch.Generator().manual_seed(9)) * 3
    drafts = verify_drafts(x, 700)
    p = SamplingParams(temperature=0.6, top_k=20, top_p=0.95)
    got = sampling.verify_sample(x, drafts, p, make_generator(0, "cpu"), vocab_limit=700)
    assert torch.equal(got, torch_verify(x, drafts, p, 0, 700))
    assert calls == [700]
