"""Prompt-lookup speculative decoding on the host: the draft proposer, the adaptive draft length,
and the acceptance of a verified draft.

A verify step feeds ``1 + k`` rows to the target model: row 0 is the last accepted token, rows
1..k the draft. Row i's output is the target's token for the position after row i, so the reply
keeps the longest prefix of the draft the target agrees with, plus one token of the target's own:
the correction at the first disagreement, or a bonus token when all k were accepted::

    rows fed     [ last | d0 | d1 | d2 ]          k = 3 drafts
    targets      [  t0  | t1 | t2 | t3 ]          t_i: the target's token after row i
    d0 == t0, d1 != t1   ->  accepted 1, tokens [d0, t1]   (t1 is the correction)
    all equal            ->  accepted 3, tokens [d0, d1, d2, t3]   (t3 is the bonus token)

- ``PromptLookup`` proposes the draft: the tokens that followed the most recent earlier
  occurrence of the sequence's longest suffix n-gram (prompt lookup decoding, Saxena 2023,
  github.com/apoorvumang/prompt-lookup-decoding; vLLM's ``NgramProposer`` does the same search
  with KMP over the whole context at every step). Here the search is a dict per n-gram length,
  built once over the prompt and extended token by token, so a step costs O(max_ngram + k)
  whatever the context length.
- ``DraftControl`` picks the draft length per step and stops drafting while drafts keep failing
  to pay for their verify steps (``StepCost`` times both kinds of step).
- ``accept_greedy`` / ``accept_sampled`` turn a verify step's outputs (host lists) into the
  accepted count and the tokens to emit; ``infer/sampling.py``'s ``verify_sample`` computes the
  sampled rule's outputs on the device.
"""

from __future__ import annotations

from collections.abc import Sequence


class PromptLookup:
    """An incremental n-gram index over one token sequence (the prompt, then the reply).

    For each n in ``min_ngram..max_ngram`` a dict maps every n-gram that has a known follower to
    the position of its last token, the most recent occurrence winning. NOTE: invariant: an
    n-gram enters its dict only when the token after it is appended, so the sequence's own suffix
    is never a match of itself and every match has at least one known token after it.

    Args:
        tokens: the initial sequence (token ids; any iterable of ints).
        max_ngram: the longest suffix tried, >= min_ngram.
        min_ngram: the shortest suffix tried, >= 1.

    Raises:
        ValueError: ``min_ngram < 1`` or ``max_ngram < min_ngram``.

    Building the index over 131,072 tokens takes about 0.1 s on a CPU core (C-level ``zip``
    into dicts; the memory is a few tens of MB at max_ngram 3); ``extend`` costs
    O(max_ngram) per token and ``propose`` O(max_ngram + k).
    """

    def __init__(self, tokens: Sequence[int], max_ngram: int = 3, min_ngram: int = 1):
        if min_ngram < 1 or max_ngram < min_ngram:
            raise ValueError(f"the n-gram lengths must satisfy 1 <= min_ngram <= max_ngram, "
                             f"got min_ngram={min_ngram}, max_ngram={max_ngram}")
        self.min_ngram, self.max_ngram = min_ngram, max_ngram
        self._toks: list[int] = list(map(int, tokens))
        t, last = self._toks, len(self._toks) - 1  # n-grams ending before ``last`` have a follower
        self._index: dict[int, dict[tuple[int, ...], int]] = {}
        for n in range(min_ngram, max_ngram + 1):
            count = max(0, last - n + 1)  # n-grams ending at n-1 .. last-1
            grams = zip(*(t[i:i + count] for i in range(n)), strict=True)
            self._index[n] = dict(zip(grams, range(n - 1, n - 1 + count), strict=True))

    def __len__(self) -> int:
        return len(self._toks)

    def extend(self, tokens: Sequence[int]) -> None:
        """Append ``tokens`` (the accepted reply tokens) to the sequence and the index."""
        t = self._toks
        for tok in tokens:
            t.append(int(tok))
            end = len(t) - 2  # the n-grams ending here now have a follower
            for n, index in self._index.items():
                if end >= n - 1:
                    index[tuple(t[end - n + 1:end + 1])] = end

    def propose(self, k: int) -> list[int]:
        """The draft: up to ``k`` tokens that followed the most recent earlier occurrence of the
        longest suffix n-gram (n from ``max_ngram`` down to ``min_ngram``) that occurred before.

        A match whose continuation reaches the end of the sequence (a run that repeats with
        period ``p``: the suffix occurred ``p`` tokens earlier) drafts the period again, as if
        the run goes on: ``draft[i] = draft[i - p]`` past the known tokens. Returns [] when no
        suffix n-gram occurred earlier, or ``k == 0``.

        Raises:
            ValueError: ``k < 0``.
        """
        if k < 0:
            raise ValueError(f"the draft length must be >= 0, got {k}")
        t = self._toks
        if k == 0:
            return []
        for n in range(min(self.max_ngram, len(t)), self.min_ngram - 1, -1):
            end = self._index[n].get(tuple(t[len(t) - n:]))
            if end is not None:
                draft = t[end + 1:end + 1 + k]
                period = len(t) - 1 - end
                while len(draft) < k:  # the repeated run goes on
                    draft.append(draft[len(draft) - period])
                return draft
        return []


