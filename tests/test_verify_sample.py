"""infer/sampling.py ``verify_sample``: the greedy rule, and the losslessness of the sampled rule
(the emitted token is distributed as the target p whatever the draft; a draft is accepted with
probability p(draft)), measured over many independent rows; the non-finite guard; seeds; on CUDA,
no host sync and a captured graph equal to eager."""

from __future__ import annotations

import pytest
import torch

from infer.sampling import NON_FINITE, make_generator, sample, verify_sample
from infer.sampling_filters import full_probs
from infer.sampling_params import SamplingParams

N = 20000  # rows verified at once, each with the same logits and draft
P = torch.tensor([0.4, 0.25, 0.15, 0.1, 0.06, 0.04], dtype=torch.float64)


def freqs(ids, vocab):
    return torch.bincount(ids, minlength=vocab).double() / ids.numel()


def verify_rows(logits_row, draft, params, seed=0, n=N, **kw):
    logits = logits_row.float().expand(n, -1)
    drafts = torch.full((n,), draft, dtype=torch.int64)
    return verify_sample(logits, drafts, params, make_generator(seed, "cpu"), **kw)


def _keep(p, mask):
    p = p * mask
    return p / p.sum()


# (params, the filtered target distribution of P, worked out by hand)
CASES = [
    (SamplingParams(temperature=1.0), P),
    (SamplingParams(temperature=2.0, top_k=4), _keep(P.sqrt(), torch.tensor([1, 1, 1, 1, 0, 0]))),
    (SamplingParams(top_k=3), _keep(P, torch.tensor([1, 1, 1, 0, 0, 0]))),  # top-k path
    (SamplingParams(top_p=0.6), _keep(P, torch.tensor([1, 1, 0, 0, 0, 0]))),  # full path
    (SamplingParams(min_p=0.3), _keep(P, torch.tensor([1, 1, 1, 0, 0, 0]))),  # drops < 0.12
    (SamplingParams(top_k=5, top_p=0.7), _keep(P, torch.tensor([1, 1, 1, 0, 0, 0]))),
]


@pytest.mark.parametrize("params,want", CASES)
@pytest.mark.parametrize("draft", [0, 1, 3, 5, -1])
def test_sampled_rule_is_lossless(params, want, draft):
    out = verify_rows(P.log(), draft, params, seed=draft + 7)
    assert out.shape == (2, N) and out.dtype == torch.int64
    tok, ok = out[0], out[1].bool()
    torch.testing.assert_close(freqs(tok, 6), want, atol=0.015, rtol=0)
    p_draft = want[draft].item() if draft >= 0 else 0.0
    assert abs(ok.double().mean().item() - p_draft) < 0.015
    assert (tok[ok] == draft).all()  # accepted: the draft itself
    assert (tok[~ok] != draft).all()  # rejected: drawn with the draft removed
    if p_draft == 0.0:
        assert not ok.any()


def test_sampled_rule_on_a_large_vocabulary():
    torch.manual_seed(1)
    x = torch.randn(1000) * 2
    x[990:] = 30.0  # padded ids
    params = SamplingParams(temperature=0.8, top_k=20, top_p=0.9)
    want = full_probs(x[None, :990].float() / 0.8, params)[0].double()
    want = torch.cat([want / want.sum(), torch.zeros(10, dtype=torch.float64)])
    order = want.argsort(descending=True)
    for draft in (order[0].item(), order[4].item(), order[50].item()):
        out = verify_rows(x, draft, params, seed=draft, vocab_limit=990)
        torch.testing.assert_close(freqs(out[0], 1000), want, atol=0.015, rtol=0)
        assert abs(out[1].double().mean().item() - want[draft].item()) < 0.015


def test_certain_draft_is_always_accepted_and_a_dropped_one_never():
    params = SamplingParams(top_k=1)  # p is a point mass on the argmax (id 0)
    assert verify_rows(P.log(), 0, params, n=500).tolist() == [[0] * 500, [1] * 500]
    assert verify_rows(P.log(), 2, params, n=500).tolist() == [[0] * 500, [0] * 500]


