"""infer/sampling.py: greedy, temperature, top-k, top-p, min-p, presence penalty, masked ids,
seeds, the non-finite guard; frequencies of many independent draws against the filtered softmax.
The speculative verify rule (``verify_sample``) is in tests/test_verify_sample.py."""

from __future__ import annotations

import pytest
import torch

from infer.sampling import NON_FINITE, make_generator, sample, verify_sample
from infer.sampling_params import SamplingParams

N = 20000  # rows drawn at once: one sample per row


def draws(logits_row, params, seed=0, n=N, **kw):
    logits = logits_row.expand(n, -1)
    return sample(logits, params, make_generator(seed, "cpu"), **kw)


def freqs(ids, vocab):
    return torch.bincount(ids, minlength=vocab).double() / ids.numel()


def test_greedy_is_argmax_and_ignores_generator():
    logits = torch.randn(6, 100)
    p = SamplingParams(temperature=0.0, top_k=3, top_p=0.1, min_p=0.5)
    out = sample(logits, p, make_generator(1, "cpu"))
    assert out.dtype == torch.int64 and out.shape == (6,)
    assert torch.equal(out, logits.argmax(-1))
    assert torch.equal(sample(logits, p, None), out)


@pytest.mark.parametrize("temperature", [1e-40, 1e-39, 1e-38, 9e-6])
def test_temperature_below_float32_range_samples_greedily(temperature):
    """logits / 1e-40 in float32 is inf/NaN (random tokens): such a temperature is argmax, in
    ``sample`` and in the speculative verify step alike, whatever the seed."""
    logits = torch.randn(6, 100) * 5
    p = SamplingParams(temperature=temperature, seed=3)
    for seed in (0, 1):
        assert torch.equal(sample(logits, p, make_generator(seed, "cpu")), logits.argmax(-1))
    drafts = logits.argmax(-1)
    drafts[0] = (drafts[0] + 1) % 100
    tok, ok = verify_sample(logits, drafts, p, make_generator(0, "cpu"))
    assert torch.equal(tok, logits.argmax(-1))
    assert ok.tolist() == [0, 1, 1, 1, 1, 1]


def test_logits_not_modified_and_bf16_accepted():
    logits = torch.randn(3, 64)
    before = logits.clone()
    sample(logits, SamplingParams(top_k=5, top_p=0.5, min_p=0.1, presence_penalty=1.0),
           make_generator(0, "cpu"), presence=torch.ones(64, dtype=torch.bool), vocab_limit=60)
    assert torch.equal(logits, before)
    out = sample(logits.bfloat16(), SamplingParams(top_k=5), make_generator(0, "cpu"))
    assert out.shape == (3,)


def test_plain_sampling_matches_softmax():
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0])
    for temp in (1.0, 2.0, 0.5):
        f = freqs(draws(logits, SamplingParams(temperature=temp)), 5)
        torch.testing.assert_close(f, torch.softmax(logits.double() / temp, 0), atol=0.015,
                                   rtol=0)


def test_top_k_keeps_k_best_and_k_above_vocab_is_off():
    logits = torch.tensor([3.0, 0.0, 2.0, 1.0, -1.0, 2.5])
    f = freqs(draws(logits, SamplingParams(top_k=2)), 6)
    want = torch.zeros(6, dtype=torch.float64)
    want[[0, 5]] = torch.softmax(torch.tensor([3.0, 2.5], dtype=torch.float64), 0)
    torch.testing.assert_close(f, want, atol=0.015, rtol=0)
    assert torch.equal(draws(logits, SamplingParams(top_k=1)), torch.zeros(N, dtype=torch.long))
    # k > vocabulary: same draws as no top-k at all (same seed).
    assert torch.equal(draws(logits, SamplingParams(top_k=1000)),
                       draws(logits, SamplingParams(top_k=0)))


