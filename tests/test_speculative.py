"""Speculative decoding in the decode loop (``infer/verify_step.py``, ``infer/decode_loop.py``).

CPU: on the ``SumModel`` mock with scripted drafters (right, wrong, half right: every case of the
acceptance walk), the reply equals the reply without speculation token for token, cached ids and
pages stay consistent after rejected drafts, stop ids and the context and token budgets hold
inside accepted drafts, a batch speculates per sequence; on a tiny random Qwen3 fed repetitive
text (so prompt lookup finds drafts the model accepts), greedy with speculation equals greedy
without (alone and as a batch), and seeded sampling with speculation is reproducible.
Non-finite logits raise ``NonFiniteLogits``. The GPU tests are in ``test_speculative_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch
from mock_engine import GREEDY, NO_STOP, expected, mock_engine, prompt_of
from spec_helpers import ScriptedLookup, TailLookup, batch_and_alone

import infer.verify_step as verify_step
from infer import Engine, EngineConfig, SamplingParams
from infer.errors import NonFiniteLogits
from infer.speculate import StepCost


@pytest.fixture(autouse=True)
def no_wall_clock_costs(monkeypatch):
    """The draft switch weighs a verify step's wall time against a plain step's
    (``StepCost``): on a loaded CPU those times swing, so where a test's drafts were verified
    (and which step a stop id fell in) would depend on the clock. Here the switch sees no cost
    and decides by acceptance alone; the cost rule is ``test_speculate.py``'s."""
    monkeypatch.setattr(StepCost, "ratio", property(lambda self: None))


@pytest.fixture
def scripted(monkeypatch):
    ScriptedLookup.wrong_at = None
    ScriptedLookup.calls = []
    monkeypatch.setattr(verify_step, "PromptLookup", ScriptedLookup)
    return ScriptedLookup


@pytest.mark.parametrize("wrong_at", [None, 0, 2])
def test_reply_equals_plain_decode_and_cache_stays_consistent(scripted, wrong_at):
    scripted.wrong_at = wrong_at
    eng = mock_engine(ctx=256)
    prompt = prompt_of(21, seed=1)
    sp = GREEDY.replace(max_new_tokens=60)
    s = eng.new_session()
    got = list(s.generate(prompt, sp, speculate=True))
    assert got == expected(prompt, 60)
    st = s.stats
    assert st.stop_reason == "length" and st.new_tokens == 60
    assert st.verify_steps > 0 and st.drafted > 0
    if wrong_at is None:
        assert st.accepted == st.drafted  # every draft right
    elif wrong_at == 0:
        assert st.accepted == 0
    else:
        assert 0 < st.accepted < st.drafted
    # the cache holds the prompt and the reply but its last token, as without speculation
    assert s.cached_ids == prompt + got[:-1]
    # pages of rejected drafts stay with the session (they only grow during a reply)
    assert eng.pool.pages_for(s.num_cached) <= s.num_pages <= eng.pool.pages_for(eng.ctx)
    again = list(s.generate(prompt + got + [5], sp))  # the next turn reuses the cache
    assert s.stats.reused_tokens == len(prompt) + len(got) - 1
    assert again == expected(prompt + got + [5], 60)
    s.reset()
    assert eng.pool.num_free_pages == eng.pool.num_pages


def test_drafts_respect_context_and_token_budget(scripted):
    eng = mock_engine(ctx=64)
    prompt = prompt_of(30, seed=2)
    s = eng.new_session()
    got = list(s.generate(prompt, GREEDY, speculate=True))
    assert got == expected(prompt, 34) and s.stats.stop_reason == "context"
    assert len(prompt) + len(got) == 64 and s.stats.accepted > 0
    s.reset()
    got = list(eng.new_session().generate(prompt, GREEDY.replace(max_new_tokens=7),
                                          speculate=True))
    assert got == expected(prompt, 7)
    assert max(scripted.calls) <= 15


