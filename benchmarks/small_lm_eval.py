"""Evaluations of a small trained Qwen3 on held-out text; each returns one JSON-able dict.

- ``heldout_loss``: mean cross-entropy per token (nats) over non-overlapping windows.
- ``induction``: held-out passages of ``length`` tokens repeated once, ``[p, p]``; the mean loss
  on the first occurrence (tokens 1..L-1 of p) against the second (the same tokens again). A model
  with induction heads (Olsson et al. 2022) predicts the repeat far better.
- ``copy``: prompt = a held-out paragraph containing a sentence S, a blank line, then S's first
  ``prefix`` tokens; greedy decoding (full recompute per token, no KV cache) of as many tokens as
  S has left (at most ``max_new``). Reports the fraction of those tokens equal to S's at the same
  place, the fraction of the longest exactly-copied prefix, and the fraction of samples copied
  whole.
- ``load_check``: ``models.loader.load_model`` on the saved folder, run as the engine runs it
  (``ReferenceAttention`` over a ``KVPool``, ``build_meta``), against the training model with its
  weights rounded to the stored bfloat16, both in float32: the max abs logit difference.

The first three run the training model (``small_lm.forward_batch``) under the caller's autocast.
"""

from __future__ import annotations

import copy as _copy
import re

import torch

from benchmarks.linear_cross_entropy import token_losses
from benchmarks.small_lm import forward_batch
from infer.attention import ReferenceAttention
from infer.kv_pool import KVPool
from infer.meta import build_meta
from models.loader import load_model

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][”’\"])\s+")  # closing quotes stay


def _losses(model, rows: torch.Tensor) -> torch.Tensor:
    """rows: int64 [B, S+1] -> per-token CE [B, S] of predicting rows[:, 1:]."""
    b, s1 = rows.shape
    hidden = forward_batch(model, rows[:, :-1])
    return token_losses(hidden, model.lm_head.weight, rows[:, 1:].reshape(-1)).view(b, s1 - 1)


@torch.no_grad()
def heldout_loss(model, ids: list[int], seq: int, batch: int = 8,
                 max_tokens: int | None = None) -> dict:
    """Mean CE per predicted token over windows of ``seq + 1`` held-out ids (non-overlapping,
    the first ``max_tokens`` ids at most; the last partial window is dropped)."""
    dev = model.device
    t = torch.tensor(ids[:max_tokens] if max_tokens else ids, dtype=torch.int64)
    n = (t.numel() - 1) // seq
    if n < 1:
        raise ValueError(f"{t.numel()} held-out tokens: fewer than one window of {seq + 1}")
    windows = torch.stack([t[i * seq:(i + 1) * seq + 1] for i in range(n)])  # (n, seq+1)
    total, count = 0.0, 0
    for s in range(0, n, batch):
        loss = _losses(model, windows[s:s + batch].to(dev))
        total += float(loss.double().sum())
        count += loss.numel()
    return {"what": "heldout_loss", "loss": round(total / count, 4), "tokens": count,
            "seq": seq}


@torch.no_grad()
def induction(model, ids: list[int], length: int = 200, passages: int = 32,
              batch: int = 16, what: str = "induction") -> dict:
    """Loss on a passage's first and second occurrence in ``[p, p]``, ``passages`` held-out
    passages of ``length`` tokens at evenly spaced offsets of ``ids``. With ``ids`` shuffled
    (``what="induction_random"``: tokens with no sentence to remember) it measures copying
    alone, as the training's copying rows teach it."""
    if len(ids) < length:
        raise ValueError(f"{len(ids)} held-out tokens: fewer than one passage of {length}")
    t = torch.tensor(ids, dtype=torch.int64)
    starts = torch.linspace(0, len(ids) - length, passages).long().tolist()
    rows = torch.stack([torch.cat([t[a:a + length]] * 2) for a in starts])  # (P, 2L)
    firsts, seconds = [], []
    for s in range(0, passages, batch):
        loss = _losses(model, rows[s:s + batch].to(model.device)).double()  # (b, 2L-1)
        firsts.append(loss[:, :length - 1])  # predicts tokens 1..L-1 of the first copy
        seconds.append(loss[:, length:])  # the same tokens of the second copy
    first, second = float(torch.cat(firsts).mean()), float(torch.cat(seconds).mean())
    return {"what": what, "passages": passages, "length": length,
            "first_loss": round(first, 4), "second_loss": round(second, 4),
            "ratio": round(second / first, 4)}