def test_top_p_nucleus():
    probs = torch.tensor([0.05, 0.5, 0.15, 0.3])
    logits = probs.log()
    f = freqs(draws(logits, SamplingParams(top_p=0.7)), 4)  # keeps 0.5 and 0.3
    torch.testing.assert_close(f, torch.tensor([0, 0.625, 0, 0.375], dtype=torch.float64),
                               atol=0.015, rtol=0)
    f = freqs(draws(logits, SamplingParams(top_p=0.8)), 4)  # 0.5 + 0.3 reach 0.8 exactly
    assert f[0] == 0 and f[2] == 0
    f = freqs(draws(logits, SamplingParams(top_p=0.81)), 4)  # needs 0.15 too
    assert f[2] > 0 and f[0] == 0


@pytest.mark.parametrize("top_p", [1e-9, 1e-3, 0.01])
def test_tiny_top_p_keeps_the_most_likely_token(top_p):
    logits = torch.randn(4, 1000) * 3
    for row in logits:
        assert (draws(row, SamplingParams(top_p=top_p), n=500) == row.argmax()).all()


def test_min_p():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    f = freqs(draws(probs.log(), SamplingParams(min_p=0.2)), 4)  # drops below 0.1
    torch.testing.assert_close(f, (probs.double() * torch.tensor([1, 1, 1, 0])) / 0.95,
                               atol=0.015, rtol=0)
    assert (draws(probs.log(), SamplingParams(min_p=1.0), n=500) == 0).all()


def test_filters_compose_in_order():
    """temperature, then top-k, then top-p on the renormalized top-k, then min-p."""
    logits = torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0])
    p = SamplingParams(temperature=2.0, top_k=4, top_p=0.75, min_p=0.0)
    sm = torch.softmax(logits[:4].double() / 2.0, 0)  # top-k = 4
    keep = (torch.cumsum(sm, 0) - sm) < 0.75
    want = torch.zeros(5, dtype=torch.float64)
    want[:4] = torch.where(keep, sm, 0) / torch.where(keep, sm, 0).sum()
    torch.testing.assert_close(freqs(draws(logits, p), 5), want, atol=0.015, rtol=0)


def test_masked_ids_never_sampled():
    vocab, limit = 300, 250
    logits = torch.randn(vocab)
    logits[limit:] = 50.0  # padded ids with the largest logits
    for p in (SamplingParams(temperature=0.0), SamplingParams(temperature=1.0),
              SamplingParams(temperature=5.0, top_k=1000, top_p=1.0),
              SamplingParams(temperature=1.0, top_p=1e-6), SamplingParams(min_p=1.0)):
        out = draws(logits, p, n=2000, vocab_limit=limit)
        assert (out < limit).all(), p
    assert (draws(logits, SamplingParams(temperature=0.0), n=1) >= limit).all()  # unmasked


def test_presence_penalty():
    logits = torch.tensor([[2.0, 1.5, 0.5, -1.0]])
    seen = torch.tensor([True, False, False, False])
    greedy = SamplingParams(temperature=0.0, presence_penalty=1.0)
    assert sample(logits, greedy, presence=seen).item() == 1
    assert sample(logits, greedy.replace(presence_penalty=0.4), presence=seen).item() == 0
    neg = SamplingParams(temperature=0.0, presence_penalty=-2.0)
    assert sample(logits, neg, presence=torch.tensor([False, False, True, False])).item() == 2
    f = freqs(draws(logits[0], SamplingParams(presence_penalty=1.0), presence=seen), 4)
    torch.testing.assert_close(f, torch.softmax(logits[0].double() - seen.double(), 0),
                               atol=0.015, rtol=0)


def test_same_seed_same_draws():
    logits = torch.zeros(100)
    p = SamplingParams(temperature=1.0, top_k=50, top_p=0.9)
    a, b, c = draws(logits, p, seed=3, n=64), draws(logits, p, seed=3, n=64), \
        draws(logits, p, seed=4, n=64)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    g1, g2 = make_generator(None, "cpu"), make_generator(None, "cpu")
    assert g1.initial_seed() != g2.initial_seed()


@pytest.mark.gpu
def test_sampling_never_syncs_on_cuda():
    logits = torch.randn(2, 151936, device="cuda")
    seen = torch.zeros(151936, dtype=torch.bool, device="cuda")
    gen = make_generator(0, "cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for p in (SamplingParams(temperature=0.0),
                  SamplingParams(temperature=0.6, top_k=20, top_p=0.95, min_p=0.05,
                                 presence_penalty=0.5)):
            sample(logits, p, gen, presence=seen, vocab_limit=151669)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("top_k,top_p,min_p", [(20, 0.95, 0.0), (20, 1.0, 0.0), (50, 0.5, 0.05),
                                               (7, 0.9, 0.2), (1, 0.95, 0.0)])
