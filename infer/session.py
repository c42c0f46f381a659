"""A session: one conversation's pages of the engine's KV pool and the ids whose K/V they hold.

``Session.generate(prompt_ids, sampling)`` is a token generator:

1. prefix reuse: keep the longest common prefix of the cached ids and the prompt (at most
   ``len(prompt) - 1`` tokens, so at least one token is prefilled and gives logits); drop the rest;
2. chunked prefill of the remaining prompt, ``config.chunk`` tokens per step, each chunk attending
   to everything cached before it; only the last row of hidden states goes to the lm_head;
3. decode through the engine's one decode loop (``infer/decode_loop.py``), which also serves a
   batch of sessions (``Engine.generate_batch``).

NOTE: invariant: ``cached_ids`` are exactly the tokens whose K/V are stored in the session's
pages, at positions ``0 .. len(cached_ids) - 1`` (enqueued on the device: later work on the stream
runs after them). Ids are appended only once the step that stores them is enqueued.

Design after nano-vllm's ``Sequence`` / ``BlockManager`` and nanochat's ``Engine.generate``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

from infer.fits import check_fits
from infer.meta import build_meta, grow_pages, to_device
from infer.sampling_params import SamplingParams
from infer.stats import GenerationStats

if TYPE_CHECKING:
    from collections.abc import Iterator

    from infer.engine import Engine

PrefillCallback = Callable[[int, int], None]  # (tokens prefilled so far, tokens to prefill)

# Prompt tokens enqueued before the decode step's capture (when it is new): enough prefill work
# to keep the device busy through a capture's host work (about 0.4-0.6 s with Triton's cache
# warm; 16k tokens of an 8B's prefill take about 0.7 s on an H200), few enough that Ctrl-C is
# not left waiting long for the chunks already enqueued.
CAPTURE_AHEAD_TOKENS = 16384


class Session:
    """One conversation: owns pages of the engine's pool and the ids whose K/V they hold.

    Attributes:
        stats: ``GenerationStats`` of the latest reply (None before the first).
    """

    def __init__(self, engine: Engine):
        self.engine = engine
        self._pages: list[int] = []
        self._ids: list[int] = []
        self.stats: GenerationStats | None = None

    @property
    def cached_ids(self) -> list[int]:
        """Token ids whose K/V are stored, position order (a copy)."""
        return list(self._ids)

    @property
    def num_cached(self) -> int:
        return len(self._ids)

    @property
    def num_pages(self) -> int:
        """Pages of the pool this session holds."""
        return len(self._pages)

    def reset(self) -> None:
        """Forget the conversation and return its pages to the pool."""
        self._truncate(0)

    close = reset

    def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams | None = None, *,
                 on_prefill: PrefillCallback | None = None,
                 speculate: bool = False) -> Iterator[int]:
        """Reply to ``prompt_ids`` (the whole conversation so far), yielding new token ids.

        Args:
            prompt_ids: the full token sequence to continue (all turns, rendered); its common
                prefix with ``cached_ids`` is reused, the rest prefilled.
            sampling: None means greedy (temperature 0).
            on_prefill: called as ``on_prefill(done, total)`` with the prompt tokens prefilled so
                far and the number to prefill (reused ones excluded): once with ``done = 0``
                before the first chunk, then for each chunk once it has completed on the device
                (the host keeps one chunk in flight; the last is reported when prefill ends).
            speculate: prompt-lookup speculative decoding (``Engine.generate_batch``); a greedy
                reply is the same token sequence with it as without.

        Returns:
            An iterator of token ids (host ints). Stop ids are not yielded. ``self.stats`` is
            updated while it runs and final once it is exhausted or closed.

        Raises:
            ValueError (at call time): an empty prompt, or one that does not leave room for a
                reply (``len(prompt_ids) + 1 > ctx``; the message gives both counts).
        """
        prompt = self.check_prompt(prompt_ids)
        requests = [(self, prompt)]
        sp = sampling or SamplingParams(temperature=0.0)
        cb = None if on_prefill is None else (lambda _row, done, total: on_prefill(done, total))
        return (tok for _, tok in self.engine.run_batch(requests, sp, cb, speculate))

    def check_prompt(self, prompt_ids: Sequence[int]) -> list[int]:
        """``prompt_ids`` as a list of ints, checked to leave room for a reply.

        Raises:
            ValueError: an empty prompt, or ``len(prompt_ids) + 1 > ctx`` (``check_fits``).
        """
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise ValueError("the prompt is empty: give at least one token")
        check_fits(len(prompt), self.engine.ctx, max_ctx=self.engine.context.max_ctx)
        return prompt

    # ------------------------------------------------------------------ engine internals

    def _prefill(self, prompt: list[int], on_prefill: PrefillCallback | None,
                 on_enqueued: Callable[[], None] | None = None
                 ) -> tuple[torch.Tensor, GenerationStats]:
        """Reuse the cached prefix of ``prompt``, prefill the rest in chunks; returns the last
        prompt token's hidden state [1, H] and the reply's fresh ``GenerationStats``.

        On CUDA the host runs ahead of the device: ``on_enqueued()`` (the engine captures the
        decode step there) is called once ``CAPTURE_AHEAD_TOKENS`` prompt tokens (or all) are
        enqueued and before the host waits for any, so the capture's host work runs while the
        device works through them; after it at most one chunk is in flight beyond the one
        reported (so Ctrl-C stops within about a chunk). ``on_prefill`` hears of each chunk once
        it has completed (elsewhere: once its forward returns), in order; until the capture has
        run, the reports wait."""
        eng = self.engine
        reuse, limit = 0, min(len(self._ids), len(prompt) - 1)
        while reuse < limit and self._ids[reuse] == prompt[reuse]:
            reuse += 1
        self._truncate(reuse)
        stats = self.stats = GenerationStats(prompt_tokens=len(prompt), reused_tokens=reuse)
        chunk, total = eng.config.chunk, len(prompt) - reuse
        if on_prefill is not None:
            on_prefill(0, total)
        pending: list[tuple[torch.cuda.Event | None, int]] = []  # chunks enqueued, not reported
        for s in range(reuse, len(prompt), chunk):
            hidden = self._forward(prompt[s:s + chunk])
            done = stats.prefill_tokens = min(s + chunk, len(prompt)) - reuse
            event = chunk_event(eng.device)
            pending.append((event, done))
            if on_enqueued is not None and (done >= CAPTURE_AHEAD_TOKENS or done == total):
                on_enqueued()
                on_enqueued = None
            # report a chunk once it has completed, keeping the next one in flight (before the
            # capture: all of them; at the end: none, when someone is told)
            in_flight = len(pending) if on_enqueued is not None else 1
            while pending and (len(pending) > in_flight or event is None or
                               (done == total and on_prefill is not None)):
                ev, n = pending.pop(0)
                if ev is not None:
                    ev.synchronize()
                if on_prefill is not None:
                    on_prefill(n, total)
        return hidden, stats

    def _truncate(self, n: int) -> None:
        """Keep the first ``n`` cached positions; free the pages past them.

        Ids go first, then the pages leave the session, then they go back to the pool: a Ctrl-C
        in between can leave the session owning a page it no longer needs (the next truncation
        frees it) or leak pages, never list positions without a page or leave one page both
        free and owned (a later step would share it).
        """
        keep = self.engine.pool.pages_for(n)
        del self._ids[n:]
        tail = self._pages[keep:]
        del self._pages[keep:]
        self.engine.pool.free(tail)

    def _forward(self, ids: list[int]) -> torch.Tensor:
        """Run the model on new tokens after the cached ones (a prefill chunk); return the last
        row's hidden state [1, H]. Extends ``cached_ids`` only once the step is enqueued."""
        eng = self.engine
        start = len(self._ids)
        grow_pages(eng.pool, self._pages, start + len(ids))
        meta = build_meta([(self._pages, start, len(ids))], eng.config.page_size, eng.device)
        ids_t = to_device(ids, torch.int64, eng.device)
        with torch.inference_mode():
            hidden = eng.model.forward(ids_t, meta.positions, eng.attn, meta)
            last = hidden[-1:]
        self._ids.extend(ids)
        return last


def chunk_event(device: torch.device) -> torch.cuda.Event | None:
    """An event recorded after the chunk just enqueued (on CUDA; None elsewhere, where a chunk
    has run when its forward returns)."""
    if device.type != "cuda":
        return None
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    return event
