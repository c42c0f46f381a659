"""The decode loop: one loop for one reply and for a batch, eager or through CUDA graphs.

After prefill, ``decode`` steps B sessions together through the engine's ``GraphRunner`` (each
step feeds one token per live session and samples the next on the device) and yields
``(row, token)`` pairs. Stop rules, presence penalty (in the runner) and page growth are here
once, for every mode:

- a reply ends on a stop id (not yielded; unless ``ignore_eos``), after ``max_new_tokens``, or when
  its session's context is full (prompt + reply = ctx tokens; the last token is not fed); the
  others in the batch go on, its row becomes padding;
- the GPU runs one step ahead of the host: the step that feeds a token is enqueued before the host
  reads that token, so the GPU decodes while the host checks, yields and renders it. A step that
  fed a stop id is dropped from that session's cache afterwards; no step is enqueued for a token
  that must be its reply's last (``max_new_tokens``, a full context);
- a step is run ahead only if the pages it may need are free; otherwise the host reads the tokens
  first, so that a stop id never fails for want of a page;
- with ``speculate``, a step in which some sequence drafts is a verify step
  (``infer/verify_step.py``): the host reads the tokens first (the drafts continue them), feeds
  each sequence's token and its drafts, and the accepted drafts are yielded with the token. When
  the drafts stop paying (``DraftControl``'s cool-down) or none is found, steps run ahead again.
  Greedy replies judge whether drafts pay against the measured wall time of both kinds of step
  (``StepCost``, kept per batch size on the runner; the first greedy speculative reply of a batch
  size runs plain steps until one has been timed). NOTE: sampled replies never do: their tokens
  depend on where drafts were verified, and a seed must give the same reply whatever the clock
  says, so their drafting depends only on acceptance;
- a token of -1 (``sampling.NON_FINITE``: NaN or inf in its logits) raises ``NonFiniteLogits``.

NOTE: invariant: ``session.cached_ids`` are exactly the tokens whose K/V are stored (enqueued) in
the session's pages. Ids are appended only once the step that stores them is enqueued, and all of
a step's bookkeeping is done before its tokens are yielded, so closing the generator (Ctrl-C in
the CLI) at any point leaves every session consistent. A yielded token is already fed, so it is
cached unless it was its reply's last.

Design after nano-vllm's ``LLMEngine.step`` (one loop) and nanochat's ``Engine.generate``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import torch

from infer.errors import NonFiniteLogits
from infer.meta import grow_pages
from infer.sampling import NON_FINITE, sample
from infer.sampling_params import SamplingParams
from infer.speculate import StepCost
from infer.stats import GenerationStats
from infer.verify_step import Drafter, draft_budget, verify

if TYPE_CHECKING:
    from infer.engine import Engine
    from infer.session import Session


def decode(engine: Engine, sessions: Sequence[Session], hidden: Sequence[torch.Tensor],
           sp: SamplingParams, stats: Sequence[GenerationStats], t0: float,
           speculate: bool = False) -> Iterator[tuple[int, int]]:
    """Decode replies for ``sessions`` (prefilled), yielding ``(row, token)`` as they arrive.

    Args:
        engine: the sessions' engine.
        sessions: 1..``engine.max_batch`` distinct sessions, each with its prompt cached.
        hidden: per session, its prompt's last hidden state ([1, H] model dtype), whose logits
            give the reply's first token.
        sp: the sampling parameters of every reply.
        stats: per session, the ``GenerationStats`` to update (its ``stop_reason`` is final once
            the generator is exhausted or closed).
        t0: ``time.perf_counter()`` when the replies began (for ``ttft_s``).
        speculate: draft by prompt lookup and verify (off with a presence penalty, and where
            the runner has no room for more rows than sequences).

    Raises:
        RuntimeError: another reply began on the engine's runner (``check_ticket``).
        NonFiniteLogits: a token's logits held NaN or inf.
        OutOfPages: the pool has no page for a token that must be fed.
    """
    runner = engine.graph_runner()
    pool, ctx = engine.pool, engine.ctx
    stop_ids = set() if sp.ignore_eos else set(engine.stop_ids)
    n = len(sessions)
    spec = speculate and not sp.presence_penalty and runner.max_rows > n
    drafters = [Drafter() for _ in range(n)] if spec else []
    cost = runner.step_costs.setdefault(n, StepCost()) if spec and sp.greedy else None
    streak, last_now = 0, 0.0  # steps run ahead in a row before this one; the last arrival
    try:
        ticket, gen, seen = runner.begin(sp, [s._pages for s in sessions])
        with torch.inference_mode():  # the first tokens: eager, with the runner's state
            logits = engine.model.compute_logits(torch.cat(list(hidden)))  # float32 [n, vocab]
            tok_t = sample(logits, sp, gen, presence=seen, vocab_limit=runner.vocab_limit)
        host: list[int] | None = None  # the tokens to yield, when already on the host
        live = list(range(n))
        synchronous = runner.device.type != "cuda"  # a launched step has run when it returns
        while live:
            runner.check_ticket(ticket)  # tok_t lives in the runner's buffers
            pos = {i: sessions[i].num_cached for i in live}
            # a step for a row's token is needed only if another token may follow it: prompt +
            # reply <= ctx, so the token at position pos is the last when pos + 1 == ctx
            feed = {i for i in live if pos[i] + 1 < ctx and (
                sp.max_new_tokens is None or stats[i].new_tokens + 1 < sp.max_new_tokens)}
            drafting = spec and len(feed) < runner.max_rows and \
                (cost is None or cost.plain_s is not None) and \
                any(drafters[i].control.cooldown_left == 0 for i in feed)
            need = sum(max(0, pool.pages_for(pos[i] + 1) - len(sessions[i]._pages))
                       for i in feed)
            ahead = bool(feed) and not drafting and need <= pool.num_free_pages
            fed_t = tok_t if host is None else host
            if host is None:
                runner.io.tokens_to_host(tok_t)  # before the next step overwrites them
            # On a GPU the step ahead is queued behind the tokens read below; on the CPU it runs
            # now, so the tokens' arrival is timed before it (else it counts in the time to first
            # token and the decode rate misses a step)
            early = time.perf_counter() if ahead and synchronous else None
            if ahead:
                nxt_t = _feed(runner, ticket, fed_t, sessions, pos, feed, n, pool)
                for i in feed if spec else ():
                    drafters[i].control.skip(1)
            toks = host if host is not None else runner.io.host_tokens(n)  # the one sync per step
            host = None
            if any(toks[i] == NON_FINITE for i in live):
                bad = sum(toks[i] == NON_FINITE for i in live)
                raise NonFiniteLogits(f"{bad} of {len(live)} replies, at token "
                                      f"{min(stats[i].new_tokens for i in live) + 1}")
            now = early if early is not None else time.perf_counter()
            if cost is not None and streak >= 2:  # ran while the previous step did: plain
                cost.plain(now - last_now)
            streak, last_now = (streak + 1 if ahead else 0), now
            stopped = set()
            for i in live:
                stats[i].token_arrived(t0, now)
                if toks[i] in stop_ids:
                    stopped.add(i)
                    if ahead and i in feed:
                        sessions[i]._truncate(pos[i])  # the step that fed the stop id
                    stats[i].stop_reason = "stop"
            feed -= stopped
            accepted: dict[int, list[int]] = {}
            if feed and not ahead and drafting:
                host, accepted = _verify(runner, ticket, pool, sessions, drafters, toks, feed,
                                         stats, sp, ctx, n, cost)
            elif feed and not ahead:  # no page was free: raises OutOfPages if still none
                nxt_t = _feed(runner, ticket, fed_t, sessions, pos, feed, n, pool)
            out, ends = [], {}
            for i in live:
                if i in stopped:
                    continue
                if i in feed:
                    sessions[i]._ids.append(toks[i])
                else:
                    limit = sp.max_new_tokens is not None and \
                        stats[i].new_tokens + 1 >= sp.max_new_tokens
                    stats[i].stop_reason = "length" if limit else "context"
                stats[i].new_tokens += 1
                out.append((i, toks[i]))
                for d in accepted.get(i, ()):
                    if d in stop_ids:  # a drafted stop id the target agreed with
                        ends[i] = "stop"  # set as the row's last token is yielded
                        feed.discard(i)
                        break
                    sessions[i]._ids.append(d)
                    stats[i].token_arrived(t0)
                    stats[i].new_tokens += 1
                    stats[i].accepted += 1
                    out.append((i, d))
            if spec:  # a finished reply gives back the pages of its rejected drafts
                for i in live:
                    if i not in feed:
                        sessions[i]._truncate(sessions[i].num_cached)
            live = [i for i in live if i in feed]
            if live and host is None:
                tok_t = nxt_t
            last = {i: k for k, (i, _) in enumerate(out)}
            for k, (i, tok) in enumerate(out):
                if last[i] == k and i in ends:
                    stats[i].stop_reason = ends[i]
                yield i, tok
    finally:
        for st in stats:
            if not st.stop_reason:
                st.stop_reason = "interrupted"


def _feed(runner, ticket: int, tokens, sessions: Sequence[Session], pos: dict[int, int],
          feed: set[int], n: int, pool) -> torch.Tensor:
    """Grow the feeding rows' pages and enqueue the step that feeds ``tokens`` (a device tensor
    or host ints, one per row) to them (rows not in ``feed`` are padding). Returns the step's
    sampled tokens (device)."""
    for i in sorted(feed):
        grow_pages(pool, sessions[i]._pages, pos[i] + 1)
    rows = [(sessions[i]._pages, pos[i]) if i in feed else None for i in range(n)]
    return runner.step(ticket, tokens, rows)


def _verify(runner, ticket: int, pool, sessions: Sequence[Session], drafters: list[Drafter],
            toks: list[int], feed: set[int], stats: Sequence[GenerationStats],
            sp: SamplingParams, ctx: int, n: int, cost: StepCost | None
            ) -> tuple[list[int], dict[int, list[int]]]:
    """Draft for the rows in ``feed`` and run their verify step (rows that draft nothing feed
    their token alone), timed into ``cost`` (if any) when some row drafted. Returns the next
    tokens per row (host; -1 where not fed) and, per row, the accepted drafts (the caller appends
    and yields them after the row's token)."""
    t_start = time.perf_counter()
    budget = runner.max_rows - len(feed)
    free = pool.num_free_pages  # drafts take only pages the tokens themselves do not need
    free -= sum(max(0, pool.pages_for(sessions[i].num_cached + 1) - len(sessions[i]._pages))
                for i in feed)
    plan, wanted = {}, {}
    for i in sorted(feed):
        s, ctl = sessions[i], drafters[i].control
        room = draft_budget(s.num_cached, stats[i].new_tokens + 1, ctx, sp.max_new_tokens)
        held = max(len(s._pages), pool.pages_for(s.num_cached + 1))
        room = min(room, (held + max(0, free)) * pool.page_size - s.num_cached - 1)
        wanted[i] = ctl.next_k(max(0, min(room, budget)))
        d = drafters[i].propose(s._ids, toks[i], wanted[i])
        budget -= len(d)
        free -= max(0, pool.pages_for(s.num_cached + 1 + len(d)) - held)
        plan[i] = (toks[i], d)
    results = verify(runner, ticket, pool, sessions, plan, sp.greedy)
    if cost is not None and any(r.drafted for r in results.values()):
        cost.verify(time.perf_counter() - t_start)
    nxt = [NON_FINITE] * n
    accepted = {}
    for i, r in results.items():
        nxt[i] = r.next_token
        accepted[i] = r.tokens
        if wanted[i] == 0:  # cooling down (or no room): a plain step for this row
            drafters[i].control.skip(1)
            continue
        if r.drafted:
            drafters[i].control.update(r.drafted, r.accepted,
                                       cost=None if cost is None else cost.ratio)
        else:
            drafters[i].control.no_match()  # counts as a step that accepted nothing
        stats[i].drafted += r.drafted  # accepted: counted as the drafts are kept (the caller)
        stats[i].verify_steps += int(r.drafted > 0)
    return nxt, accepted
