"""Extractive summary rows for the small Qwen3's training (``benchmarks/train_small_qwen3.py
--summary-frac``).

Issue 17 measures prompt lookup on ``infer summarize`` of held-out chapters. A model trained on
plain text and copying rows learns to copy a passage that repeats (induction), yet, asked for a
summary, it does not quote the text: its reply is whatever its prior continues a chat prompt with
(BENCHMARKS.md: 1-2 % of its tokens guessable from the prompt). Real summaries copy runs of words
from their source, and that is what prompt lookup drafts. So a share of the training rows are
summary requests answered extractively: the request exactly as ``infer summarize`` renders it
(``SUMMARY_PROMPT``, or ``PART_PROMPT`` for a part ``k`` of ``n``, in the chat template with
thinking off), over a window of consecutive sentences of the training text (its characters
verbatim, hard line breaks included, so that a quote is the same tokens as its source), then a
reply that quotes some of those sentences in order (``keep``) and ends the turn. The rest of each
row is plain text.
The chapters the benchmark summarizes are held out, so on them the quoting can only be copying.
"""

from __future__ import annotations

import random
import re

import torch

from infer.summary_prompts import PART_PROMPT, SUMMARY_PROMPT, template_overhead

_NOT_AN_END = r"(?<!Mr\.)(?<!Mrs\.)(?<!Dr\.)(?<!St\.)"  # titles: "Mrs. Bennet" is one sentence
_SENTENCE_END = re.compile(_NOT_AN_END + r"(?<=[.!?])\s+")
_SPLIT = re.compile(_NOT_AN_END + r"(?<=[.!?])(\s+)")


def _sentences(texts: list[str]) -> list[list[tuple[str, str]]]:
    """Each text's sentences, verbatim (line breaks inside a sentence kept), each with the
    whitespace that follows it: joined back they give the text (less its leading and trailing
    whitespace). A document window and its quotes are then the same characters as the text, so
    a quote is the same tokens as its source, as prompt lookup needs."""
    out = []
    for t in texts:
        parts = _SPLIT.split(t.strip())
        pairs = [(parts[i], parts[i + 1] if i + 1 < len(parts) else "")
                 for i in range(0, len(parts), 2)]
        out.append([(sent, sep) for sent, sep in pairs if sent.strip()])
    return out


def _join(sentences: list[tuple[str, str]], picked: list[int]) -> str:
    """The ``picked`` sentences (indices, increasing) as text: neighbours keep the whitespace
    between them in the source, a gap becomes one space."""
    text = sentences[picked[0]][0]
    for prev, i in zip(picked, picked[1:], strict=False):
        text += (sentences[prev][1] if i == prev + 1 else " ") + sentences[i][0]
    return text


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


def summary_example(tok, sentences: list[tuple[str, str]], filler: list[int], length: int,
                    rng: random.Random, overhead: int, reply_tokens: int | None = None,
                    keep: float = 1 / 3) -> list[int] | None:
    """One row of exactly ``length`` ids: a summary request over consecutive ``sentences``
    (``_sentences``' pairs; from the first one, as many as fit beside the reply budget
    ``reply_tokens``, default ``min(128, length // 4)``; the document is the text's characters
    verbatim), the reply (the first sentence, then each later one with probability ``keep``, in
    order, as long as they fit: ``keep=1`` quotes the document's opening, a lead summary),
    ``<|im_end|>`` and a line break, then ``filler`` ids (plain text) to the end. None when not
    even one sentence and its reply fit. ``overhead``: ``request_overhead(tok)``."""
    im_end = tok.added_tokens["<|im_end|>"]
    reply_tokens = min(128, length // 4) if reply_tokens is None else reply_tokens
    doc_budget = length - overhead - reply_tokens - 2
    n_doc, used = 0, 0
    for sent, sep in sentences:
        n = len(tok.encode(sent + sep))
        if used + n > doc_budget:
            break
        n_doc += 1
        used += n
    if not n_doc:
        return None
    prompt = _request(tok, _join(sentences, list(range(n_doc))), rng)
    room = length - len(prompt) - 2  # <|im_end|> and "\n"
    picked = [0] + [i for i in range(1, n_doc) if rng.random() < keep]
    reply: list[int] = []
    for i in range(len(picked), 0, -1):  # the most picked sentences that fit
        reply = tok.encode(_join(sentences, picked[:i]))
        if len(reply) <= room:
            break
    else:
        return None
    row = prompt + reply + [im_end] + tok.encode("\n")
    if len(row) > length:
        return None
    return row + filler[:length - len(row)]


def summary_rows(texts: list[str], tok, data: list[int], count: int, length: int,
                 seed: int, keep: float = 1 / 3) -> torch.Tensor:
    """int64 [count, length]: ``summary_example`` rows (quoting each later sentence with
    probability ``keep``) over windows of ``texts`` (the training part) starting at random
    sentences, each filled out with ``data`` (the training token stream) from a random offset.
    Seeded with ``seed``.

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
        row = summary_example(tok, sents[start:start + 160], data[off:off + length], length, rng,
                              overhead, keep=keep)
        if row is not None and len(row) == length:
            rows.append(row)
    if not rows:
        raise ValueError(f"no summary row fits in rows of {length} tokens (a request, a sentence "
                         f"and its reply): use longer rows (--seq, --long-seq) or --summary-frac 0")
    return torch.tensor(rows, dtype=torch.int64)