def test_greedy_rule_is_argmax():
    torch.manual_seed(0)
    logits = torch.randn(12, 300)
    logits[:, 280:] = 50.0  # padded ids with the largest logits
    best = sample(logits, SamplingParams(temperature=0.0), vocab_limit=280)
    drafts = torch.cat([best[:4], (best[4:8] + 1) % 280, torch.tensor([-1, -1, 999, 290])])
    for gen in (None, make_generator(0, "cpu")):
        out = verify_sample(logits, drafts, SamplingParams(temperature=0.0, top_k=5), gen,
                            vocab_limit=280)
        assert torch.equal(out[0], best)
        assert out[1].tolist() == [1] * 4 + [0] * 8


def test_seeds_reproduce_and_logits_are_not_modified():
    torch.manual_seed(2)
    logits = torch.randn(64, 100)
    before = logits.clone()
    drafts = torch.randint(-1, 100, (64,))
    params = SamplingParams(temperature=0.9, top_k=30, top_p=0.95, min_p=0.02)
    a, b, c = (verify_sample(logits, drafts, params, make_generator(s, "cpu"), vocab_limit=90)
               for s in (5, 5, 6))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(logits, before)
    assert verify_sample(logits.bfloat16(), drafts, params, make_generator(0, "cpu")).shape == \
        (2, 64)


def test_presence_penalty_is_refused():
    with pytest.raises(ValueError, match="presence penalty"):
        verify_sample(torch.zeros(2, 8), torch.zeros(2, dtype=torch.int64),
                      SamplingParams(presence_penalty=0.5))


@pytest.mark.parametrize("params", [SamplingParams(temperature=0.0), SamplingParams(),
                                    SamplingParams(top_k=5, top_p=0.8),
                                    SamplingParams(top_p=0.9, min_p=0.1)])
def test_non_finite_rows_are_flagged_and_the_others_unchanged(params):
    torch.manual_seed(0)
    clean = torch.randn(5, 50)
    bad = clean.clone()
    bad[1, 7] = float("nan")
    bad[2, 3] = float("inf")
    bad[3] = float("-inf")
    bad[4, :45] = float("-inf")  # only padded ids finite
    drafts = clean.argmax(-1)  # would be accepted under greedy
    want = verify_sample(clean, drafts, params, make_generator(4, "cpu"), vocab_limit=45)
    got = verify_sample(bad, drafts, params, make_generator(4, "cpu"), vocab_limit=45)
    assert got[0, 1:].tolist() == [NON_FINITE] * 4 and got[1, 1:].tolist() == [0] * 4
    assert torch.equal(got[:, 0], want[:, 0])


@pytest.mark.gpu
@pytest.mark.parametrize("params", [SamplingParams(temperature=0.0),
                                    SamplingParams(temperature=0.6, top_k=20, top_p=0.95,
                                                   min_p=0.05),
                                    SamplingParams(temperature=0.8, top_p=0.9)])
def test_gpu_verify_never_syncs_and_a_graph_equals_eager(params):
    vocab, rows = 151936, 16
    logits = torch.randn(rows, vocab, device="cuda") * 3
    drafts = logits.argmax(-1)
    drafts[::3] = -1
    drafts[1::3] = 5
    gen = make_generator(0, "cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        verify_sample(logits, drafts, params, gen, vocab_limit=151669)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    s = torch.cuda.Stream()  # warm up on a side stream, then capture
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        verify_sample(logits, drafts, params, gen, vocab_limit=151669)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    if not params.greedy:
        graph.register_generator_state(gen)
    with torch.cuda.graph(graph):
        out = verify_sample(logits, drafts, params, gen, vocab_limit=151669)
    gen.manual_seed(11)
    graph.replay()
    got = out.clone()
    gen.manual_seed(11)
    want = verify_sample(logits, drafts, params, gen, vocab_limit=151669)
    assert torch.equal(got, want)
