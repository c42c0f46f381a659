"""Summaries whose text encodes to more tokens than their reply had (``infer/summarize.py``,
``infer/summary_prompts.py``): ``infer summarize`` at the --ctx its own error suggested looped for
ever, every level as many summaries as the one below, when a random model's 512-token replies
re-encoded to 530-570 tokens and only one fitted a group. Now a reused summary is cut to its share
of the plan (``labelled_summaries``), and a level that would not shrink is an error, not a loop.

A fake engine and a character tokenizer whose reply ids decode to two characters each give
summaries twice their budget, on the CPU in no time; the tiny random Qwen3 checks the real case.
"""

from __future__ import annotations

import random
import re
from types import SimpleNamespace

import pytest

from infer import Engine, EngineConfig, SamplingParams
from infer import summarize as summarize_module
from infer.summarize import Summarizer
from infer.summary_prompts import SUMMARY_SHARE, check_plan, labelled_summaries, trim_to_tokens
from infer.textsplit import split_text
from models.tokenizer import Qwen3Tokenizer

WIDE = 0x110000  # a reply id past every character: decodes to two characters


class CharTokenizer:
    """One token per character; ``WIDE`` decodes to "ab", so a reply's text encodes to twice as
    many tokens as the reply had."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(t) for t in texts]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join("ab" if i == WIDE else chr(i) for i in ids)

    def chat_ids(self, messages, enable_thinking: bool = False) -> list[int]:
        return [1, *self.encode(messages[0]["content"]), 2, 3]


class OverlongEngine:
    """Every reply is ``max_new_tokens`` ``WIDE`` ids; a prompt that does not fit with its reply
    budget is refused at call time, as ``Engine.generate_batch`` does."""

    def __init__(self, ctx: int, max_batch: int = 4):
        self.ctx, self.max_batch, self.batches = ctx, max_batch, 0

    def new_session(self):
        session = SimpleNamespace(stats=None)
        session.reset = lambda: setattr(session, "stats", None)
        return session

    def generate_batch(self, requests, sampling, *, on_prefill=None, speculate=False):
        for _, prompt in requests:
            if len(prompt) + sampling.max_new_tokens > self.ctx:
                raise ValueError(f"prompt of {len(prompt)} + {sampling.max_new_tokens} tokens "
                                 f"does not fit in {self.ctx}")
        self.batches += 1
        return self._replies(requests, sampling.max_new_tokens)

    @staticmethod
    def _replies(requests, n: int):
        for j, (session, _) in enumerate(requests):
            session.stats = SimpleNamespace(stop_reason=None, new_tokens=0, drafted=0,
                                            accepted=0)
            for t in range(n):
                session.stats.new_tokens = t + 1
                session.stats.stop_reason = "length" if t == n - 1 else None
                yield j, WIDE


def smallest_ctx(tok, part_tokens: int, final_tokens: int) -> int:
    """The --ctx the plan's refusal of a far too small one names ('at least N')."""
    with pytest.raises(ValueError, match="at least") as e:
        check_plan(tok, 16, part_tokens, final_tokens)
    return int(re.search(r"at least ([\d,]+)", str(e.value)).group(1).replace(",", ""))


def char_split(text: str, max_tokens: int) -> list[str]:
    return [text[i:i + max_tokens] for i in range(0, len(text), max_tokens)]


def overlong_run(part_tokens: int = 20, parts: int = 9):
    tok = CharTokenizer()
    ctx = smallest_ctx(tok, part_tokens, part_tokens)
    eng = OverlongEngine(ctx)
    sm = Summarizer(eng, tok, char_split, SamplingParams(temperature=0.0),
                    part_tokens=part_tokens, final_tokens=part_tokens)
    limit = check_plan(tok, ctx, part_tokens, part_tokens)
    return sm, eng, "x" * (limit * parts)


def test_overlong_summaries_are_cut_to_their_share_and_the_reduce_ends():
    sm, eng, text = overlong_run()
    final = sm.run(text)
    top = max(p.level for p in sm.parts)
    counts = [sum(p.level == lv for p in sm.parts) for lv in range(top + 1)]
    assert counts[0] == 9 and all(b < a for a, b in zip(counts, counts[1:], strict=False))
    assert len(final) + sm.final_tokens <= eng.ctx
    share = sm.part_tokens + SUMMARY_SHARE - 2  # the labelled summary, separator excluded
    whole = len("Part 1:\n") + 2 * sm.part_tokens  # what the reply's text encodes to
    assert all(p.cut_tokens == whole - share for p in sm.parts)  # every summary was reused
    kept = ("Part 1:\n" + "ab" * sm.part_tokens)[:share]  # its first tokens: its share
    assert f"---\n{kept}\n\nPart 2:" in CharTokenizer().decode(final)