def test_a_stop_id_inside_accepted_drafts_ends_the_reply(scripted):
    """The stop id is the 11th token, inside the second verify step's accepted drafts: the
    reply is the 10 before it, its stop reason is set only as its last token is yielded (the
    rule ``Summarizer`` reads), and only the drafts kept count as accepted."""
    prompt = prompt_of(9, seed=4)
    plain = expected(prompt, 40)
    stop = plain[10]
    assert plain.index(stop) == 10
    eng = mock_engine(stop=(stop,))
    s = eng.new_session()
    got, reason_at = [], None
    for _, tok in eng.generate_batch([(s, prompt)], GREEDY.replace(max_new_tokens=40),
                                     speculate=True):
        got.append(tok)
        if s.stats.stop_reason and reason_at is None:
            reason_at = len(got)
    assert got == plain[:10] and s.stats.stop_reason == "stop"
    assert reason_at == len(got)
    assert s.cached_ids == prompt + got  # the stop id is not cached
    st = s.stats
    assert 0 < st.accepted <= st.new_tokens - st.verify_steps  # one own token per step
    assert s.num_pages == eng.pool.pages_for(s.num_cached)  # the draft pages went back


def test_a_summary_part_ending_on_a_drafted_stop_is_reported_once_and_whole(scripted):
    from infer.summarize import Summarizer

    class Tok:
        def count_tokens(self, texts):
            return [1 for _ in texts]

        def decode(self, toks, skip_special_tokens=True):
            return " ".join(map(str, toks))

    prompt = prompt_of(9, seed=4)
    plain = expected(prompt, 40)
    eng = mock_engine(stop=(plain[10],))
    sm = Summarizer(eng, Tok(), split=None, sampling=GREEDY, part_tokens=40, speculate=True)
    seen = []
    out = sm._map(0, ["part"], [prompt], seen.append, None)
    assert out == [" ".join(map(str, plain[:10]))]
    assert [p.summary for p in seen] == out


@pytest.mark.parametrize("speculate", [False, True])
def test_drafts_take_only_pages_the_reply_does_not_need(scripted, speculate):
    """One page free: the 8-token reply and its stop id fit in it, so drafting must not take
    more (a plain reply never fails for want of a page its stop id does not need)."""
    prompt = prompt_of(6, seed=0)
    plain = expected(prompt, 40)
    assert plain.index(plain[8]) == 8
    eng = mock_engine(ctx=64, stop=(plain[8],))  # 5 pages of 16
    other = eng.new_session()
    list(other.generate(prompt_of(60, seed=9), GREEDY.replace(max_new_tokens=1)))
    assert eng.pool.num_free_pages == 1
    s = eng.new_session()
    got = list(s.generate(prompt, GREEDY.replace(max_new_tokens=40), speculate=speculate))
    assert got == plain[:8] and s.stats.stop_reason == "stop"


def test_batch_speculates_per_sequence(scripted):
    eng = mock_engine(max_batch=4)
    prompts = [prompt_of(n, seed=n) for n in (3, 16, 29)]
    sp = GREEDY.replace(max_new_tokens=25)
    sessions = [eng.new_session() for _ in prompts]
    out: list[list[int]] = [[] for _ in prompts]
    for i, tok in eng.generate_batch(list(zip(sessions, prompts, strict=True)), sp,
                                     speculate=True):
        out[i].append(tok)
    assert out == [expected(p, 25) for p in prompts]
    assert all(s.stats.accepted > 0 for s in sessions)
    for s, p, o in zip(sessions, prompts, out, strict=True):
        assert s.cached_ids == p + o[:-1]


def test_closing_mid_reply_keeps_the_session_consistent(scripted):
    eng = mock_engine()
    prompt = prompt_of(17, seed=4)
    s = eng.new_session()
    gen = s.generate(prompt, GREEDY.replace(max_new_tokens=50), speculate=True)
    got = [next(gen) for _ in range(9)]
    gen.close()
    assert s.stats.stop_reason == "interrupted"
    ids = s.cached_ids
    assert ids[:len(prompt) + len(got)] == prompt + got  # tokens of the step may follow
    assert ids == prompt + expected(prompt, len(ids) - len(prompt))
    assert list(s.generate(ids + [1], GREEDY.replace(max_new_tokens=5))) == \
        expected(ids + [1], 5)


def test_presence_penalty_turns_speculation_off(scripted):
    eng = mock_engine()
    s = eng.new_session()
    list(s.generate(prompt_of(5), GREEDY.replace(max_new_tokens=10, presence_penalty=1.0),
                    speculate=True))
    assert s.stats.drafted == 0 and not scripted.calls


# ---------------------------------------------------------------------------- tiny Qwen3

