"""``benchmarks/draft_sources.py``: hand-computed cases of where the lookup's guesses come from,
and agreement with ``infer.speculate.PromptLookup``'s one-token drafts."""

from __future__ import annotations

import random

import pytest

from benchmarks.draft_sources import draft_sources
from infer.speculate import PromptLookup


def test_a_reply_that_copies_the_prompt():
    prompt = [1, 2, 3, 4, 5, 9]
    reply = [1, 2, 3, 4, 5]
    got = draft_sources(prompt, reply)
    # before 1: the suffix (9,) has no earlier occurrence -> no match; before 2: (9, 1) none,
    # (1,) at 0 -> guess 2, from the prompt; 3, 4, 5 likewise (longer suffixes, in the prompt)
    assert got == {"tokens": 5, "from_prompt": 4, "from_reply": 0, "wrong": 0, "no_match": 1}


def test_a_reply_that_repeats_itself():
    prompt = [100, 101]
    reply = [7, 8, 7, 8, 7, 8]
    got = draft_sources(prompt, reply)
    # 7: no match; 8: (7,) unseen with a follower -> no match; 7: (8,) unseen -> no match;
    # then 8 (after 7 at reply pos 0), 7, 8: guesses from the reply
    assert got == {"tokens": 6, "from_prompt": 0, "from_reply": 3, "wrong": 0, "no_match": 3}


def test_a_wrong_guess_and_the_most_recent_occurrence():
    prompt = [5, 6, 5, 7]  # (5,) last seen at 2, followed by 7
    got = draft_sources(prompt, [5, 6])
    # before 5: (7,) no match; before 6: (7, 5) no, (5,) -> 7, wrong
    assert got == {"tokens": 2, "from_prompt": 0, "from_reply": 0, "wrong": 1, "no_match": 1}


def test_agrees_with_prompt_lookup_one_token_drafts():
    rng = random.Random(0)
    prompt = [rng.randrange(6) for _ in range(60)]
    reply = [rng.randrange(6) for _ in range(40)]
    lookup = PromptLookup(prompt)
    right = 0
    for tok in reply:
        right += lookup.propose(1) == [tok]
        lookup.extend([tok])
    got = draft_sources(prompt, reply)
    assert got["from_prompt"] + got["from_reply"] == right
    assert sum(got[k] for k in ("from_prompt", "from_reply", "wrong", "no_match")) == 40


def test_bad_max_ngram():
    with pytest.raises(ValueError, match="max_ngram"):
        draft_sources([1], [2], max_ngram=0)
