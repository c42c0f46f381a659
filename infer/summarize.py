"""Summaries of texts longer than the context: split, summarize the parts together, combine.

A text whose summary prompt and reply fit in the context is summarized in one reply
(``fits_whole``); a longer one is split into parts at chapter, paragraph or sentence boundaries
(``split``), each part small enough that its prompt plus its reply budget fits (``part_limit``:
the prompts and the context budget they leave are ``infer/summary_prompts.py``'s).

``Summarizer.run(text)`` then does the map-reduce (as LangChain's map-reduce summarization chain
and Wu et al. 2021, "Recursively Summarizing Books with Human Feedback", do):

1. map: every part's summary, the parts decoding as batches of ``engine.max_batch`` sequences
   through the same kernels and CUDA graphs (``Engine.generate_batch``); prefill one part at a
   time;
2. reduce: the part summaries, in order and labelled, become the text of one combining prompt;
   while that prompt does not fit, consecutive summaries are grouped into prompts that do, and
   each group is summarized (batched, like the map), recursively;
3. the returned ids are the last combining prompt, for the caller to stream as the final reply.

Every character of the text is in exactly one part of the first level. A summary is reused whole
unless its text, encoded again, is longer than the plan's share for it (a reply's tokens need not
be its text's tokenization): then it is cut to its share (``labelled_summaries``) and the tokens
cut are recorded (``PartSummary.cut_tokens``). So two summaries always fit one group and every
level has fewer summaries than the one below; a level that would not is an error, never a loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from infer.summary_prompts import (
    COMBINE_PROMPT,
    GROUP_PROMPT,
    PART_PROMPT,
    SEPARATOR_TOKENS,
    SUMMARY_PROMPT,
    check_plan,
    labelled_summaries,
    part_limit,
    template_overhead,
)
from infer.thinking import prompt_opens_thinking, strip_thinking, thinking_unfinished

if TYPE_CHECKING:  # torch, through infer.sampling_params: `infer --help` imports this module
    from infer.sampling_params import SamplingParams

PART_TOKENS = 512  # the reply budget of a part's summary when --part-tokens is not given

Splitter = Callable[[str, int], list[str]]  # (text, max tokens per part) -> parts, joined == text


@dataclass
class PartSummary:
    """One summarized part of one level.

    Attributes:
        level: 0 for parts of the text, 1.. for groups of the level below's summaries.
        index, count: which part of how many at its level (0-based index).
        chars: [start, end) character range of its text within the level's input (level 0: the
            file's text; above: the joined summaries of the level below).
        tokens: [start, end) of its text in tokens, counting the parts before it.
        prompt_tokens, new_tokens: its prompt's length and its reply's.
        stop_reason: as ``GenerationStats.stop_reason``.
        summary: the reply's text (the thinking, if any, removed; empty when the reply was cut
            inside its thinking).
        drafted, accepted: speculative drafts of its reply verified and accepted.
        cut_tokens: tokens cut from the end of its labelled summary when the next combining
            prompt reused it (``labelled_summaries``: its text encodes to more tokens than its
            share of the plan); 0: reused whole, or not reused (yet).
        thinking_unfinished: the reply ended inside its thinking (``--think`` with too few
            tokens a part): nothing of it is passed on.
    """

    level: int
    index: int
    count: int
    chars: tuple[int, int]
    tokens: tuple[int, int]
    prompt_tokens: int
    new_tokens: int
    stop_reason: str
    summary: str
    drafted: int = 0
    accepted: int = 0
    cut_tokens: int = 0
    thinking_unfinished: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class StageTimes:
    """Seconds per stage of a map-reduce (host clock).

    Attributes:
        map_prefill_s, map_decode_s: prefill of all the text's parts; their batched decode.
        reduce_s: summarizing groups of summaries (levels above the first), if any.
    """

    map_prefill_s: float = 0.0
    map_decode_s: float = 0.0
    reduce_s: float = 0.0


@dataclass
class Summarizer:
    """Plans and runs a map-reduce summary on one engine.

    Args:
        engine: an ``Engine``; its ``max_batch`` sets how many parts decode together.
        tokenizer: a ``Qwen3Tokenizer`` (``encode``, ``decode``, ``chat_ids``).
        split: ``split(text, max_tokens) -> parts`` whose join is the text and whose every
            part has at most ``max_tokens`` tokens.
        sampling: for every reply (each part's ``max_new_tokens`` is ``part_tokens``).
        part_tokens: reply budget of each part and group summary (tokens).
        final_tokens: reply budget of the final summary (None: until a stop id; the plan then
            keeps ``part_tokens`` free for it).
        think: Qwen3 thinking mode for every reply.
        speculate: prompt-lookup speculative decoding for the parts' replies
            (``Engine.generate_batch``).
    """

    engine: object
    tokenizer: object
    split: Splitter
    sampling: SamplingParams
    part_tokens: int = PART_TOKENS
    final_tokens: int | None = 1024
    think: bool = False
    speculate: bool = False
    parts: list[PartSummary] = field(default_factory=list)
    times: StageTimes = field(default_factory=StageTimes)

    # ------------------------------------------------------------------ prompts

    def prompt_ids(self, template: str, text: str, **fields) -> list[int]:
        """The chat ids of ``template`` filled with ``text`` (and ``fields``)."""
        content = template.format(text=text, **fields)
        return self.tokenizer.chat_ids([{"role": "user", "content": content}],
                                       enable_thinking=self.think)

    def whole_prompt(self, text: str) -> list[int]:
        """The one-reply summary prompt of ``text``."""
        return self.prompt_ids(SUMMARY_PROMPT, text)

    def _overhead(self, template: str) -> int:
        return template_overhead(self.tokenizer, template, self.think)

    def _final_budget(self) -> int:
        return self.final_tokens or self.part_tokens

    def part_limit(self) -> int:
        """``part_limit`` for this engine's context (tokens of text per part).

        Raises:
            ValueError: as ``part_limit``.
        """
        return part_limit(self.tokenizer, self.engine.ctx, self.part_tokens, self.think)

    def fits_whole(self, prompt: Sequence[int]) -> bool:
        """Whether ``prompt`` plus the final reply budget fits in the context."""
        return len(prompt) + self._final_budget() <= self.engine.ctx

    # ------------------------------------------------------------------ map and reduce

    def run(self, text: str, *, pieces: list[str] | None = None,
            on_part: Callable[[PartSummary], None] | None = None,
            on_prefill: Callable[[int, int, int, int], None] | None = None) -> list[int]:
        """Summarize the parts of ``text`` and combine them (see the module docstring).

        Args:
            text: a text too long for one reply.
            pieces: its parts, if already split (``split(text, part_limit())``).
            on_part: called with each ``PartSummary`` as it finishes.
            on_prefill: called as ``on_prefill(level, index, done, total)`` during each part's
                prefill (``Session.generate``'s ``on_prefill``).

        Returns:
            The final combining prompt's ids (stream it as the final reply).

        Raises:
            ValueError: as ``check_plan`` (before any work); a reduce level that would not
                lower the number of summaries (a guard: ``labelled_summaries`` makes two fit).
        """
        limit = check_plan(self.tokenizer, self.engine.ctx, self.part_tokens, self.final_tokens,
                           self.think)
        pieces = pieces if pieces is not None else self.split(text, limit)
        n = len(pieces)
        prompts = [self.prompt_ids(PART_PROMPT, p, k=k + 1, n=n) for k, p in enumerate(pieces)]
        summaries = self._map(0, pieces, prompts, on_part, on_prefill)
        level = 0
        while True:
            labelled = self._labelled(level, summaries)
            final = self.prompt_ids(COMBINE_PROMPT, "\n\n".join(labelled))
            if self.fits_whole(final) or len(summaries) == 1:
                return final
            level += 1
            t0 = time.perf_counter()
            groups = self._group(labelled)
            m = len(summaries)
            if len(groups) >= m:  # NOTE: unreachable while two summaries fit a group
                raise ValueError(f"summarizing in parts would not end: the {m} summaries of "
                                 f"level {level - 1} take a combining prompt each in the context "
                                 f"of {self.engine.ctx:,} tokens with --part-tokens "
                                 f"{self.part_tokens:,}: raise --ctx or lower --part-tokens")
            prompts, texts, first = [], [], 0
            for g in groups:
                texts.append("\n\n".join(g))
                prompts.append(self.prompt_ids(GROUP_PROMPT, texts[-1], first=first + 1,
                                               last=first + len(g), n=m))
                first += len(g)
            try:
                summaries = self._map(level, texts, prompts, on_part, on_prefill, sep="\n\n")
            finally:  # an interrupted level's time counts too
                self.times.reduce_s += time.perf_counter() - t0

    def _labelled(self, level: int, summaries: list[str]) -> list[str]:
        """``summaries`` of ``level`` labelled for a combining prompt, each within its share of
        the plan (``labelled_summaries``); the tokens cut go to their ``PartSummary``."""
        labelled, cut = labelled_summaries(self.tokenizer, summaries, self.part_tokens)
        parts = {p.index: p for p in self.parts if p.level == level}
        for i, n in enumerate(cut):
            if i in parts:
                parts[i].cut_tokens = n
        return labelled

    def _group(self, labelled: list[str]) -> list[list[str]]:
        """Consecutive summaries in groups whose combining prompt (+ reply) fits, each of at
        least two summaries but maybe the last (``part_limit`` guarantees two fit, as each is
        within its share: ``labelled_summaries``), so every level shrinks."""
        room = self.engine.ctx - self._overhead(GROUP_PROMPT) - self.part_tokens
        groups: list[list[str]] = [[]]
        used = 0
        for s, n in zip(labelled, self.tokenizer.count_tokens(labelled), strict=True):
            size = n + SEPARATOR_TOKENS
            if groups[-1] and used + size > room:
                groups.append([])
                used = 0
            groups[-1].append(s)
            used += size
        if len(groups) > 1 and len(groups[-1]) == 1:  # a lone tail joins its neighbour's group
            groups[-2].extend(groups.pop())
            if len(self.tokenizer.encode("\n\n".join(groups[-1]))) + 8 > room:
                groups.append(groups[-1][-1:])
                del groups[-2][-1]
        return groups

    def _map(self, level: int, texts: list[str], prompts: list[list[int]], on_part,
             on_prefill, sep: str = "") -> list[str]:
        """Summarize ``prompts`` in batches of ``engine.max_batch``; returns the summaries."""
        eng = self.engine
        sp = self.sampling.replace(max_new_tokens=self.part_tokens)
        n, width = len(prompts), eng.max_batch
        sessions = [eng.new_session() for _ in range(min(width, n))]
        out: list[str] = [""] * n
        char0 = tok0 = 0
        spans = []
        for t, k in zip(texts, self.tokenizer.count_tokens(texts), strict=True):
            spans.append(((char0, char0 + len(t)), (tok0, tok0 + k)))
            char0, tok0 = char0 + len(t) + len(sep), tok0 + k
        try:
            for start in range(0, n, width):
                group = list(range(start, min(n, start + width)))
                for s in sessions:
                    s.reset()
                reqs = [(sessions[j], prompts[i]) for j, i in enumerate(group)]
                cb = None if on_prefill is None else \
                    (lambda j, done, total, g=group: on_prefill(level, g[j], done, total))
                toks: list[list[int]] = [[] for _ in group]
                finished: set[int] = set()
                t0 = time.perf_counter()
                first = None
                try:
                    for j, tok in eng.generate_batch(reqs, sp, on_prefill=cb,
                                                       speculate=self.speculate):
                        if first is None:
                            first = time.perf_counter()
                        toks[j].append(tok)
                        if sessions[j].stats.stop_reason:  # its last token
                            finished.add(j)
                            self._done(level, group[j], n, spans, prompts, toks[j],
                                       sessions[j].stats, out, on_part)
                    for j in sorted(set(range(len(group))) - finished):  # ended on a stop id
                        self._done(level, group[j], n, spans, prompts, toks[j],
                                   sessions[j].stats, out, on_part)
                finally:  # an interrupted batch's time counts too
                    end = time.perf_counter()
                    first = first or end
                    if level == 0:
                        self.times.map_prefill_s += first - t0
                        self.times.map_decode_s += end - first
        finally:
            for s in sessions:
                s.reset()
        return out

    def _done(self, level, i, n, spans, prompts, toks, stats, out, on_part) -> None:
        raw = self.tokenizer.decode(toks, skip_special_tokens=True)
        # its thinking is not a summary: pass nothing on
        unfinished = thinking_unfinished(raw, prompt_opens_thinking(self.tokenizer, prompts[i]))
        out[i] = "" if unfinished else strip_thinking(raw)
        chars, tokens = spans[i]
        part = PartSummary(level, i, n, chars, tokens, len(prompts[i]), stats.new_tokens,
                           stats.stop_reason, out[i], stats.drafted, stats.accepted,
                           thinking_unfinished=unfinished)
        self.parts.append(part)
        if on_part is not None:
            on_part(part)

