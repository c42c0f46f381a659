"""Batched decode (``Engine.generate_batch``): B sessions decode together through the one runner.

CPU: on the ``SumModel`` mock (a misplaced page, slot or position of any row shows up as a wrong
token) and on a tiny random Qwen3 (reference attention, and the Triton kernels under the
interpreter): every reply equals the same session decoded alone, token for token, with prompts of
different lengths across page boundaries, replies ending early (stop id) while others go on,
padding rows (3 sequences in a bucket of 4), presence penalty; pages and cached ids stay
consistent, also when the batch is closed mid-way. GPU (``-m gpu``): captured graphs of batch
buckets against single-sequence decode, BF16 and INT8.
"""

from __future__ import annotations

import pytest
from mock_engine import GREEDY, NO_STOP, expected, mock_engine, prompt_of, random_ids

from infer import Engine, EngineConfig, SamplingParams

LENGTHS = (1, 15, 16, 17, 33)  # page size 16: below, at and past page boundaries


def collect(gen, n: int) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in range(n)]
    for i, tok in gen:
        out[i].append(tok)
    return out


def test_batch_equals_each_sequence_alone_on_the_mock():
    eng = mock_engine(page_size=16, chunk=7, max_batch=8)
    prompts = [prompt_of(n, seed=n) for n in LENGTHS]
    sessions = [eng.new_session() for _ in prompts]
    got = collect(eng.generate_batch(list(zip(sessions, prompts, strict=True)),
                                     GREEDY.replace(max_new_tokens=40)), len(prompts))
    for p, s, out in zip(prompts, sessions, got, strict=True):
        assert out == expected(p, 40)
        assert s.cached_ids == p + out[:-1] and s.stats.stop_reason == "length"
        assert s.stats.new_tokens == 40 and s.num_pages == eng.pool.pages_for(len(p) + 39)
    used = sum(s.num_pages for s in sessions)
    assert eng.pool.num_free_pages == eng.pool.num_pages - used
    assert eng.graph_runner().bucket == 8  # 5 sequences padded to the bucket of 8


def test_a_reply_that_stops_early_leaves_the_batch():
    prompts = [prompt_of(n, seed=n) for n in LENGTHS]
    streams = [expected(p, 12) for p in prompts]
    # a stop id that ends one reply (row r) at its k-th token and appears in no other stream
    r, k = next((r, k) for r in range(len(streams)) for k in range(2, 12)
                if streams[r][k] not in streams[r][:k]
                and all(streams[r][k] not in s for i, s in enumerate(streams) if i != r))
    stop = streams[r][k]
    eng = mock_engine(page_size=16, max_batch=8, stop={stop})
    sessions = [eng.new_session() for _ in prompts]
    got = collect(eng.generate_batch(list(zip(sessions, prompts, strict=True)),
                                     GREEDY.replace(max_new_tokens=12)), len(prompts))
    assert got[r] == streams[r][:k] and sessions[r].stats.stop_reason == "stop"
    assert sessions[r].cached_ids == prompts[r] + got[r]  # the fed stop id was dropped
    for i in set(range(len(prompts))) - {r}:
        assert got[i] == streams[i] and sessions[i].stats.stop_reason == "length"
    # the stopped session goes on as a fresh one would
    p2 = prompts[r] + got[r] + prompt_of(3, seed=9)
    fresh = mock_engine(page_size=16, stop={stop}).new_session()
    assert list(sessions[r].generate(p2, GREEDY.replace(max_new_tokens=8))) == \
        list(fresh.generate(p2, GREEDY.replace(max_new_tokens=8)))


def test_context_full_ends_one_reply_and_prefix_reuse_per_session():
    eng = mock_engine(ctx=48, page_size=16, max_batch=2)
    a, b = eng.new_session(), eng.new_session()
    pa, pb = prompt_of(40), prompt_of(9, seed=4)
    got = collect(eng.generate_batch([(a, pa), (b, pb)], GREEDY.replace(max_new_tokens=20)), 2)
    assert got[0] == expected(pa, 48 - 40) and a.stats.stop_reason == "context"
    assert got[1] == expected(pb, 20) and b.stats.stop_reason == "length"
    pb2 = pb + got[1] + [3]
    got2 = collect(eng.generate_batch([(b, pb2)], GREEDY.replace(max_new_tokens=4)), 1)
    assert got2[0] == expected(pb2, 4) and b.stats.reused_tokens == len(pb) + 19