class DraftControl:
    """The adaptive draft length of one sequence, and when to stop drafting for a while.

    Policy (the idea of HF transformers' "heuristic" ``num_assistant_tokens_schedule``: grow the
    draft on full acceptance, shrink it on a rejection; plus a cool-down, so that a reply which
    never repeats its context, or repeats it too little to pay for the verify steps, pays for
    almost no verify steps):

    - the draft length starts at ``start_k``;
    - a verify step that accepted all its drafts doubles it, up to ``max_k``;
    - one that rejected a draft sets it to ``accepted + 1`` (at least 1);
    - after ``patience`` consecutive verify steps that did not pay (zero accepted, or, given the
      step's cost in plain steps, fewer tokens than plain steps would give), or, with the cost
      known, once the verify steps since the last cool-down have lost ``patience`` plain steps
      of time on balance (a verify step that costs 3 plain steps and yields 1 token loses 2),
      drafting stops for C plain steps (``cooldown_left``; the loop reports them with ``skip``),
      and the length restarts at ``start_k``. C starts at ``min_cooldown`` and doubles on each
      cool-down up to ``max_cooldown``; a verify step that pays resets it to ``min_cooldown``
      when all the timed verify steps so far have paid on balance (a reply whose drafts are
      now and then right, but not often enough to pay, keeps the long cool-downs).

    The counts a reply reports (drafted, accepted, verify steps) are ``GenerationStats``'s:
    the decode loop counts an accepted draft only once it is kept (not past a drafted stop id).

    Args:
        start_k: the first draft length, >= 1.
        max_k: the longest draft, >= start_k.
        patience: zero-acceptance verify steps in a row that start a cool-down, >= 1.
        min_cooldown, max_cooldown: the cool-down's plain steps, 1 <= min <= max.

    Raises:
        ValueError: a bound out of its range.
    """

    def __init__(self, start_k: int = 4, max_k: int = 15, patience: int = 3,
                 min_cooldown: int = 16, max_cooldown: int = 512):
        if not 1 <= start_k <= max_k:
            raise ValueError(f"need 1 <= start_k <= max_k, got start_k={start_k}, max_k={max_k}")
        if patience < 1 or not 1 <= min_cooldown <= max_cooldown:
            raise ValueError(f"need patience >= 1 and 1 <= min_cooldown <= max_cooldown, got "
                             f"{patience}, {min_cooldown}, {max_cooldown}")
        self.start_k, self.max_k, self.patience = start_k, max_k, patience
        self.min_cooldown, self.max_cooldown = min_cooldown, max_cooldown
        self.k = start_k  # the next draft length, before the caller's cap
        self.cooldown_left = 0  # plain steps to take before drafting again
        self._cooldown = min_cooldown  # the next cool-down's length
        self._misses = 0  # consecutive verify steps with zero accepted
        self._balance = 0.0  # tokens gained over plain steps since the last cool-down (timed)
        self._total = 0.0  # the same over every verify step so far

    def next_k(self, max_k: int) -> int:
        """The draft length for the next step, at most ``max_k`` (the caller's room: context,
        ``max_new_tokens``, the verify graph's rows); 0 = take a plain step."""
        if self.cooldown_left > 0:
            return 0
        return max(0, min(self.k, max_k))

    def update(self, drafted: int, accepted: int, cost: float | None = None) -> None:
        """Record a verify step that checked ``drafted`` draft tokens and kept ``accepted``.

        ``cost`` is the verify step's wall time in plain steps (``StepCost.ratio``), None when
        not known: the step pays when it yields at least as many tokens as plain steps would in
        its time (``1 + accepted >= cost``; without ``cost``: when it accepted a draft). A step
        that does not pay counts towards the cool-down as a zero-acceptance step does.

        Raises:
            ValueError: not ``0 <= accepted <= drafted`` with ``drafted >= 1``.
        """
        if drafted < 1 or not 0 <= accepted <= drafted:
            raise ValueError(f"need 0 <= accepted <= drafted and drafted >= 1, got "
                             f"drafted={drafted}, accepted={accepted}")
        if accepted == drafted:
            self.k = min(2 * self.k, self.max_k)
        else:
            self.k = max(1, accepted + 1)
        if cost is not None:
            gain = 1 + accepted - cost  # tokens over the plain steps of the same time
            self._balance += gain
            self._total += gain
        if (accepted > 0) if cost is None else (1 + accepted >= cost):
            self._misses = 0
            if self._total >= -self.patience:
                self._cooldown = self.min_cooldown
            return
        self._miss()

    def _miss(self) -> None:
        self._misses += 1
        if self._misses >= self.patience or self._balance <= -self.patience:
            self.cooldown_left = self._cooldown
            self._cooldown = min(2 * self._cooldown, self.max_cooldown)
            self._misses = 0
            self._balance = 0.0
            self.k = self.start_k

    def no_match(self) -> None:
        """Record a step that wanted to draft but found no match: it counts as a verify step
        with nothing accepted (towards the cool-down), not in the counters."""
        self._miss()

    def skip(self, steps: int) -> None:
        """Count ``steps`` plain (non-drafting) steps taken: they shorten the cool-down."""
        self.cooldown_left = max(0, self.cooldown_left - steps)


