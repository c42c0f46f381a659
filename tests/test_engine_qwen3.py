"""Engine and Session on a tiny random Qwen3 checkpoint, checked token for token and logit for
logit against transformers' greedy ``generate`` (CPU; on a GPU with ``-m gpu``, through the
engine's own loading path). The session logic on a mock model is in ``test_engine.py``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from mock_engine import GREEDY

from infer import Engine, EngineConfig, SamplingParams
from models.config_values import MAX_POSITIONS

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
    # a checkpoint that claims the most native positions a config may (2**24) and 128 layers:
    # the context limit does not stop 2**24 tokens, the memory check does (32 KiB a token in
    # BF16, 512 GiB in all: more than any one GPU holds)
    folder = tiny_ckpt_factory(num_hidden_layers=128,
                               overrides={"max_position_embeddings": MAX_POSITIONS})
    with pytest.raises(ValueError, match=r"does not fit.*Largest context that fits: bf16: \d+"):
        Engine(EngineConfig(folder, ctx=MAX_POSITIONS, device="cuda"))
