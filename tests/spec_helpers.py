"""Helpers of the speculative-decoding tests (``test_speculative.py`` on the CPU,
``test_speculative_gpu.py``): a tokenizer stand-in without stop ids, a drafter that always
drafts, and the batch-against-alone comparison."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from mock_engine import GREEDY

NO_STOP = SimpleNamespace(stop_ids=set(), vocab_limit=151669)


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
    prompts = [torch.randint(0, 151669, (n,), generator=g).tolist() * reps for n, reps in shapes]
    sp = GREEDY.replace(max_new_tokens=new_tokens)
    alone = [list(eng.new_session().generate(p, sp)) for p in prompts]
    sessions = [eng.new_session() for _ in prompts]
    out: list[list[int]] = [[] for _ in prompts]
    for i, tok in eng.generate_batch(list(zip(sessions, prompts, strict=True)), sp,
                                     speculate=True):
        out[i].append(tok)
    return out, alone, sessions
