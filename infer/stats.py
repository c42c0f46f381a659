"""Statistics of one reply, as the engine measures them (host clock, seconds)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass


@dataclass
class GenerationStats:
    """Statistics of one reply.

    Attributes:
        prompt_tokens: tokens in the prompt passed to ``generate``.
        reused_tokens: prompt tokens whose K/V were reused from the previous turn (not prefilled).
        prefill_tokens: prompt tokens prefilled so far (their K/V stored): ``prompt_tokens -
            reused_tokens`` once the prefill has finished, fewer when it was cut (Ctrl-C).
        new_tokens: tokens yielded (a stop token is not counted).
        ttft_s: seconds from the ``generate`` call's first step to the first sampled token on the
            host (prefill included; in a batch, every sequence's prefill).
        decode_s: seconds from the first sampled token to the last one.
        drafted, accepted: speculative decoding's drafts verified and accepted (0 without it).
        verify_steps: steps that verified at least one draft.
        stop_reason: ``"stop"`` (a stop id), ``"length"`` (max_new_tokens), ``"context"`` (the
            context is full), ``"interrupted"`` (the consumer closed the generator or an error
            was raised), or ``""`` while running.
    """

    prompt_tokens: int
    reused_tokens: int = 0
    prefill_tokens: int = 0
    new_tokens: int = 0
    ttft_s: float = 0.0
    decode_s: float = 0.0
    drafted: int = 0
    accepted: int = 0
    verify_steps: int = 0
    stop_reason: str = ""

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens per second after the first one (0.0 when fewer than 2 tokens were sampled)."""
        return (self.new_tokens - 1) / self.decode_s if self.new_tokens > 1 and self.decode_s > 0 \
            else 0.0

    @property
    def mean_accepted(self) -> float:
        """Drafts accepted per verify step (the step also gives one token of its own: it
        yields ``mean_accepted + 1`` tokens on average); 0.0 without verify steps."""
        return self.accepted / self.verify_steps if self.verify_steps else 0.0

    def to_dict(self) -> dict:
        """The fields and the derived ``decode_tokens_per_s`` and ``mean_accepted``, for
        ``--json`` (``prefill_tokens`` after ``stop_reason``, where ``--json`` has always had
        it). What was not measured is None rather than 0.0: ``ttft_s`` when no token arrived (a
        prefill cut by Ctrl-C), and ``decode_tokens_per_s`` with fewer than 2 tokens (no
        interval to measure)."""
        d = asdict(self)
        d["prefill_tokens"] = d.pop("prefill_tokens")
        d["decode_tokens_per_s"] = self.decode_tokens_per_s
        d["mean_accepted"] = self.mean_accepted
        if self.new_tokens == 0 and self.ttft_s == 0.0:
            d["ttft_s"] = None
        if self.new_tokens < 2:
            d["decode_tokens_per_s"] = None
        return d

    def token_arrived(self, t0: float, now: float | None = None) -> None:
        """Time a token that just reached the host: ``ttft_s`` for the reply's first, else
        ``decode_s`` since the first. ``t0`` and ``now`` are ``time.perf_counter()`` seconds
        (``now`` defaults to the current time)."""
        now = time.perf_counter() if now is None else now
        if self.new_tokens == 0 and self.ttft_s == 0.0:
            self.ttft_s = now - t0
        else:
            self.decode_s = now - t0 - self.ttft_s
