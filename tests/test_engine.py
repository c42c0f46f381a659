"""Engine and Session on the CPU.

Two models: ``SumModel``, a mock whose next token is a known function of everything in its KV
cache (so any stale, missing or misplaced K/V shows up as a wrong token), for the session logic;
and a tiny random Qwen3 checkpoint, checked token for token and logit for logit against
transformers' greedy ``generate``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from mock_engine import GREEDY, SumModel, V, expected, mock_engine, prompt_of

from infer import Engine, EngineConfig, SamplingParams

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


def test_stats_to_dict():
    s = mock_engine().new_session()
    list(s.generate(prompt_of(5), GREEDY.replace(max_new_tokens=4)))
    d = s.stats.to_dict()
    assert d["prompt_tokens"] == 5 and d["new_tokens"] == 4 and d["prefill_tokens"] == 5
    assert d["decode_tokens_per_s"] == pytest.approx(3 / d["decode_s"])
    assert s.engine.ceiling_tokens_per_s(10) is None  # CPU: no bandwidth figure


# ---------------------------------------------------------------------------- tiny Qwen3


@pytest.fixture(scope="module")
def tiny(tiny_ckpt):
    from models.loader import load_model
    from models.tokenizer import Qwen3Tokenizer

    model = load_model(tiny_ckpt, device="cpu", dtype=torch.float32)
    return tiny_ckpt, model, Qwen3Tokenizer.from_folder(tiny_ckpt)


@pytest.fixture(scope="module")
def hf_greedy(tiny):
    """prompt ids -> (40 greedy token ids, float32 logits [40, vocab]) from transformers."""
    transformers = pytest.importorskip("transformers")
    folder, _, tok = tiny
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    cache = {}

    def run(ids: list[int]):
        if tuple(ids) not in cache:
            with torch.no_grad():
                out = hf.generate(torch.tensor([ids]), max_new_tokens=40, do_sample=False,
                                  output_logits=True, return_dict_in_generate=True,
                                  suppress_tokens=list(range(tok.vocab_limit, 151936)))
            toks = out.sequences[0, len(ids):].tolist()
            cache[tuple(ids)] = (toks, torch.cat(out.logits)[: len(toks)].float())
        return cache[tuple(ids)]

    return run


def tiny_engine(tiny, chunk=None, page_size=16, ctx=512, kv_cache="bf16"):
    folder, model, tok = tiny
    cfg = EngineConfig(folder, ctx=ctx, page_size=page_size, prefill_chunk=chunk, device="cpu",
                       attention="reference", kv_cache=kv_cache)
    eng = Engine(cfg, model=model, tokenizer=tok)
    logits = []
    inner = model.compute_logits
    eng.model = SimpleNamespace(forward=model.forward, config=model.config,
                                compute_logits=lambda h: logits.append(inner(h)) or logits[-1])
    return eng, logits


def text_ids(tok, texts_dir, n: int) -> list[int]:
    ids = tok.encode((texts_dir / "pride_and_prejudice.txt").read_text(encoding="utf-8")[:4000])
    return ids[:n]


@pytest.mark.parametrize("length", [15, 16, 17])
@pytest.mark.parametrize("chunk", [1, 7, 16, None])
def test_greedy_equals_transformers(tiny, hf_greedy, texts_dir, length, chunk):
    eng, logits = tiny_engine(tiny, chunk=chunk)
    prompt = text_ids(eng.tokenizer, texts_dir, length)
    want, want_logits = hf_greedy(prompt)
    got = list(eng.new_session().generate(prompt, GREEDY.replace(max_new_tokens=40)))
    assert got == want
    torch.testing.assert_close(torch.cat(logits)[: len(got)], want_logits, rtol=1e-4, atol=1e-4)


def test_int8_cache_close_to_transformers(tiny, hf_greedy, texts_dir):
    """INT8 K/V: the first step's logits (one prefill) stay close to the float reference."""
    eng, logits = tiny_engine(tiny, kv_cache="int8")
    prompt = text_ids(eng.tokenizer, texts_dir, 17)
    _, want_logits = hf_greedy(prompt)
    list(eng.new_session().generate(prompt, GREEDY.replace(max_new_tokens=1)))
    err = ((logits[0][0] - want_logits[0]) ** 2).sum() / (want_logits[0] ** 2).sum()
    assert err < 1e-3, f"logit NMSE {err:.2e}"


