"""Speculative decoding's step: draft by prompt lookup, verify every draft in one runner step.

For each sequence of a batch that drafts this step (``infer/speculate.py``'s ``DraftControl``
says how many tokens, ``PromptLookup`` which), the step feeds its last token and its k drafts at
consecutive positions: k + 1 rows of the runner, each a one-query sequence of its own over the
sequence's pages (``infer/graphs.py``), so row t computes exactly what the one-row step at that
position would; the decode attention reads the sequence's keys once per slab of such rows
(``meta.plan_slabs``), not once per row. The longest prefix of drafts the target agrees with is
accepted:

- greedy: draft t is accepted while it equals the argmax of the row before it; the first row
  that disagrees gives the correction, and a step whose drafts all pass gives one more (the
  bonus token of the last row): the reply is the same token sequence as without speculation;
- sampling: the runner's verify sampler (``infer.sampling.verify_sample``) accepts a draft with
  the target's probability of it and otherwise draws from the target with the draft removed
  (Leviathan et al. 2023; Chen et al. 2023, for a deterministic draft): each token has the
  target's distribution.

All rows store their K/V; the rejected ones lie past the sequence's cached ids afterwards and are
overwritten by later steps (the pages stay with the session: a sequence's pages only grow during
a reply, as the runner's page table expects). Rows are budgeted so that no draft goes past the
context or the reply's token budget, and at most ``runner.max_rows`` rows run in one step.

Design after Saxena 2023 ("Prompt Lookup Decoding"), vLLM's n-gram speculator and its rejection
sampler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from infer.meta import grow_pages
from infer.speculate import DraftControl, PromptLookup, accept_greedy, accept_sampled

if TYPE_CHECKING:
    from infer.graphs import GraphRunner
    from infer.session import Session


@dataclass
class Drafter:
    """One sequence's drafting state for one reply: the n-gram index over its tokens (built on
    first use) and the adaptive draft length."""

    control: DraftControl = field(default_factory=DraftControl)
    lookup: PromptLookup | None = None
    known: int = 0  # cached ids given to ``lookup`` (then the token fed after them)

    def propose(self, cached: list[int], token: int, k: int) -> list[int]:
        """Up to ``k`` drafts continuing ``cached + [token]`` (the session's cached ids, which
        only grow during a reply, and the token to feed next: it is cached by the next call,
        so the index holds ``cached[:known] + [token]`` and takes only what came since)."""
        if self.lookup is None:
            self.lookup = PromptLookup(cached)
        else:
            self.lookup.extend(cached[self.known + 1:])
        self.lookup.extend([token])
        self.known = len(cached)
        return self.lookup.propose(k) if k > 0 else []


def draft_budget(num_cached: int, new_tokens: int, ctx: int, max_new: int | None) -> int:
    """The most drafts a sequence may verify after feeding its next token at ``num_cached``.

    The token fed sits at position ``num_cached`` and is the reply's ``new_tokens``-th; k drafts
    and the token sampled after them take positions up to ``num_cached + k + 1``, which must stay
    below ``ctx``, and count ``k + 1`` more tokens against ``max_new`` (None: no limit).
    """
    room = ctx - num_cached - 2
    if max_new is not None:
        room = min(room, max_new - new_tokens - 1)
    return max(0, room)


@dataclass
class VerifyResult:
    """Per drafting sequence: drafts proposed, drafts accepted, the accepted drafts (fed, to be
    cached) and the next token (sampled after them, not fed)."""

    drafted: int
    accepted: int
    tokens: list[int]
    next_token: int


def verify(runner: GraphRunner, ticket: int, pool, sessions: Sequence[Session],
           feed: dict[int, tuple[int, list[int]]], greedy: bool) -> dict[int, VerifyResult]:
    """Run one verify step for the sequences in ``feed`` and accept their drafts.

    Args:
        runner: the batch's runner.
        ticket: the batch's ticket.
        pool: the KV pool (pages for the drafts are allocated from it).
        sessions: the batch's sessions, by row index.
        feed: per row index, ``(token, drafts)``: the token to feed at the session's next
            position and the drafts to verify after it (possibly none).
        greedy: the batch samples greedily (drafts are checked on the host).

    Returns:
        Per row index in ``feed``, its ``VerifyResult``. The sessions' cached ids are not
        changed here (the caller appends the fed token and the accepted drafts).

    Raises:
        OutOfPages: the pool has no page for a draft (nothing is fed then).
    """
    order = sorted(feed)
    for i in order:
        s = sessions[i]
        grow_pages(pool, s._pages, s.num_cached + 1 + len(feed[i][1]))
    tokens, rows, drafts, spans = [], [], [], {}
    for i in order:
        tok, d = feed[i]
        s = sessions[i]
        spans[i] = len(rows)
        for t, fed in enumerate([tok, *d]):
            tokens.append(fed)
            rows.append((s._pages, s.num_cached + t))
            drafts.append(d[t] if t < len(d) else -1)
    out = runner.step(ticket, tokens, rows, drafts=None if greedy else drafts)
    runner.io.tokens_to_host(out)
    got = runner.io.host_tokens(len(rows), flags=not greedy)
    results = {}
    for i in order:
        d, at = feed[i][1], spans[i]
        if greedy:
            n, toks = accept_greedy(d, got[at:at + len(d) + 1])
        else:
            n, toks = accept_sampled(d, got[0][at:at + len(d) + 1], got[1][at:at + len(d) + 1])
        results[i] = VerifyResult(len(d), n, toks[:n], toks[n])
    return results