def test_top_k_fast_path_keeps_the_same_candidates_and_probabilities(top_k, top_p, min_p):
    """topk_probs (k candidates) against full_probs (sorts the vocabulary) on random logits."""
    from infer.sampling_filters import full_probs, topk_probs

    torch.manual_seed(top_k)
    x = torch.randn(64, 3000) * torch.rand(64, 1) * 6  # peaked and flat rows
    x[:, 2900:] = float("-inf")  # masked padding ids
    params = SamplingParams(temperature=0.7, top_k=top_k, top_p=top_p, min_p=min_p)
    want = full_probs(x, params)
    probs, ids = topk_probs(x, params)
    assert probs.shape == ids.shape == (64, top_k)
    got = torch.zeros_like(want).scatter_(-1, ids, probs)
    assert torch.equal(got > 0, want > 0)  # the same kept set
    torch.testing.assert_close(got / got.sum(-1, keepdim=True), want / want.sum(-1, keepdim=True),
                               rtol=1e-5, atol=1e-7)
    # sample() draws from it: only kept ids, the same ids for the same seed.
    a = sample(x, params, make_generator(5, "cpu"))
    assert (want.gather(-1, a[:, None]) > 0).all()
    assert torch.equal(a, sample(x, params, make_generator(5, "cpu")))


def bad_rows(vocab=50, vocab_limit=None):
    """[5, vocab]: normal, NaN, +inf, all -inf, and (with a limit) only padded ids finite."""
    torch.manual_seed(0)
    clean = torch.randn(5, vocab) * 2
    bad = clean.clone()
    bad[1, 7] = float("nan")
    bad[2, 3] = float("inf")
    bad[3] = float("-inf")
    bad[4, :vocab_limit or vocab] = float("-inf")
    return clean, bad


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=0.0), SamplingParams(temperature=1.0),
    SamplingParams(temperature=0.7, top_k=5), SamplingParams(top_k=5, top_p=0.8, min_p=0.1),
    SamplingParams(top_p=0.9, min_p=0.05), SamplingParams(temperature=0.0, presence_penalty=1.0),
    SamplingParams(top_k=8, presence_penalty=-1.0)])
def test_non_finite_rows_yield_the_sentinel_and_leave_the_others_alone(params):
    clean, bad = bad_rows(vocab=50, vocab_limit=45)
    seen = torch.zeros(50, dtype=torch.bool)
    seen[[1, 4]] = True
    kw = dict(presence=seen, vocab_limit=45)
    want = sample(clean, params, make_generator(3, "cpu"), **kw)
    got = sample(bad, params, make_generator(3, "cpu"), **kw)
    assert got.tolist()[1:] == [NON_FINITE] * 4
    assert got[0] == want[0] and 0 <= got[0] < 45  # same row, same noise: the same token
    # a -inf here and there is not a bad row, nor a NaN in the padded ids (masked first)
    clean[0, :10] = float("-inf")
    clean[0, 47] = float("nan")
    assert sample(clean, params, make_generator(3, "cpu"), **kw)[0] >= 10


def test_cpu_seeds_differing_above_32_bits_draw_differently():
    """torch's CPU generator keeps a seed's low 32 bits: ``make_generator`` folds the high ones
    in, and leaves seeds below 2**32 as torch seeds them."""
    def draws(seed):
        return torch.rand(4, generator=make_generator(seed, "cpu"))

    for s in (0, 1, 12345, 2**32 - 1):
        assert torch.equal(draws(s), torch.rand(4, generator=torch.Generator().manual_seed(s)))
    seen = [draws(s) for s in (1, 1 + 2**32, 1 + 2**33, 1 + 2**62, 2**63 - 1, 2**32 - 1)]
    assert all(not torch.equal(a, b) for i, a in enumerate(seen) for b in seen[i + 1:])
    assert torch.equal(draws(2**63 - 1), draws(2**63 - 1))
