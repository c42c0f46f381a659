"""``infer/warm_up.py``: the start-up warm-up (a placeholder prefill chunk on a scratch session,
the decode step's capture) and the thread that computes Triton's installation key while the
weights load. On the CPU with the mock engine (its next token depends on every cached K/V, so a
warm-up that left K/V or pages behind shows up as a wrong token); on the GPU with a tiny random
Qwen3: the capture happens in the warm-up, the reply captures nothing and is the same."""

from __future__ import annotations

import pytest
import torch
from mock_engine import GREEDY, NO_STOP, expected, mock_engine, prompt_of, random_ids

from infer import Engine, EngineConfig
from infer.graphs import GraphRunner
from infer.warm_up import start_triton_key, warm_up


@pytest.mark.parametrize("prompt_tokens, chunk, calls", [(0, 8, []), (5, 8, [5]), (40, 8, [8])])
def test_warm_up_prefills_one_chunk_and_gives_the_pages_back(prompt_tokens, chunk, calls):
    eng = mock_engine(ctx=64, page_size=16, chunk=chunk)
    free = eng.pool.num_free_pages
    seconds = warm_up(eng, GREEDY, prompt_tokens=prompt_tokens)
    assert eng.model.calls == calls  # one chunk at most: min(prompt, chunk) placeholder tokens
    assert eng.pool.num_free_pages == free
    assert seconds >= 0 and eng.warm_up_s == seconds
    p = prompt_of(30)
    assert list(eng.new_session().generate(p, GREEDY.replace(max_new_tokens=6))) == \
        expected(p, 6)


def test_warm_up_leaves_other_sessions_alone():
    eng = mock_engine(ctx=64, page_size=16, chunk=8)
    s = eng.new_session()
    p = prompt_of(12, seed=1)
    first = list(s.generate(p, GREEDY.replace(max_new_tokens=3)))
    cached, pages = s.cached_ids, list(s._pages)
    warm_up(eng, GREEDY, prompt_tokens=20)
    assert s.cached_ids == cached and s._pages == pages
    follow = p + first + [7]  # the conversation goes on from its cache
    assert list(s.generate(follow, GREEDY.replace(max_new_tokens=4))) == expected(follow, 4)


def test_warm_up_prepares_the_step_for_the_batch(monkeypatch):
    seen = []
    monkeypatch.setattr(GraphRunner, "prepare",
                        lambda self, params, rows, verify=False: seen.append((params, rows)))
    eng = mock_engine(ctx=64, page_size=16, chunk=8, max_batch=3)
    sp = GREEDY.replace(max_new_tokens=5)
    warm_up(eng, sp, batch=3, prompt_tokens=0)
    assert seen == [(sp, 3)]


@pytest.mark.parametrize("kw", [dict(batch=0), dict(batch=2), dict(prompt_tokens=-1)])
def test_warm_up_rejects_bad_arguments(kw):
    eng = mock_engine(ctx=64, page_size=16, chunk=8)
    with pytest.raises(ValueError, match="warm-up"):
        warm_up(eng, GREEDY, **kw)


def test_warm_up_prefill_stays_inside_the_context():
    eng = mock_engine(ctx=16, page_size=16, chunk=64)
    warm_up(eng, GREEDY, prompt_tokens=100)
    assert eng.model.calls == [15]  # ctx - 1: a prompt must leave room for a reply


def test_triton_key_thread(monkeypatch):
    assert start_triton_key(torch.device("cpu")) is None
    assert start_triton_key(torch.device("cuda")) is None  # the interpreter: nothing to hash
    from triton.runtime.cache import triton_key

    monkeypatch.delenv("TRITON_INTERPRET")
    triton_key.cache_clear()  # so that only the thread can fill the cache below
    thread = start_triton_key(torch.device("cuda"))  # hashing needs no GPU
    assert thread is not None and thread.daemon
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert triton_key.cache_info().currsize == 1  # cached for the launches to come
    assert triton_key().startswith(__import__("triton").__version__)


@pytest.mark.gpu
@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_gpu_warm_up_captures_before_the_reply(gpu_qwen3_4l, kv_cache):
    prompt, sp = random_ids(300), GREEDY.replace(max_new_tokens=40)

    def engine() -> Engine:
        cfg = EngineConfig("unused", ctx=1024, kv_cache=kv_cache, page_size=16, device="cuda",
                           attention="triton", prefill_chunk=128)
        return Engine(cfg, model=gpu_qwen3_4l, tokenizer=NO_STOP)

    cold = list(engine().new_session().generate(prompt, sp))
    eng = engine()
    warm_up(eng, sp, prompt_tokens=len(prompt))
    runner = eng.graph_runner()
    assert runner.captures == 1 and eng.warm_up_s > 0
    assert list(eng.new_session().generate(prompt, sp)) == cold
    assert runner.captures == 1  # the reply found its step captured
