"""Engine and Session on the CPU: the session logic on ``SumModel``, a mock whose next token is a
known function of everything in its KV cache (so any stale, missing or misplaced K/V shows up as a
wrong token). The tiny random Qwen3 against transformers is in ``test_engine_qwen3.py``.
"""

from __future__ import annotations

import pytest
from mock_engine import GREEDY, SumModel, V, expected, mock_engine, prompt_of

# ---------------------------------------------------------------------------- mock model


@pytest.mark.parametrize("length", [1, 15, 16, 17, 33])
@pytest.mark.parametrize("chunk", [1, 7, 16, 512])
def test_prefill_decode_through_pool(length, chunk):
    eng = mock_engine(chunk=chunk)
    s = eng.new_session()
    prompt = prompt_of(length)
    out = list(s.generate(prompt, GREEDY.replace(max_new_tokens=20)))
    assert out == expected(prompt, 20)
    assert eng.model.calls[: -(-length // chunk)] == [min(chunk, length - i)
                                                      for i in range(0, length, chunk)]
    assert set(eng.model.logit_rows) == {1}  # only the last row reaches the lm_head
    st = s.stats
    assert (st.prompt_tokens, st.reused_tokens, st.new_tokens) == (length, 0, 20)
    assert st.stop_reason == "length" and st.ttft_s > 0 and st.decode_s > 0
    assert s.cached_ids == prompt + out[:-1]  # the last sampled token is not fed yet


def test_on_prefill_reports_each_chunk_of_the_new_tokens():
    eng = mock_engine(chunk=7)
    s = eng.new_session()
    p1 = prompt_of(20)
    seen: list[tuple[int, int]] = []
    r1 = list(s.generate(p1, GREEDY.replace(max_new_tokens=3),
                         on_prefill=lambda done, total: seen.append((done, total))))
    assert seen == [(0, 20), (7, 20), (14, 20), (20, 20)]
    seen.clear()  # the next turn reuses 22 cached tokens: only the 3 new ones are reported
    list(s.generate(p1 + r1 + [1], GREEDY.replace(max_new_tokens=1),
                    on_prefill=lambda done, total: seen.append((done, total))))
    assert seen == [(0, 2), (2, 2)]


def test_multi_turn_reuses_prefix_and_matches_fresh():
    eng = mock_engine(chunk=7)
    s = eng.new_session()
    p1 = prompt_of(20)
    r1 = list(s.generate(p1, GREEDY.replace(max_new_tokens=5)))
    p2 = p1 + r1 + prompt_of(9, seed=1)
    r2 = list(s.generate(p2, GREEDY.replace(max_new_tokens=8)))
    assert s.stats.reused_tokens == len(p1) + len(r1) - 1
    assert s.stats.prefill_tokens == len(p2) - s.stats.reused_tokens
    fresh = mock_engine().new_session()
    assert r2 == list(fresh.generate(p2, GREEDY.replace(max_new_tokens=8))) == expected(p2, 8)


def test_edited_conversation_truncates_and_frees_pages():
    eng = mock_engine(page_size=16)
    s = eng.new_session()
    p1 = prompt_of(70)
    list(s.generate(p1, GREEDY.replace(max_new_tokens=3)))  # 72 cached -> 5 pages
    free_before = eng.pool.num_free_pages
    p2 = p1[:20] + [(p1[20] + 1) % V] + prompt_of(4, seed=2)  # diverges at position 20
    r2 = list(s.generate(p2, GREEDY.replace(max_new_tokens=4)))
    assert s.stats.reused_tokens == 20
    assert r2 == expected(p2, 4)
    # 25 prompt + 3 fed = 28 cached -> 2 pages: 3 of the 5 went back to the pool.
    assert eng.pool.num_free_pages == free_before + 3


def test_interrupt_right_after_freeing_pages_leaves_no_page_both_free_and_owned(monkeypatch):
    eng = mock_engine(page_size=16)
    s = eng.new_session()
    p1 = prompt_of(70)
    list(s.generate(p1, GREEDY.replace(max_new_tokens=3)))  # 72 cached -> 5 pages
    real_free = eng.pool.free

    def free_then_ctrl_c(pages):
        real_free(pages)
        raise KeyboardInterrupt  # a Ctrl-C arriving just after the pool took the pages back

    monkeypatch.setattr(eng.pool, "free", free_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        list(s.generate(p1[:20] + prompt_of(4, seed=2), GREEDY.replace(max_new_tokens=4)))
    monkeypatch.undo()
    owned = set(s._pages)
    assert len(owned) == 2 and not any(eng.pool._is_free[p] for p in owned)
    assert eng.pool.num_free_pages == eng.pool.num_pages - 2
    p3 = p1[:20] + prompt_of(9, seed=5)  # the session still works on what it kept
    assert list(s.generate(p3, GREEDY.replace(max_new_tokens=5))) == expected(p3, 5)


def test_same_prompt_twice_prefills_one_token():
    eng = mock_engine()
    s = eng.new_session()
    p = prompt_of(16)
    a = list(s.generate(p, GREEDY.replace(max_new_tokens=4)))
    b = list(s.generate(p, GREEDY.replace(max_new_tokens=4)))
    assert a == b == expected(p, 4)
    assert s.stats.reused_tokens == 15 and s.stats.prefill_tokens == 1


def test_closing_the_generator_keeps_session_consistent():
    eng = mock_engine()
    s = eng.new_session()
    p = prompt_of(18)
    gen = s.generate(p, GREEDY.replace(max_new_tokens=30))
    got = [next(gen) for _ in range(3)]
    gen.close()  # the CLI's Ctrl-C between tokens
    assert s.stats.stop_reason == "interrupted" and s.stats.new_tokens == 3
    # decode runs one step ahead of the host: the 3rd token was fed before it was yielded
    assert s.cached_ids == p + got
    p2 = p + got + prompt_of(5, seed=3)
    assert list(s.generate(p2, GREEDY.replace(max_new_tokens=6))) == expected(p2, 6)
    assert s.stats.reused_tokens == len(p) + 3


@pytest.mark.parametrize("fail_on_call", [2, 5])  # 2: during prefill (chunk 7), 5: decode
def test_interrupt_inside_a_step_keeps_session_consistent(fail_on_call):
    model = SumModel(fail_on_call=fail_on_call)
    eng = mock_engine(chunk=7, model=model)
    s = eng.new_session()
    p = prompt_of(20)
    with pytest.raises(KeyboardInterrupt):
        list(s.generate(p, GREEDY.replace(max_new_tokens=10)))
    assert s.stats.stop_reason == "interrupted"
    cached = s.cached_ids
    assert cached == (p + expected(p, 10))[: len(cached)]
    assert len(cached) == (7 if fail_on_call == 2 else 20 + 1)
    model.fail_on_call = None
    assert list(s.generate(p, GREEDY.replace(max_new_tokens=10))) == expected(p, 10)
    assert s.stats.reused_tokens == min(len(cached), len(p) - 1)


def test_prefill_tokens_counts_what_an_interrupted_prefill_stored():
    """Ctrl-C in the third prefill chunk: prefill_tokens is the two chunks cached, not the
    prompt; the next reply prefills the rest only (and says so)."""
    model = SumModel(fail_on_call=3)
    eng = mock_engine(chunk=7, model=model)
    s = eng.new_session()
    p = prompt_of(30)
    with pytest.raises(KeyboardInterrupt):
        list(s.generate(p, GREEDY.replace(max_new_tokens=4)))
    assert s.stats.stop_reason == "interrupted" and s.num_cached == 14
    assert s.stats.prefill_tokens == 14 and s.stats.to_dict()["prefill_tokens"] == 14
    model.fail_on_call = None
    assert list(s.generate(p, GREEDY.replace(max_new_tokens=4))) == expected(p, 4)
    assert s.stats.reused_tokens == 14 and s.stats.prefill_tokens == 30 - 14


def test_stop_id_ends_reply_and_is_not_yielded():
    p = prompt_of(10)
    full = expected(p, 10)
    stop = full[4]
    assert stop not in full[:4]
    s = mock_engine(stop={stop}).new_session()
    out = list(s.generate(p, GREEDY.replace(max_new_tokens=10)))
    assert out == full[:4]
    assert s.stats.stop_reason == "stop" and s.stats.new_tokens == 4


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "runner"])
def test_ignore_eos_yields_stop_ids_and_goes_on(graphs):
    p = prompt_of(10)
    full = expected(p, 12)
    stop = full[4]
    assert stop not in full[:4]
    eng = mock_engine(stop={stop})
    eng.cuda_graphs = graphs  # the runner without capture on the CPU
    s = eng.new_session()
    out = list(s.generate(p, GREEDY.replace(max_new_tokens=12, ignore_eos=True)))
    assert out == full and stop in out
    assert s.stats.stop_reason == "length" and s.stats.new_tokens == 12
    assert s.cached_ids == p + full[:-1]