def random_induction(model, ids: list[int], seed: int, length: int = 200, passages: int = 32,
                     what: str = "induction_random") -> dict:
    """``induction`` on ``ids`` shuffled with ``seed`` (copying alone: no sentence to
    remember)."""
    shuffled = torch.tensor(ids)[torch.randperm(
        len(ids), generator=torch.Generator().manual_seed(seed))].tolist()
    return induction(model, shuffled, length, passages, what=what)


def copy_samples(texts: list[str], tokenizer, samples: int = 16, prefix: int = 4,
                 max_new: int = 24, max_prompt: int = 400) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, target ids) pairs from the held-out ``texts`` (module docstring). A
    paragraph qualifies when its prompt has at most ``max_prompt`` tokens and one of its
    sentences has at least ``prefix + 8`` tokens (the first such is S); the qualifying
    paragraphs are taken evenly spaced, in text order."""
    found = []
    for text in texts:
        for para in re.split(r"\n\s*\n", text):
            para = para.strip()
            if len(para) < 200:
                continue
            for sentence in _SENTENCE_END.split(para):
                s_ids = tokenizer.encode(sentence.strip())
                if len(s_ids) < prefix + 8:
                    continue
                prompt = tokenizer.encode(para + "\n\n") + s_ids[:prefix]
                if len(prompt) <= max_prompt:
                    found.append((prompt, s_ids[prefix:prefix + max_new]))
                break
    if not found:
        raise ValueError("no held-out paragraph fits the copy test")
    step = max(1, len(found) // samples)
    return found[::step][:samples]


@torch.no_grad()
def greedy(model, prompt: list[int], n: int) -> list[int]:
    """``n`` greedy tokens after ``prompt``, recomputing the whole sequence each step."""
    seq = torch.tensor(prompt, dtype=torch.int64, device=model.device)
    out = []
    for _ in range(n):
        hidden = forward_batch(model, seq[None])
        nxt = model.compute_logits(hidden[-1:]).argmax(-1)
        out.append(int(nxt))
        seq = torch.cat([seq, nxt])
    return out


def copy_eval(model, samples: list[tuple[list[int], list[int]]]) -> dict:
    """Greedy copy of each sample's target (see ``copy_samples``)."""
    match = prefix = whole = total = 0
    for prompt, target in samples:
        got = greedy(model, prompt, len(target))
        same = [a == b for a, b in zip(got, target, strict=True)]
        run = same.index(False) if False in same else len(same)
        match, prefix, total = match + sum(same), prefix + run, total + len(target)
        whole += run == len(target)
    return {"what": "copy", "samples": len(samples), "target_tokens": total,
            "token_match_frac": round(match / total, 4),
            "prefix_match_frac": round(prefix / total, 4),
            "whole_copied_frac": round(whole / len(samples), 4)}


@torch.no_grad()
def load_check(model, folder, ids: list[int], page_size: int = 16) -> dict:
    """Max abs difference of the logits of ``load_model(folder)`` (run with a KV pool, as the
    engine runs it) and of ``model`` with its weights rounded to bfloat16, both float32, for
    the prompt ``ids`` (ReferenceAttention; on CUDA the loaded model also runs the fused norm /
    RoPE kernels)."""
    dev = model.device
    loaded = load_model(folder, device=dev, dtype=torch.float32)
    cfg = loaded.config
    pool = KVPool(cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim,
                  len(ids) // page_size + 2, page_size, "bf16", torch.float32, dev)
    pages = pool.allocate(pool.pages_for(len(ids)))
    meta = build_meta([(pages, 0, len(ids))], page_size, dev)
    x = torch.tensor(ids, dtype=torch.int64, device=dev)
    got = loaded.compute_logits(loaded(x, meta.positions, ReferenceAttention(pool), meta))
    ref_model = _copy.deepcopy(model).eval()
    for p in ref_model.parameters():
        p.data = p.data.to(torch.bfloat16).float()
    with torch.autocast(dev.type, enabled=False):
        ref = ref_model.compute_logits(ref_model(x, torch.arange(len(ids), device=dev)))
    del ref_model, loaded, pool
    return {"what": "load_check", "tokens": len(ids),
            "max_abs_diff": float((got - ref).abs().max()),
            "max_abs_logit": round(float(ref.abs().max()), 4),
            "argmax_agree": round(float((got.argmax(-1) == ref.argmax(-1)).float().mean()), 4)}