def test_a_level_that_would_not_shrink_is_an_error_not_a_loop(monkeypatch):
    """Without the cut (the old code) one summary fills a group: the guard refuses the level
    before any of its work, naming what to change."""
    def whole(tok, summaries, part_tokens):
        return [f"Part {k + 1}:\n{s}" for k, s in enumerate(summaries)], [0] * len(summaries)

    monkeypatch.setattr(summarize_module, "labelled_summaries", whole)
    sm, eng, text = overlong_run()
    with pytest.raises(ValueError, match=r"would not end: the 9 summaries of level 0 take a "
                                         r"combining prompt each .* raise --ctx or lower "
                                         r"--part-tokens$"):
        sm.run(text)
    assert eng.batches == 3 and {p.level for p in sm.parts} == {0}  # the parts, 4 at a time


@pytest.fixture(scope="module")
def tok(tiny_ckpt):
    return Qwen3Tokenizer.from_folder(tiny_ckpt)


def test_random_replies_re_encode_longer_and_are_cut_to_their_share(tok):
    """The cause: a random model's reply ids are not its text's tokenization (byte tokens of
    unfinished characters decode to U+FFFD, BPE merges differ), so 512 ids encode to more."""
    rng = random.Random(0)
    texts = [tok.decode([rng.randrange(tok.vocab_limit) for _ in range(512)],
                        skip_special_tokens=True).strip() for _ in range(3)]
    assert all(n > 512 for n in tok.count_tokens(texts))
    labelled, cut = labelled_summaries(tok, [*texts, "A short summary."], 512)
    share = 512 + SUMMARY_SHARE - 2
    for k, (text, n) in enumerate(zip(labelled[:3], cut, strict=False)):
        full = tok.encode(f"Part {k + 1}:\n{texts[k]}")
        kept = tok.encode(text)
        assert n > 0 and kept == full[:len(kept)]  # its first tokens
        assert share - 8 <= len(kept) == len(full) - n <= share  # cut to its share, no more
    assert labelled[3] == "Part 4:\nA short summary." and cut[3] == 0


@pytest.mark.parametrize("limit", [1, 7, 50, 123])
def test_trim_to_tokens_keeps_the_first_tokens_whole(tok, limit):
    """Never cut inside a character (a trailing U+FFFD), and not fooled by the tokenizer's NFC
    normalization: U+F95F (a CJK compatibility ideograph, which a random model wrote) encodes as
    U+5BE7, so no prefix of the text itself decodes back (it was cut to nothing)."""
    text = "déjà vu " * 40 + "漢字かな交じり文" * 20 + "\uf95f_folder " * 50
    for t in (text, text[::-1]):
        ids = tok.encode(t)
        head = trim_to_tokens(tok, t, limit)
        kept = tok.encode(head)
        assert kept == ids[:len(kept)] and limit - 4 <= len(kept) <= limit
        assert "\ufffd" not in head
    assert trim_to_tokens(tok, "short", 10) == "short"


def test_the_smallest_ctx_suggested_finishes_with_a_random_model(tiny_ckpt, tok, texts_dir):
    """The repro in small: the tiny random Qwen3 at the --ctx the plan's refusal names."""
    part = 64
    ctx = smallest_ctx(tok, part, part)
    cfg = EngineConfig(str(tiny_ckpt), ctx=ctx, page_size=16, device="cpu",
                       attention="reference", max_batch=8)
    text = (texts_dir / "pep-0498-literal-string-interpolation.txt").read_text()[:3000]
    sm = Summarizer(Engine(cfg, tokenizer=tok), tok, lambda t, m: split_text(t, tok, m),
                    SamplingParams(temperature=0.0, presence_penalty=2.0), part_tokens=part,
                    final_tokens=part)
    final = sm.run(text)
    assert sum(p.level == 0 for p in sm.parts) > 4
    assert len(final) + part <= ctx and any(p.cut_tokens for p in sm.parts)
    levels = max(p.level for p in sm.parts)
    assert levels >= 1 and all(sum(p.level == lv + 1 for p in sm.parts) <
                               sum(p.level == lv for p in sm.parts) for lv in range(levels))