def test_context_full_stops_without_error():
    ctx, n = 48, 30
    eng = mock_engine(ctx=ctx, page_size=16)
    s = eng.new_session()
    p = prompt_of(n)
    out = list(s.generate(p))  # greedy, no token budget
    assert s.stats.stop_reason == "context"
    assert len(out) == ctx - n and out == expected(p, len(out))  # prompt + reply = ctx
    assert s.num_cached == ctx - 1  # the last token is not fed


def test_prompt_too_long_and_empty():
    s = mock_engine(ctx=32).new_session()
    with pytest.raises(ValueError, match=r"32 tokens, which leaves no room .* context of 32"):
        s.generate(prompt_of(32))
    list(s.generate(prompt_of(31), GREEDY.replace(max_new_tokens=1)))  # 31 + 1 fits
    with pytest.raises(ValueError, match="empty"):
        s.generate([])


def test_reset_and_sessions_share_the_pool():
    eng = mock_engine()
    total = eng.pool.num_free_pages
    a, b = eng.new_session(), eng.new_session()
    pa, pb = prompt_of(40), prompt_of(23, seed=5)
    ra = list(a.generate(pa, GREEDY.replace(max_new_tokens=3)))
    rb = list(b.generate(pb, GREEDY.replace(max_new_tokens=3)))
    assert (ra, rb) == (expected(pa, 3), expected(pb, 3))
    assert eng.pool.num_free_pages == total - 3 - 2
    a.reset()
    assert a.num_cached == 0 and eng.pool.num_free_pages == total - 2
    b.reset()
    assert eng.pool.num_free_pages == total
    assert list(a.generate(pb, GREEDY.replace(max_new_tokens=3))) == rb