def test_chat_multi_turn_matches_fresh_session(tiny):
    eng, _ = tiny_engine(tiny, chunk=7)
    tok = eng.tokenizer
    msgs = [{"role": "user", "content": "Name three rivers."}]
    s = eng.new_session()
    r1 = list(s.generate(tok.chat_ids(msgs, enable_thinking=False),
                         GREEDY.replace(max_new_tokens=12)))
    msgs += [{"role": "assistant", "content": tok.decode(r1)},
             {"role": "user", "content": "And two more."}]
    p2 = tok.chat_ids(msgs, enable_thinking=False)
    r2 = list(s.generate(p2, GREEDY.replace(max_new_tokens=12)))
    assert s.stats.reused_tokens > 0
    assert s.stats.reused_tokens + s.stats.prefill_tokens == len(p2)
    fresh = tiny_engine(tiny)[0].new_session()
    assert list(fresh.generate(p2, GREEDY.replace(max_new_tokens=12))) == r2


def test_same_seed_same_tokens(tiny):
    eng, _ = tiny_engine(tiny)
    prompt = eng.tokenizer.encode("Once upon a time")
    sp = SamplingParams(temperature=1.0, top_k=50, top_p=0.9, max_new_tokens=15)

    def run(seed):
        return list(eng.new_session().generate(prompt, sp.replace(seed=seed)))

    a, b, c = run(7), run(7), run(8)
    assert a == b
    assert a != c
    assert all(t < eng.tokenizer.vocab_limit for t in a + c)


def test_presence_penalty_in_the_decode_loop(tiny):
    """The penalty covers the tokens generated so far in the reply: the random model's greedy
    reply repeats itself, the penalized one much less."""
    eng, _ = tiny_engine(tiny)
    p = eng.tokenizer.encode("Hello there")
    s = eng.new_session()
    plain = list(s.generate(p, GREEDY.replace(max_new_tokens=12)))
    pen = list(s.generate(p, GREEDY.replace(max_new_tokens=12, presence_penalty=2.0)))
    assert pen[0] == plain[0]  # nothing generated yet at the first step
    assert len(set(pen)) > len(set(plain))


# ---------------------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_gpu_engine_loads_and_matches_transformers(tiny, hf_greedy, texts_dir):
    """The engine's own loading path on CUDA (capacity check, loader, pool on the GPU)."""
    folder, _, tok = tiny
    eng = Engine(EngineConfig(folder, ctx=4096, page_size=16, prefill_chunk=7, device="cuda",
                              dtype="float32", attention="reference"))
    assert eng.pool.layer(0).k.is_cuda
    prompt = text_ids(tok, texts_dir, 17)
    want, _ = hf_greedy(prompt)
    s = eng.new_session()
    assert list(s.generate(prompt, GREEDY.replace(max_new_tokens=40))) == want
    assert s.stats.ttft_s > 0 and s.stats.decode_tokens_per_s > 0


@pytest.mark.gpu
@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_gpu_engine_bf16_runs(tiny, kv_cache):
    folder, _, tok = tiny
    eng = Engine(EngineConfig(folder, ctx=2048, kv_cache=kv_cache, device="cuda"))
    assert eng.dtype == torch.bfloat16
    s = eng.new_session()
    p = tok.chat_ids([{"role": "user", "content": "Hello"}])
    out = list(s.generate(p, eng.default_sampling(seed=1, max_new_tokens=32)))
    assert 0 < len(out) <= 32 and all(t < tok.vocab_limit for t in out)
    assert list(eng.new_session().generate(p, eng.default_sampling(seed=1,
                                                                   max_new_tokens=32))) == out
    c0, c1 = eng.ceiling_tokens_per_s(0), eng.ceiling_tokens_per_s(1000)
    assert 1e11 < eng._bandwidth < 2e13  # bytes/s: any real GPU
    assert c0 > c1 > 0


@pytest.mark.gpu
def test_gpu_ctx_that_does_not_fit(tiny_ckpt_factory):
    # a checkpoint that claims 2**31 native positions: the context limit does not stop 2**30,
    # the memory check does
    folder = tiny_ckpt_factory(overrides={"max_position_embeddings": 1 << 31})
    with pytest.raises(ValueError, match=r"does not fit.*Largest context that fits: bf16: \d+"):
        Engine(EngineConfig(folder, ctx=1 << 30, device="cuda"))