def test_closing_the_batch_keeps_every_session_consistent():
    eng = mock_engine(page_size=16, max_batch=4)
    prompts = [prompt_of(n, seed=n) for n in (5, 16, 30)]
    sessions = [eng.new_session() for _ in prompts]
    gen = eng.generate_batch(list(zip(sessions, prompts, strict=True)),
                             GREEDY.replace(max_new_tokens=50))
    got: list[list[int]] = [[], [], []]
    for _ in range(3 * 7 + 1):  # stop in the middle of a step's tokens
        i, tok = next(gen)
        got[i].append(tok)
    gen.close()
    for p, s, out in zip(prompts, sessions, got, strict=True):
        assert s.stats.stop_reason == "interrupted"
        assert s.cached_ids == (p + expected(p, 50))[:len(s.cached_ids)]
        assert len(s.cached_ids) == len(p) + 8  # every step's tokens fed ahead of the yields
        assert s.cached_ids[len(p):len(p) + len(out)] == out
        p2 = s.cached_ids + [1]
        assert list(s.generate(p2, GREEDY.replace(max_new_tokens=5))) == expected(p2, 5)


def test_generate_batch_bad_requests():
    eng = mock_engine(ctx=32, max_batch=2)
    a, b, c = eng.new_session(), eng.new_session(), eng.new_session()
    with pytest.raises(ValueError, match="at least one"):
        eng.generate_batch([])
    with pytest.raises(ValueError, match="at most 2 together"):
        eng.generate_batch([(a, [1]), (b, [2]), (c, [3])])
    with pytest.raises(ValueError, match="its own session"):
        eng.generate_batch([(a, [1]), (a, [2])])
    with pytest.raises(ValueError, match="its own session"):
        eng.generate_batch([(mock_engine().new_session(), [1])])
    with pytest.raises(ValueError, match="32 tokens"):
        eng.generate_batch([(a, [1]), (b, prompt_of(32))])
    with pytest.raises(ValueError, match="max_batch must be"):
        EngineConfig("m", max_batch=17)


def test_on_prefill_names_the_request():
    eng = mock_engine(chunk=8, max_batch=2)
    a, b = eng.new_session(), eng.new_session()
    seen = []
    collect(eng.generate_batch([(a, prompt_of(10)), (b, prompt_of(3))],
                               GREEDY.replace(max_new_tokens=2),
                               on_prefill=lambda *args: seen.append(args)), 2)
    assert seen == [(0, 0, 10), (0, 8, 10), (0, 10, 10), (1, 0, 3), (1, 3, 3)]


# ---------------------------------------------------------------------------- tiny Qwen3


@pytest.mark.parametrize("attention,kv_cache", [("reference", "bf16"), ("reference", "int8"),
                                                ("triton", "bf16")])
@pytest.mark.parametrize("presence", [0.0, 1.5])
def test_batch_equals_alone_on_tiny_qwen3(tiny_cpu, attention, kv_cache, presence):
    if attention == "triton" and presence:
        pytest.skip("one Triton case is enough under the interpreter")
    n_new = 6 if attention == "triton" else 20
    cfg = EngineConfig("unused", ctx=128, page_size=16, device="cpu", attention=attention,
                       kv_cache=kv_cache, max_batch=4)
    eng = Engine(cfg, model=tiny_cpu, tokenizer=NO_STOP)
    prompts = [random_ids(n, seed=n) for n in (3, 16, 29)]  # 3 rows in a bucket of 4
    sp = GREEDY.replace(max_new_tokens=n_new, presence_penalty=presence)
    sessions = [eng.new_session() for _ in prompts]
    got = collect(eng.generate_batch(list(zip(sessions, prompts, strict=True)), sp), 3)
    alone = [list(eng.new_session().generate(p, sp)) for p in prompts]
    assert got == alone and all(len(g) == n_new for g in got)


# ---------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_gpu_batched_graphs_equal_single_decode(gpu_qwen3_4l, kv_cache):
    cfg = EngineConfig("unused", ctx=1024, kv_cache=kv_cache, page_size=16, device="cuda",
                       attention="triton", max_batch=16)
    eng = Engine(cfg, model=gpu_qwen3_4l, tokenizer=NO_STOP)
    sp = GREEDY.replace(max_new_tokens=64)
    prompts = [random_ids(40 + 37 * i, seed=i) for i in range(11)]  # bucket 16
    single = [list(eng.new_session().generate(p, sp)) for p in prompts]
    sessions = [eng.new_session() for _ in prompts]
    got = collect(eng.generate_batch(list(zip(sessions, prompts, strict=True)), sp), 11)
    assert got == single
    two = collect(eng.generate_batch([(eng.new_session(), p) for p in prompts[:2]], sp), 2)
    assert two == single[:2]
    assert eng.graph_runner().num_graphs == 3  # buckets 1, 16 and 2
    sp_s = SamplingParams(temperature=0.8, top_k=50, seed=3, max_new_tokens=32)
    eager = Engine(cfg.__class__(**{**cfg.__dict__, "cuda_graphs": False}), model=gpu_qwen3_4l,
                   tokenizer=NO_STOP)
    sampled = [collect(e.generate_batch([(e.new_session(), p) for p in prompts[:5]], sp_s), 5)
               for e in (eng, eager)]
    assert sampled[0] == sampled[1]  # seeded sampling: graphs == eager for a batch too