def test_stats_to_dict_says_none_for_what_was_not_measured():
    """No token yet (a prefill cut short): no time to first token; one token: no decode rate
    (the stats line leaves it out too); the plain fields stay numbers."""
    from infer.stats import GenerationStats

    d = GenerationStats(prompt_tokens=7).to_dict()
    assert d["ttft_s"] is None and d["decode_tokens_per_s"] is None and d["decode_s"] == 0.0
    assert d["prefill_tokens"] == 0 and d["mean_accepted"] == 0.0  # the engine counts them
    one = GenerationStats(prompt_tokens=7, new_tokens=1, ttft_s=0.25).to_dict()
    assert one["ttft_s"] == 0.25 and one["decode_tokens_per_s"] is None
    stop_first = GenerationStats(prompt_tokens=7, ttft_s=0.25).to_dict()  # a stop id first
    assert stop_first["ttft_s"] == 0.25


def test_stats_to_dict():
    s = mock_engine().new_session()
    list(s.generate(prompt_of(5), GREEDY.replace(max_new_tokens=4)))
    d = s.stats.to_dict()
    assert d["prompt_tokens"] == 5 and d["new_tokens"] == 4 and d["prefill_tokens"] == 5
    assert d["decode_tokens_per_s"] == pytest.approx(3 / d["decode_s"])
    assert s.engine.ceiling_tokens_per_s(10) is None  # CPU: no bandwidth figure
