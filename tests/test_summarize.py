"""Map-reduce summaries (``infer/summarize.py``) on a tiny random Qwen3 with the real tokenizer, on
the CPU: the plan (part limit, a context too small), the map over batches (every part's prompt
and reply fit, the parts cover the text once, batched == one at a time), the recursive reduce
(a tiny context whose summaries do not fit in one combining prompt), the final prompt."""

from __future__ import annotations

import pytest
import torch

from infer import Engine, EngineConfig, SamplingParams
from infer.summarize import Summarizer
from infer.summary_prompts import PART_PROMPT
from models.tokenizer import Qwen3Tokenizer

# greedy with a presence penalty: a random model's replies vary (plain greedy repeats one id)
SUMMARY_SAMPLING = SamplingParams(temperature=0.0, presence_penalty=2.0)


def token_splitter(tok: Qwen3Tokenizer):
    """A plain splitter for these tests: cut at the token offsets, every ``max_tokens``."""

    def split(text: str, max_tokens: int) -> list[str]:
        enc = tok._tok.encode(text, add_special_tokens=False)
        cuts = [enc.offsets[i][0] for i in range(max_tokens // 2, len(enc.ids), max_tokens // 2)]
        bounds = [0, *cuts, len(text)]
        parts = [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
        assert all(len(tok.encode(p)) <= max_tokens for p in parts)
        return parts

    return split


@pytest.fixture(scope="module")
def tok(tiny_ckpt):
    return Qwen3Tokenizer.from_folder(tiny_ckpt)


@pytest.fixture(scope="module")
def text(texts_dir) -> str:
    return (texts_dir / "adventures_of_sherlock_holmes.txt").read_text(encoding="utf-8")[
        20000:32000]


def engine(tiny_ckpt, tok, ctx: int, max_batch: int) -> Engine:
    cfg = EngineConfig(str(tiny_ckpt), ctx=ctx, page_size=16, device="cpu",
                       attention="reference", max_batch=max_batch)
    return Engine(cfg, tokenizer=tok)


def summarizer(eng, tok, **kw) -> Summarizer:
    kw.setdefault("part_tokens", 12)
    kw.setdefault("final_tokens", 16)
    return Summarizer(eng, tok, token_splitter(tok), SUMMARY_SAMPLING, **kw)


def test_map_reduce_parts_cover_the_text_and_fit(tiny_ckpt, tok, text):
    eng = engine(tiny_ckpt, tok, ctx=1024, max_batch=4)
    sm = summarizer(eng, tok)
    assert not sm.fits_whole(sm.whole_prompt(text))
    seen, prefills = [], []
    final = sm.run(text, on_part=seen.append, on_prefill=lambda *a: prefills.append(a))
    level0 = [p for p in sm.parts if p.level == 0]
    n = len(level0)
    assert n >= 3 and seen == sm.parts  # reported as they finish
    assert sorted(p.index for p in level0) == list(range(n))
    level0.sort(key=lambda p: p.index)
    assert level0[0].chars[0] == 0 and level0[-1].chars[1] == len(text)
    assert all(a.chars[1] == b.chars[0] and a.tokens[1] == b.tokens[0]
               for a, b in zip(level0, level0[1:], strict=False))
    assert all(p.prompt_tokens + sm.part_tokens <= eng.ctx and p.new_tokens == sm.part_tokens
               and p.stop_reason == "length" for p in level0)
    assert {(lv, i) for lv, i, _, _ in prefills} == {(0, i) for i in range(n)}
    assert len(final) + sm.final_tokens <= eng.ctx
    assert sm.times.map_prefill_s > 0 and sm.times.map_decode_s > 0 and sm.times.reduce_s == 0
    # the final prompt holds every part summary, in order
    rendered = tok.decode(final)
    pos = [rendered.index(f"Part {k + 1}:\n{p.summary}") for k, p in enumerate(level0)]
    assert pos == sorted(pos)
    # every pool page is back
    assert eng.pool.num_free_pages == eng.pool.num_pages


def test_batched_map_equals_one_part_at_a_time(tiny_ckpt, tok, text):
    def summaries(max_batch: int) -> list[str]:
        sm = summarizer(engine(tiny_ckpt, tok, ctx=1024, max_batch=max_batch), tok)
        sm.run(text)
        return [p.summary for p in sorted(sm.parts, key=lambda p: (p.level, p.index))]

    assert summaries(4) == summaries(1)


def test_recursive_reduce_when_the_summaries_do_not_fit(tiny_ckpt, tok, text):
    eng = engine(tiny_ckpt, tok, ctx=320, max_batch=8)
    sm = summarizer(eng, tok, part_tokens=24, final_tokens=24)
    final = sm.run(text[:6000])
    levels = sorted({p.level for p in sm.parts})
    assert levels[:2] == [0, 1] and sm.times.reduce_s > 0
    for lv in levels[1:]:  # each level has fewer summaries than the one below
        assert len([p for p in sm.parts if p.level == lv]) < \
            len([p for p in sm.parts if p.level == lv - 1])
    assert all(p.prompt_tokens + sm.part_tokens <= eng.ctx for p in sm.parts)
    assert len(final) + sm.final_tokens <= eng.ctx


def test_a_context_too_small_for_parts_is_bad_input(tiny_ckpt, tok):
    sm = summarizer(engine(tiny_ckpt, tok, ctx=128, max_batch=1), tok, part_tokens=64)
    with pytest.raises(ValueError, match="too small to summarize a text in parts"):
        sm.part_limit()


def test_a_final_budget_that_cannot_fit_is_refused_before_any_work(tiny_ckpt, tok, text):
    eng = engine(tiny_ckpt, tok, ctx=1024, max_batch=4)
    sm = summarizer(eng, tok, part_tokens=12, final_tokens=1000)
    with pytest.raises(ValueError, match="--max-new-tokens to at most"):
        sm.run(text)
    assert sm.parts == [] and eng.pool.num_free_pages == eng.pool.num_pages


def test_part_prompt_overhead_is_counted(tiny_ckpt, tok):
    sm = summarizer(engine(tiny_ckpt, tok, ctx=1024, max_batch=1), tok)
    empty = len(sm.prompt_ids(PART_PROMPT, "", k=1, n=1))
    assert sm.part_limit() <= 1024 - empty - sm.part_tokens


def test_seeded_sampling_reproducible(tiny_ckpt, tok, text):
    def run():
        sm = Summarizer(engine(tiny_ckpt, tok, ctx=1024, max_batch=4), tok, token_splitter(tok),
                        SamplingParams(temperature=0.8, top_k=20, seed=5), part_tokens=8,
                        final_tokens=16)
        torch.manual_seed(0)
        return tok.decode(sm.run(text[:5000]))

    assert run() == run()
