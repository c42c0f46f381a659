"""The decode loop's cost-aware draft switch (``infer/decode_loop.py`` with
``speculate.StepCost``), on the ``SumModel`` mock with a drafter scripted to be half right:
greedy replies time plain and verify steps and stop drafting while verify steps cost more than
the tokens they yield; the replies stay the plain ones; sampled replies are never timed."""

from __future__ import annotations

import pytest
from mock_engine import GREEDY, expected, mock_engine, prompt_of
from spec_helpers import ScriptedLookup

import infer.decode_loop as decode_loop
import infer.verify_step as verify_step
from infer.sampling_params import SamplingParams
from infer.speculate import StepCost


@pytest.fixture
def half_right(monkeypatch):
    ScriptedLookup.wrong_at = 2  # 2 drafts accepted a step
    ScriptedLookup.calls = []
    monkeypatch.setattr(verify_step, "PromptLookup", ScriptedLookup)
    return ScriptedLookup


def _fixed_ratio(monkeypatch, ratio: float) -> None:
    """Verify steps cost ``ratio`` plain steps, whatever the clock says."""

    class Fixed(StepCost):
        ratio = property(lambda self: ratio)

    monkeypatch.setattr(decode_loop, "StepCost", Fixed)


@pytest.mark.parametrize("ratio,pays", [(1.5, True), (10.0, False)])
def test_drafting_stops_while_verify_steps_cost_more_than_they_yield(half_right, monkeypatch,
                                                                     ratio, pays):
    _fixed_ratio(monkeypatch, ratio)
    eng = mock_engine(ctx=512)
    prompt = prompt_of(20)
    sp = GREEDY.replace(max_new_tokens=120)
    s = eng.new_session()
    assert list(s.generate(prompt, sp, speculate=True)) == expected(prompt, 120)
    st = s.stats
    assert st.accepted > 0
    if pays:  # 3 tokens a verify step against 1.5: it drafts all along
        assert st.verify_steps >= 30
    else:  # 3 against 10: three verify steps, a cool-down of 16 plain ones, three, 32 ...
        assert st.verify_steps <= 12


def test_the_first_greedy_reply_times_plain_steps_before_it_drafts(half_right, monkeypatch):
    starts = {}  # per reply, the sequence length at its first draft
    orig = ScriptedLookup.propose

    def propose(self, k):
        starts.setdefault(len(replies), len(self.seq))
        return orig(self, k)

    monkeypatch.setattr(ScriptedLookup, "propose", propose)
    eng = mock_engine(ctx=512)
    prompt = prompt_of(20)
    sp = GREEDY.replace(max_new_tokens=60)
    replies = []
    for _ in range(2):
        s = eng.new_session()
        replies.append(list(s.generate(prompt, sp, speculate=True)))
        assert replies[-1] == expected(prompt, 60) and s.stats.verify_steps > 0
    cost = eng.graph_runner().step_costs[1]
    assert cost.plain_s is not None and cost.plain_s > 0 and cost.verify_s is not None
    # the first reply drafts once three steps ran ahead (the third one timed): at its fourth
    # token; the second at its first
    assert starts == {0: len(prompt) + 4, 1: len(prompt) + 1}


def test_sampled_replies_are_not_timed(half_right):
    eng = mock_engine(ctx=512)
    sp = SamplingParams(temperature=0.8, seed=1, max_new_tokens=30)
    list(eng.new_session().generate(prompt_of(20), sp, speculate=True))
    assert eng.graph_runner().step_costs == {}


def _find_case():
    """A 6-token prompt whose plain reply first meets its 9th token there (that token is then
    the stop id)."""
    for seed in range(200):
        prompt = prompt_of(6, seed=seed)
        plain = expected(prompt, 40)
        stop = plain[8]
        if plain.index(stop) == 8 and stop not in prompt:
            return prompt, plain, stop
    raise AssertionError


def test_drafts_take_only_free_pages_when_drafting_from_the_start(monkeypatch):
    """As ``test_speculative``'s page test, but drafting from the first step (that test's
    reply ends while the first greedy reply still times its plain steps): one page is free,
    and the reply (6 + 8 tokens and its stop id) fits in it; drafts take no page it needs."""
    ScriptedLookup.wrong_at = None  # every draft right
    monkeypatch.setattr(verify_step, "PromptLookup", ScriptedLookup)
    prompt, plain, stop = _find_case()
    eng = mock_engine(ctx=64, stop=(stop,))
    other = eng.new_session()
    list(other.generate(prompt_of(60, seed=9), GREEDY.replace(max_new_tokens=1)))
    assert eng.pool.num_free_pages == 1
    eng.graph_runner().step_costs.setdefault(1, StepCost()).plain(1.0)  # drafts at once
    s = eng.new_session()
    got = list(s.generate(prompt, GREEDY.replace(max_new_tokens=40), speculate=True))
    assert got == plain[:8] and s.stats.stop_reason == "stop" and s.stats.verify_steps > 0
