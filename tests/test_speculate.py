"""infer/speculate.py: the prompt-lookup n-gram index (against a brute-force search), greedy and
sampled acceptance. The adaptive draft length is ``test_draft_control.py``'s."""

from __future__ import annotations

import random

import pytest

from infer.speculate import PromptLookup, accept_greedy, accept_sampled


def brute_propose(toks, k, max_ngram=3, min_ngram=1):
    """The oracle: scan every earlier end position, latest first, for the longest suffix; a
    continuation that reaches the end repeats the run (period = tokens since the match)."""
    if k == 0:
        return []
    for n in range(min(max_ngram, len(toks)), min_ngram - 1, -1):
        suffix = toks[len(toks) - n:]
        for end in range(len(toks) - 2, n - 2, -1):  # end < len - 1: not the suffix itself
            if toks[end - n + 1:end + 1] == suffix:
                run = toks[end + 1:]  # the period: what followed the match, up to the end
                return [run[i % len(run)] for i in range(k)]
    return []


def test_longest_match_wins():
    toks = [1, 2, 3, 4, 9, 3, 5, 1, 2, 3]
    # the 3-gram (1, 2, 3) beats the more recent 1-gram (3,) -> 5
    assert PromptLookup(toks).propose(2) == [4, 9]
    assert PromptLookup(toks, max_ngram=1).propose(2) == [5, 1]
    assert PromptLookup(toks, max_ngram=2).propose(3) == [4, 9, 3]


def test_most_recent_occurrence_wins():
    toks = [5, 1, 6, 5, 2, 6, 5, 3, 6, 5]
    assert PromptLookup(toks).propose(1) == [3]  # (6, 5) at 8..9 is the suffix; 5..6 matches
    assert PromptLookup(toks, max_ngram=1).propose(2) == [3, 6]


def test_no_self_match_and_a_repeated_run_goes_on():
    assert PromptLookup([1, 2, 3]).propose(4) == []
    assert PromptLookup([]).propose(4) == []
    assert PromptLookup([7]).propose(4) == []
    # (5,) last occurred at 2: what followed it (2, 5) reaches the end: the run repeats
    assert PromptLookup([5, 1, 5, 2, 5]).propose(5) == [2, 5, 2, 5, 2]
    assert PromptLookup([7, 7, 7, 7]).propose(5) == [7] * 5
    assert PromptLookup([4, 4]).propose(3) == [4, 4, 4]
    assert PromptLookup([3, 1, 2, 3, 1, 2, 3]).propose(7) == [1, 2, 3, 1, 2, 3, 1]


def test_no_match_k_zero_and_bad_arguments():
    pl = PromptLookup([1, 2, 3, 4, 1, 2])
    assert pl.propose(0) == []
    assert pl.propose(3) == [3, 4, 1]
    assert PromptLookup([1, 2, 3, 4], min_ngram=2).propose(3) == []
    assert PromptLookup([1, 2, 1], min_ngram=2).propose(3) == []
    assert PromptLookup([1, 2, 1]).propose(3) == [2, 1, 2]
    with pytest.raises(ValueError, match="draft length"):
        pl.propose(-1)
    with pytest.raises(ValueError, match="min_ngram"):
        PromptLookup([1], max_ngram=1, min_ngram=2)
    with pytest.raises(ValueError, match="min_ngram"):
        PromptLookup([1], min_ngram=0)


def test_extend_then_propose():
    pl = PromptLookup([1, 2, 3, 4])
    assert pl.propose(2) == []
    pl.extend([1, 2])
    assert len(pl) == 6 and pl.propose(5) == [3, 4, 1, 2, 3]
    pl.extend([3])
    assert pl.propose(10) == [4, 1, 2, 3, 4, 1, 2, 3, 4, 1]
    pl.extend([])
    assert pl.propose(1) == [4]
    pl.extend([8])
    assert pl.propose(3) == []


@pytest.mark.parametrize("max_ngram,min_ngram", [(3, 1), (1, 1), (4, 2), (2, 2)])
def test_matches_brute_force_while_extending(max_ngram, min_ngram):
    rng = random.Random(max_ngram * 10 + min_ngram)
    for trial in range(20):
        vocab = rng.choice([2, 3, 6])
        toks = [rng.randrange(vocab) for _ in range(rng.randrange(0, 12))]
        pl = PromptLookup(toks, max_ngram=max_ngram, min_ngram=min_ngram)
        for _ in range(30):
            for k in (0, 1, 3, 8):
                want = brute_propose(toks, k, max_ngram, min_ngram)
                assert pl.propose(k) == want, (trial, toks, k)
            new = [rng.randrange(vocab) for _ in range(rng.choice([1, 1, 2, 5]))]
            toks += new
            pl.extend(new)
        fresh = PromptLookup(toks, max_ngram=max_ngram, min_ngram=min_ngram)
        assert fresh.propose(8) == pl.propose(8)


def test_128k_prompt_builds_and_finds_a_copied_span():
    """The index over a 128k-token prompt (built in ~0.1 s on a CPU; not asserted here)."""
    rng = random.Random(0)
    prompt = [rng.randrange(151_000) for _ in range(131_072)]
    pl = PromptLookup(prompt)
    assert len(pl) == 131_072
    start = 70_000  # the reply starts quoting the prompt from here
    pl.extend(prompt[start:start + 3])
    assert pl.propose(8) == prompt[start + 3:start + 11]
    pl.extend(prompt[start + 3:start + 5])
    assert pl.propose(15) == prompt[start + 5:start + 20]


def test_accept_greedy():
    assert accept_greedy([5, 6, 7], [5, 6, 7, 8]) == (3, [5, 6, 7, 8])  # bonus
    assert accept_greedy([5, 6, 7], [9, 6, 7, 8]) == (0, [9])  # first rejected: correction
    assert accept_greedy([5, 6, 7], [5, 1, 7, 8]) == (1, [5, 1])
    assert accept_greedy([5, 6, 7], [5, 6, 2, 8, 0, 0]) == (2, [5, 6, 2])  # padding ignored
    assert accept_greedy([], [4]) == (0, [4])
    assert accept_greedy([5, 6], [5, -1, 3]) == (1, [5, -1])  # NON_FINITE ends the draft
    with pytest.raises(AssertionError):
        accept_greedy([5, 6], [5, 6])


def test_accept_sampled():
    assert accept_sampled([5, 6, 7], [5, 6, 7, 8], [1, 1, 1, 0]) == (3, [5, 6, 7, 8])
    assert accept_sampled([5, 6, 7], [3, 6, 7, 8], [0, 1, 1, 0]) == (0, [3])  # flags after a
    assert accept_sampled([5, 6, 7], [5, 4, 7, 8], [1, 0, 1, 0]) == (1, [5, 4])  # 0 don't count
    assert accept_sampled([], [9, 0], [0, 0]) == (0, [9])
    assert accept_sampled([5], [-1, 2], [0, 0]) == (0, [-1])
    with pytest.raises(AssertionError):
        accept_sampled([5, 6], [5, 6], [1, 1])
