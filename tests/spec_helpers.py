"""Helpers of the speculative-decoding tests (``test_speculative.py`` on the CPU,
``test_speculative_gpu.py``): a tokenizer stand-in without stop ids, a drafter that always
drafts, a drafter scripted to be right or wrong where a test says, and the batch-against-alone
comparison."""

from __future__ import annotations

import torch
from mock_engine import GREEDY, VOCAB_LIMIT, V, expected


class TailLookup:
    """Drafts the sequence's last k tokens again (always a draft; sampled replies of a random
    model rarely repeat, so real lookups would find none)."""

    def __init__(self, tokens):
        self.seq = list(tokens)

    def extend(self, tokens):
        self.seq.extend(tokens)

    def propose(self, k):
        return self.seq[-k:] if k else []


def batch_and_alone(eng, shapes, new_tokens):
    """Prompts of seeded random phrases (``(phrase length, repeats)`` each) decoded greedily
    alone, then together as one speculative batch: ``(batch replies, alone replies,
    the batch's sessions)``."""
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, VOCAB_LIMIT, (n,), generator=g).tolist() * reps
               for n, reps in shapes]
    sp = GREEDY.replace(max_new_tokens=new_tokens)
    alone = [list(eng.new_session().generate(p, sp)) for p in prompts]
    sessions = [eng.new_session() for _ in prompts]
    out: list[list[int]] = [[] for _ in prompts]
    for i, tok in eng.generate_batch(list(zip(sessions, prompts, strict=True)), sp,
                                     speculate=True):
        out[i].append(tok)
    return out, alone, sessions


def sum_continuation(seq: list[int], k: int) -> list[int]:
    """The SumModel's next k tokens after ``seq``."""
    return expected(list(seq), k)


class ScriptedLookup:
    """A ``PromptLookup`` stand-in: drafts the model's true continuation, with the draft at
    index ``wrong_at`` (if any) replaced by a wrong token."""

    wrong_at: int | None = None
    calls: list[int] = []

    def __init__(self, tokens):
        self.seq = list(tokens)

    def extend(self, tokens):
        self.seq.extend(tokens)

    def propose(self, k):
        ScriptedLookup.calls.append(k)
        d = sum_continuation(self.seq, k)
        if self.wrong_at is not None and self.wrong_at < len(d):
            d[self.wrong_at] = (d[self.wrong_at] + 1) % V
        return d
