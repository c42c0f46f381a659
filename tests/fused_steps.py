"""Decode-like steps of a tiny Qwen3 through its fused forward, for the tests of fusion flags
(``test_model_fused_store.py``): two sequences on scrambled pages, each step adding ``news``
tokens per sequence, random ids from a fixed seed."""

from __future__ import annotations

import torch

from infer.meta import build_meta


def fused_steps(model, attn, dev, steps) -> list[torch.Tensor]:
    """The logits of each step of ``steps`` (tuples of new tokens per sequence), float [tokens,
    vocab] each, through ``model._forward_fused`` with the attention backend ``attn``."""
    pages = [[7, 2], [0, 5]]  # scrambled
    gen = torch.Generator().manual_seed(3)
    logits, cached = [], [0, 0]
    with torch.no_grad():
        for news in steps:
            meta = build_meta([(p, c, n) for p, c, n in zip(pages, cached, news, strict=True)],
                              16, dev)
            cached = [c + n for c, n in zip(cached, news, strict=True)]
            ids = torch.randint(0, model.config.vocab_size, (meta.num_tokens,),
                                generator=gen).to(dev)
            hidden = model._forward_fused(model.model.embed_tokens(ids), meta.positions, attn,
                                          meta)
            logits.append(model.compute_logits(hidden))
    return logits
