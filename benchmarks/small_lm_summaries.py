"""Extractive summary rows for the small Qwen3's training (``benchmarks/train_small_qwen3.py
--summary-frac``).

Issue 17 measures prompt lookup on ``infer summarize`` of held-out chapters. A model trained on
plain text and copying rows learns to copy a passage that repeats (induction), yet, asked for a
summary, it does not quote the text: its reply is whatever its prior continues a chat prompt with
(BENCHMARKS.md: 1-2 % of its tokens guessable from the prompt). Real summaries copy runs of words
from their source, and that is what prompt lookup drafts. So a share of the training rows are
summary requests answered extractively: the request exactly as ``infer summarize`` renders it
(``SUMMARY_PROMPT``, or ``PART_PROMPT`` for a part ``k`` of ``n``, in the chat template with
thinking off), over a window of consecutive sentences of the training text, then a reply that
quotes some of those sentences in order and ends the turn. The rest of each row is plain text.
The chapters the benchmark summarizes are held out, so on them the quoting can only be copying.
"""

from __future__ import annotations

import random
import re

import torch

from infer.summary_prompts import PART_PROMPT, SUMMARY_PROMPT, template_overhead

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _sentences(texts: list[str]) -> list[list[str]]:
    """Each text's sentences (whitespace runs inside a sentence collapsed to one space)."""
    return [[" ".join(s.split()) for s in _SENTENCE_END.split(t) if s.strip()] for t in texts]


def _request(tok, doc: str, rng: random.Random) -> list[int]:
    """The chat prompt ``infer summarize`` sends for ``doc`` (a whole text or, one time in
    three, part k of n)."""
    if rng.random() < 1 / 3:
        n = rng.randint(2, 12)
        content = PART_PROMPT.format(k=rng.randint(1, n), n=n, text=doc)
    else:
        content = SUMMARY_PROMPT.format(text=doc)
    return tok.chat_ids([{"role": "user", "content": content}], enable_thinking=False)


def request_overhead(tok) -> int:
    """Tokens a summary request takes besides its text, for either template, with the
    margin ``infer.summary_prompts`` keeps."""
    return max(template_overhead(tok, t, think=False) for t in (SUMMARY_PROMPT, PART_PROMPT))


def summary_example(tok, sentences: list[str], filler: list[int], length: int,
                    rng: random.Random, overhead: int,
                    reply_tokens: int | None = None) -> list[int] | None:
    """One row of exactly ``length`` ids: a summary request over consecutive ``sentences``
    (from the first one, as many as fit beside the reply budget ``reply_tokens``, default
    ``min(128, length // 4)``), the reply
    (the first sentence, then each later one with probability 1/3, in order, as long as they
    fit), ``<|im_end|>`` and a line break, then ``filler`` ids (plain text) to the end. None
    when not even one sentence and its reply fit. ``overhead``: ``request_overhead(tok)``."""
    im_end = tok.added_tokens["<|im_end|>"]
    reply_tokens = min(128, length // 4) if reply_tokens is None else reply_tokens
    doc_budget = length - overhead - reply_tokens - 2
    doc, used = [], 0
    for s in sentences:
        n = len(tok.encode(" " + s))
        if used + n > doc_budget:
            break
        doc.append(s)
        used += n
    if not doc:
        return None
    prompt = _request(tok, " ".join(doc), rng)
    room = length - len(prompt) - 2  # <|im_end|> and "\n"
    picked = [doc[0]] + [s for s in doc[1:] if rng.random() < 1 / 3]
    reply: list[int] = []
    for i in range(len(picked), 0, -1):  # the most picked sentences that fit
        reply = tok.encode(" ".join(picked[:i]))
        if len(reply) <= room:
            break
    else:
        return None
    row = prompt + reply + [im_end] + tok.encode("\n")
    if len(row) > length:
        return None
    return row + filler[:length - len(row)]


def summary_rows(texts: list[str], tok, data: list[int], count: int, length: int,
                 seed: int) -> torch.Tensor:
    """int64 [count, length]: ``summary_example`` rows over windows of ``texts`` (the training
    part) starting at random sentences, each filled out with ``data`` (the training token
    stream) from a random offset. Seeded with ``seed``.

    Raises:
        ValueError: no row fits ``length`` (too short for a request, a sentence and a reply).
    """
    rng = random.Random(seed)
    per_text = [s for s in _sentences(texts) if s]
    overhead = request_overhead(tok)
    rows: list[list[int]] = []
    tries = 0
    while len(rows) < count and tries < 4 * count + 100:
        tries += 1
        sents = rng.choice(per_text)
        start = rng.randrange(len(sents))
        off = rng.randrange(max(1, len(data) - length))
        row = summary_example(tok, sents[start:start + 64], data[off:off + length], length, rng,
                              overhead)
        if row is not None and len(row) == length:
            rows.append(row)
    if not rows:
        raise ValueError(f"no summary row fits in rows of {length} tokens (a request, a sentence "
                         f"and its reply): use longer rows (--seq, --long-seq) or --summary-frac 0")
    return torch.tensor(rows, dtype=torch.int64)
