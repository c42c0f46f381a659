"""Split a text that is longer than the context into parts that each fit, for map-reduce summaries.

Contract of ``split_text(text, tokenizer, max_tokens)``: ``"".join(parts) == text`` (nothing lost,
nothing duplicated; no whitespace is stripped), and every part, tokenized alone exactly as the
tokenizer tokenizes it, is at most ``max_tokens`` tokens.

Design (the recursive character splitter of LangChain's ``RecursiveCharacterTextSplitter`` made
token-exact and balanced):

1. Tokenize the whole text once, with character offsets (HF ``tokenizers``' ``Encoding.offsets``).
   A cut may only fall where a token starts (never inside a token, never between two byte tokens
   of one character), and the tokens before a cut give each candidate part's size.
2. Candidate cuts by level, best first (``LEVELS``): before a chapter heading (a short line such
   as "CHAPTER I", "BOOK ONE: 1805", "Chapter 3", "I. A SCANDAL IN BOHEMIA", "第三章", "# Title"
   after a blank line; of consecutive headings only the first), after a blank line (paragraph),
   after a line break, after a sentence end (. ! ? ... and CJK 。！？, closing quotes included),
   before whitespace, then anywhere a token starts (a text with no boundary, CJK without spaces).
3. Balance: N = ceil(total / max_tokens) parts (N + 1 when N needs a cut below a paragraph
   end and N + 1 does not need one that bad). Cut k aims at an equal share of what is left; it
   takes the best level within +-``SLACK`` of a part's size around that aim, nearest the aim,
   while every part stays within the limit and the rest still fits the remaining parts.
4. Verify: tokenize every part alone (one batch) and split again any part that is over (a cut can
   tokenize a few tokens differently from the whole text).

Without offsets (``tokenizer`` a plain ``count_tokens(str) -> int``), token positions are
estimated from character positions and step 4 does the exact work (slower: more counting).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

import numpy as np
from tokenizers import Tokenizer

from models.tokenizer import Qwen3Tokenizer

CountTokens = Callable[[str], int]

SLACK = 0.2  # a cut may move this share of a part's size from the balanced position
_MARGIN_SHARE = 1 / 256  # planned parts leave this share of max_tokens (<= 8 tokens) unused

_NUM = r"(?:[IVXLCDM]+\b|\d+\b|[A-Z][A-Za-z]*\b)"
_HEADING = re.compile(
    r"^[ \t]*(?:(?i:chapter|book|part|volume|section|canto|act|letter|stave)\s+" + _NUM
    + r"|(?:[A-Z][A-Za-z]*\s+)?(?i:prologue|epilogue|preface|introduction|appendix|afterword)\b"
    r"|(?:[IVXLCDM]+|\d{1,3})\.?(?=\s*$)|(?:[IVXLCDM]+|\d{1,3})\.\s+\S"
    r"|第[0-9一二三四五六七八九十百千零〇两]+[章回节卷部篇集]|#{1,6}\s+\S)"
    r"[^\n]{0,80}$"  # the heading is a short line
    r"(?=\n(?:[ \t\r]*\n|[=\-~*#]{3,}[ \t\r]*\n)|\r?\n?\Z)",  # then a blank line or underline
    re.MULTILINE)
_SETEXT = re.compile(r"^[^\n]{1,80}(?=\n[=\-~^]{3,}[ \t\r]*$)", re.MULTILINE)  # Title\n=====
_PARAGRAPH = re.compile(r"\n(?:[ \t\r]*\n)+")
_LINE = re.compile(r"\n")
_SENTENCE = re.compile(r"(?:[.!?…]+[\"'”’)\]»]*(?=\s)|[。！？]+[」』”’）]*)")
_SPACE = re.compile(r"(?<=\S)\s")

LEVELS = ("chapter", "paragraph", "line", "sentence", "whitespace", "anywhere")


def split_text(text: str, tokenizer: Qwen3Tokenizer | Tokenizer | CountTokens,
               max_tokens: int) -> list[str]:
    """Split ``text`` into consecutive parts of at most ``max_tokens`` tokens each.

    Args:
        text: any string (an empty text is one empty part).
        tokenizer: a ``models.tokenizer.Qwen3Tokenizer`` (parts are counted as its ``encode``
            counts them), a HF ``tokenizers.Tokenizer`` (``encode(part, add_special_tokens=
            False)``), or a function counting the tokens of a string (no offsets: slower).
        max_tokens: the most tokens a part may hold (the context less the instruction and the
            reply budget), positive.

    Returns:
        The parts, in order: ``"".join(parts) == text``; each non-empty (unless ``text`` is),
        cut at the best boundaries the balance allows (module docstring). One part if it fits.

    Raises:
        ValueError: ``max_tokens`` is not a positive integer, or is smaller than the tokens of a
            single character of ``text`` (the message names it).
    """
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive number of tokens per part, got "
                         f"{max_tokens!r}: the instruction and the reply budget leave no room "
                         "for the text in the context (raise --ctx or lower --max-new-tokens)")
    return _split(text, _Counter(tokenizer), max_tokens)


class _Counter:
    """Token counts (exact) and token start offsets (None without a tokenizer) of strings."""

    def __init__(self, tokenizer):
        if isinstance(tokenizer, Qwen3Tokenizer):
            # NOTE: the wrapper's inner tokenizers.Tokenizer; its encode(text,
            # add_special_tokens=False) is exactly Qwen3Tokenizer.encode.
            tokenizer = tokenizer._tok
        if isinstance(tokenizer, Tokenizer):
            self.tok, self.count_fn = tokenizer, None
        elif callable(tokenizer):
            self.tok, self.count_fn = None, tokenizer
        else:
            raise TypeError("tokenizer must be a Qwen3Tokenizer, a tokenizers.Tokenizer or a "
                            f"function str -> int, got {type(tokenizer).__name__}")

    def counts(self, parts: Sequence[str]) -> list[int]:
        if self.tok is None:
            return [int(self.count_fn(p)) for p in parts]
        return [len(e.ids) for e in self.tok.encode_batch(list(parts), add_special_tokens=False)]

    def positions(self, text: str) -> tuple[int, np.ndarray | None, np.ndarray | None]:
        """(total tokens, char positions where a cut is possible, tokens before each)."""
        if self.tok is None:
            return int(self.count_fn(text)), None, None
        enc = self.tok.encode(text, add_special_tokens=False)
        if not enc.ids:
            return 0, None, None
        off = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)
        starts = off[:, 0]
        prev_end = np.maximum.accumulate(np.concatenate(([0], off[:-1, 1])))
        first = np.concatenate(([True], starts[1:] > starts[:-1]))
        ok = (starts >= prev_end) & first & (starts > 0)  # no token spans the cut
        return len(enc.ids), starts[ok], np.nonzero(ok)[0]


def _split(text: str, counter: _Counter, max_tokens: int) -> list[str]:
    total, cut_chars, cut_toks = counter.positions(text)
    if total <= max_tokens:
        return [text]
    if cut_chars is None:  # no offsets: every character, tokens estimated by proportion
        cut_chars = np.arange(1, len(text), dtype=np.int64)
        cut_toks = cut_chars * (total / len(text))
    if len(cut_chars) == 0:
        raise ValueError(f"max_tokens {max_tokens} is too small: {text[:20]!r} alone is {total} "
                         "tokens and cannot be split further")
    levels = _candidates(text, cut_chars, cut_toks)
    margin = min(8, int(max_tokens * _MARGIN_SHARE))
    budget = max_tokens - margin
    n = math.ceil(total / budget)
    cuts, worst = _plan(levels, total, budget, n)
    if worst > LEVELS.index("paragraph"):
        more, worst_more = _plan(levels, total, budget, n + 1)
        if worst_more < worst:
            cuts = more
    edges = [0, *cuts, len(text)]
    parts = [text[a:b] for a, b in zip(edges, edges[1:], strict=False)]
    out: list[str] = []
    for part, count in zip(parts, counter.counts(parts), strict=True):
        out.extend([part] if count <= max_tokens else _split(part, counter, max_tokens))
    return out


def _candidates(text: str, cut_chars: np.ndarray,
                cut_toks: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per level of ``LEVELS``: (token positions ascending, char positions) of its cuts."""
    def keep(chars: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """The positions among ``chars`` (ascending) where a token starts."""
        c = np.unique(np.asarray(chars, dtype=np.int64))
        idx = np.minimum(np.searchsorted(cut_chars, c), len(cut_chars) - 1)
        idx = idx[cut_chars[idx] == c]
        return cut_toks[idx], cut_chars[idx]

    found = sorted((m.start(), m.end()) for regex in (_HEADING, _SETEXT)
                   for m in regex.finditer(text))
    headings, last_end = [], -1
    for start, end in found:
        if start and not _ends_blank(text[max(0, start - 200):start]):
            continue
        if last_end < 0 or text[last_end:start].strip():  # not right after another heading
            headings.append(start)
        last_end = end
    return [keep(headings),
            keep([m.end() for m in _PARAGRAPH.finditer(text)]),
            keep([m.end() for m in _LINE.finditer(text)]),
            keep([m.end() for m in _SENTENCE.finditer(text)]),
            keep([m.start() for m in _SPACE.finditer(text)]),
            (cut_toks, cut_chars)]


def _ends_blank(before: str) -> bool:
    """Whether ``before`` (text up to a line start) ends with a blank line."""
    tail = before[-200:].rstrip(" \t")
    return tail.endswith("\n") and tail[:-1].rstrip(" \t\r").endswith("\n")


def _plan(levels, total: int, budget: int, n: int) -> tuple[list[int], int]:
    """Char positions of n - 1 cuts and the worst level index they use (-1 with none)."""
    cuts, worst, prev = [], -1, 0.0
    for k in range(1, n):
        left = n - k  # parts after this cut
        lo = max(prev + 1e-9, total - left * budget)
        hi = min(prev + budget, total)
        aim = prev + (total - prev) / (left + 1)
        slack = SLACK * total / n
        level, best = _pick(levels, max(lo, aim - slack), min(hi, aim + slack), aim)
        if best is None:  # nothing near the aim: anywhere within the limits, else after prev
            level = len(levels) - 1  # (multi-token characters; the verify step re-splits)
            best = _nearest(levels[-1][0], lo, hi, aim)
            if best is None:
                best = _nearest(levels[-1][0], prev + 1e-9, total, aim)
            if best is None:
                break
        toks, chars = levels[level]
        cuts.append(int(chars[best]))
        prev = float(toks[best])
        worst = max(worst, level)
    return cuts, worst


def _pick(levels, lo: float, hi: float, aim: float) -> tuple[int, int | None]:
    """(level, index) of the best level's cut in [lo, hi] nearest ``aim``; index None if none."""
    for level, (toks, _) in enumerate(levels):
        best = _nearest(toks, lo, hi, aim)
        if best is not None:
            return level, best
    return len(levels) - 1, None


def _nearest(toks: np.ndarray, lo: float, hi: float, aim: float) -> int | None:
    """Index into ascending ``toks`` of the value in [lo, hi] nearest ``aim``, or None."""
    i, j = np.searchsorted(toks, lo, "left"), np.searchsorted(toks, hi, "right")
    if i >= j:
        return None
    k = int(np.clip(np.searchsorted(toks, aim), i, j - 1))
    if k > i and abs(toks[k - 1] - aim) <= abs(toks[k] - aim):
        k -= 1
    return k
