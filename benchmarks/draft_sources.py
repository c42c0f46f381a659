"""Where prompt lookup's drafts for a reply come from: the prompt (the reply copies the document)
or the reply's own earlier tokens (the reply repeats itself).

``draft_sources(prompt, reply)`` replays the lookup rule of ``infer.speculate.PromptLookup`` one
token at a time: before reply token ``i`` it finds the most recent earlier occurrence of the
longest suffix n-gram (n from ``max_ngram`` down to 1) of ``prompt + reply[:i]`` and takes the
token that followed it as the guess. It counts the guesses that equal ``reply[i]`` by where the
guessed token sits: in the prompt, or in the reply. Counts, not speeds: a model that copies the
document scores ``from_prompt``; a reply caught in a loop scores ``from_reply``. (A draft of k
tokens is a run of such guesses; the one-token count is the simplest measure of both.)

Used by ``benchmarks/speculative.py`` on each plain reply.
"""

from __future__ import annotations

from collections.abc import Sequence


def draft_sources(prompt: Sequence[int], reply: Sequence[int], max_ngram: int = 3) -> dict:
    """Per reply token, the lookup's one-token guess and its source.

    Args:
        prompt: the prompt's token ids.
        reply: the reply's token ids (the tokens after the prompt).
        max_ngram: the longest suffix n-gram tried (``PromptLookup``'s default: 3).

    Returns:
        ``{"tokens": len(reply), "from_prompt": n, "from_reply": n, "wrong": n, "no_match": n}``:
        right guesses whose token came from the prompt or from the reply, wrong guesses, and
        tokens with no earlier occurrence of any suffix n-gram.

    Raises:
        ValueError: ``max_ngram < 1``.
    """
    if max_ngram < 1:
        raise ValueError(f"max_ngram must be >= 1, got {max_ngram}")
    seq = list(prompt)
    index: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in range(1, max_ngram + 1)}
    for end in range(len(seq) - 1):  # every n-gram with a known follower, the latest winning
        _add(index, seq, end)
    out = {"tokens": len(reply), "from_prompt": 0, "from_reply": 0, "wrong": 0, "no_match": 0}
    for tok in reply:
        guess_at = None
        for n in range(min(max_ngram, len(seq)), 0, -1):
            end = index[n].get(tuple(seq[len(seq) - n:]))
            if end is not None:
                guess_at = end + 1
                break
        if guess_at is None:
            out["no_match"] += 1
        elif seq[guess_at] != tok:
            out["wrong"] += 1
        else:
            out["from_prompt" if guess_at < len(prompt) else "from_reply"] += 1
        seq.append(int(tok))
        _add(index, seq, len(seq) - 2)
    return out


def _add(index: dict[int, dict[tuple[int, ...], int]], seq: list[int], end: int) -> None:
    """Index the n-grams ending at ``end`` (whose follower ``seq[end + 1]`` is known)."""
    for n, grams in index.items():
        if end >= n - 1:
            grams[tuple(seq[end - n + 1:end + 1])] = end