class StepCost:
    """Running wall-time estimates of one batch shape's plain decode step and verify step, so
    that ``DraftControl`` can tell whether drafting pays (a verify step of 16 rows may cost one
    plain step on a large model and three on a small, launch-bound one).

    Exponential moving averages (weight ``alpha`` for the newest sample; the first sample is
    taken as is), in seconds.

    Args:
        alpha: the newest sample's weight, in (0, 1].

    Raises:
        ValueError: ``alpha`` out of range.
    """

    def __init__(self, alpha: float = 0.2):
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self.plain_s: float | None = None
        self.verify_s: float | None = None

    def _ema(self, old: float | None, new: float) -> float:
        return new if old is None else old + self.alpha * (new - old)

    def plain(self, seconds: float) -> None:
        """A plain step's interval: between the tokens of two steps run ahead (the device's
        step time once the host keeps up)."""
        self.plain_s = self._ema(self.plain_s, seconds)

    def verify(self, seconds: float) -> None:
        """A verify step's wall time: drafting, the step, waiting for it, acceptance."""
        self.verify_s = self._ema(self.verify_s, seconds)

    @property
    def ratio(self) -> float | None:
        """A verify step's cost in plain steps, or None until both have been timed."""
        if self.plain_s is None or self.verify_s is None or self.plain_s <= 0.0:
            return None
        return self.verify_s / self.plain_s


def accept_greedy(drafts: Sequence[int], targets: Sequence[int]) -> tuple[int, list[int]]:
    """Greedy acceptance of a verified draft.

    Args:
        drafts: the k draft tokens (rows 1..k of the verify step).
        targets: the target's argmax after each row, at least k + 1 of them (row 0 = the last
            accepted token); entries past k + 1 (a graph bucket's padding) are ignored.

    Returns:
        ``(a, tokens)``: ``a`` the longest prefix with ``drafts[i] == targets[i]``, and
        ``tokens = drafts[:a] + [targets[a]]`` (the correction, or the bonus token when a == k).
        A ``NON_FINITE`` (-1) target ends the draft and is returned as the last token.
    """
    k = len(drafts)
    assert len(targets) > k, f"{len(targets)} targets for {k} drafts (need k + 1)"
    a = 0
    while a < k and drafts[a] == targets[a]:
        a += 1
    return a, [*drafts[:a], int(targets[a])]


def accept_sampled(drafts: Sequence[int], tokens_row: Sequence[int],
                   accepted_row: Sequence[int]) -> tuple[int, list[int]]:
    """Acceptance from ``verify_sample``'s outputs (rows 0 and 1 of its [2, R] result).

    Args:
        drafts: the k draft tokens; ``verify_sample`` was given ``drafts[i]`` for row i and -1
            for row k (the bonus row).
        tokens_row: per row, the token to emit at that position: the draft if it was accepted,
            otherwise the residual draw (at least k + 1 entries; the rest is ignored).
        accepted_row: per row, 1 if the row's draft was accepted, else 0 (same length).

    Returns:
        ``(a, tokens)``: ``a`` the accepted prefix (the first k flags that are all 1),
        ``tokens = drafts[:a] + [tokens_row[a]]`` (may end with ``NON_FINITE``, -1).
    """
    k = len(drafts)
    assert len(tokens_row) > k and len(accepted_row) > k, "need k + 1 verify rows"
    a = 0
    while a < k and accepted_row[a]:
        assert tokens_row[a] == drafts[a], "an accepted row must emit its draft"
        a += 1
    return a, [*drafts[:a], int(tokens_row[a])]
