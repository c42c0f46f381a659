"""The filtered distribution a sampled token is drawn from: top-k, then top-p, then min-p, over
float32 logits already divided by the temperature (HF transformers' logits processors' order).

Two ways to the same distribution: ``full_probs`` over the whole vocabulary (a sort of all V
entries for top-p; the path without top-k), and ``topk_probs`` over the k candidates of
``torch.topk`` (already sorted, so top-p needs no sort; vLLM's ``apply_top_k_top_p``). Both have
shapes fixed by the vocabulary or by top_k and branch only on host values of ``SamplingParams``,
so they can live in a CUDA graph. ``infer/sampling.py`` draws from them; ``kernels/topk_sample.py``
computes ``topk_probs``'s distribution in two kernels, and the tests hold it to this one.
"""

from __future__ import annotations

import torch

from infer.sampling_params import SamplingParams


def full_probs(x: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The filtered distribution over the whole vocabulary (sorts all V entries for top-p).

    Args:
        x: float32 [N, V] logits after the temperature.
        params: top_k (masking below the k-th value, ties kept), top_p, min_p.

    Returns:
        float32 [N, V] probabilities (unnormalized after top-p/min-p; the draw does not care).
    """
    vocab = x.shape[-1]
    if 0 < params.top_k < vocab:
        kth = torch.topk(x, params.top_k, dim=-1).values[..., -1:]  # [N, 1]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if params.top_p < 1.0:
        sorted_p, idx = torch.sort(probs, dim=-1, descending=True)
        # Drop a token when the mass strictly before it already reaches top_p: the first
        # (most likely) token always survives.
        before = torch.cumsum(sorted_p, dim=-1) - sorted_p
        sorted_p = sorted_p.masked_fill(before >= params.top_p, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, idx, sorted_p)
    if params.min_p > 0.0:
        top = probs.amax(dim=-1, keepdim=True)
        probs = probs.masked_fill(probs < params.min_p * top, 0.0)
    return probs


def topk_probs(x: torch.Tensor, params: SamplingParams) -> tuple[torch.Tensor, torch.Tensor]:
    """The same filtered distribution as ``full_probs``, computed on the top-k candidates only.

    ``torch.topk`` (fixed k: no data-dependent shape, no host sync, CUDA-graph safe) returns the
    k best logits already sorted, so top-p needs no sort of the vocabulary: with Qwen3's default
    top_k 20 this works on 20 values instead of sorting 151,936 per token (vLLM's
    ``apply_top_k_top_p`` does the same). The kept set and probabilities equal ``full_probs``'s,
    except when several logits tie at the k-th value: this keeps exactly k of them.

    Args:
        x: float32 [N, V] logits after the temperature; requires 0 < params.top_k < V.
        params: top_k, top_p, min_p.

    Returns:
        ``(probs float32 [N, k], ids int64 [N, k])``: probabilities (0 = dropped), in descending
        order, and their vocabulary ids.
    """
    vals, idx = torch.topk(x, params.top_k, dim=-1)  # sorted, descending
    probs = torch.softmax(vals, dim=-1)
    if params.top_p < 1.0:
        before = torch.cumsum(probs, dim=-1) - probs  # already sorted: no sort needed
        probs = probs.masked_fill(before >= params.top_p, 0.0)
    if params.min_p > 0.0:
        probs = probs.masked_fill(probs < params.min_p * probs[..., :1], 0.0)
    return probs, idx