def _tiny_engine(tiny_cpu, kv_cache="bf16", attention="reference", ctx=256, max_batch=1):
    cfg = EngineConfig("unused", ctx=ctx, page_size=16, device="cpu", attention=attention,
                       kv_cache=kv_cache, max_batch=max_batch)
    return Engine(cfg, model=tiny_cpu, tokenizer=NO_STOP)


@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_tiny_qwen3_greedy_with_speculation_equals_without(tiny_cpu, kv_cache):
    eng = _tiny_engine(tiny_cpu, kv_cache)
    phrase = torch.randint(0, 151669, (9,), generator=torch.Generator().manual_seed(7)).tolist()
    prompt = phrase * 6  # repetitive: prompt lookup drafts, the model's loops accept
    sp = GREEDY.replace(max_new_tokens=48)
    plain = list(eng.new_session().generate(prompt, sp))
    s = eng.new_session()
    spec = list(s.generate(prompt, sp, speculate=True))
    assert spec == plain
    assert s.stats.verify_steps > 0 and s.stats.accepted > 0


def test_tiny_qwen3_verify_slabs_on_the_triton_backend(tiny_cpu, monkeypatch):
    """The Triton backend (interpreter): verify steps attend their rows in slabs (several rows
    per program), and the reply is still the plain one."""
    import infer.step_io as step_io

    slabs = []

    def spy(rows, bucket, slab_tokens, block_n):
        out = graphs_plan(rows, bucket, slab_tokens, block_n)
        slabs.append(max(out))
        return out

    graphs_plan = step_io.plan_slabs
    monkeypatch.setattr(step_io, "plan_slabs", spy)
    eng = _tiny_engine(tiny_cpu, attention="triton")
    assert eng.attn.slab_tokens > 1
    phrase = torch.randint(0, 151669, (9,), generator=torch.Generator().manual_seed(7)).tolist()
    prompt = phrase * 6
    sp = GREEDY.replace(max_new_tokens=20)
    plain = list(eng.new_session().generate(prompt, sp))
    s = eng.new_session()
    spec = list(s.generate(prompt, sp, speculate=True))
    assert spec == plain and s.stats.accepted > 0
    assert max(slabs) > 1


@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_tiny_qwen3_batch_with_speculation_equals_each_reply_alone(tiny_cpu, kv_cache):
    eng = _tiny_engine(tiny_cpu, kv_cache, ctx=512, max_batch=4)
    out, alone, sessions = batch_and_alone(eng, ((9, 6), (13, 4), (5, 10)), 60)
    assert out == alone
    assert all(s.stats.accepted > 0 for s in sessions)


def test_tiny_qwen3_seeded_sampling_with_speculation_is_reproducible(tiny_cpu, monkeypatch):
    monkeypatch.setattr(verify_step, "PromptLookup", TailLookup)
    eng = _tiny_engine(tiny_cpu)
    prompt = list(range(100, 110)) * 5
    sp = SamplingParams(temperature=0.7, top_k=20, seed=11, max_new_tokens=32)
    runs = []
    for _ in range(2):
        s = eng.new_session()
        runs.append(list(s.generate(prompt, sp, speculate=True)))
        assert s.stats.verify_steps > 0
    assert runs[0] == runs[1] and len(runs[0]) == 32


class NaNModel:
    """A mock whose logits turn NaN after ``good`` decode calls."""

    def __init__(self, base, good: int):
        self.base, self.good, self.config = base, good, base.config

    def forward(self, *a):
        return self.base.forward(*a)

    def compute_logits(self, hidden):
        out = self.base.compute_logits(hidden)
        self.good -= 1
        return out if self.good >= 0 else out * float("nan")


@pytest.mark.parametrize("speculate", [False, True])
def test_non_finite_logits_raise(scripted, speculate):
    from mock_engine import SumModel

    eng = mock_engine(model=NaNModel(SumModel(), good=2))
    s = eng.new_session()
    got = []
    with pytest.raises(NonFiniteLogits, match="non-finite"):
        for tok in s.generate(prompt_of(5), GREEDY.replace(max_new_tokens=30),
                              speculate=speculate):
            got.append(tok)
    assert s.stats.stop_reason == "interrupted"
    assert got == expected(prompt_of(5), len(got))  # every token before the NaN was right
