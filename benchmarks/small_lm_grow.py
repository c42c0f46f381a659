"""Widen a trained small Qwen3 without changing what it computes: ``grow(model, cfg, ...)``.

Why: a small Qwen3 learns to copy from its context within the 5-minute training budget (hidden
512 x 8 layers), while wider shapes of the same budget did not (BENCHMARKS.md, issue 17's
trained models). But a 512-wide model decodes latency-bound, far below its bandwidth ceiling,
where the real Qwen3 sizes are bound by their weight bytes. Growing the trained model to a
wider residual stream gives a model that copies *and* whose decode reads enough bytes per token
to be bound by them; a short training at the new width then makes use of the new dimensions.

Design (function-preserving widening, after Net2Net: Chen, Goodfellow and Shlens 2016, "Net2Net:
accelerating learning via knowledge transfer"; bert2BERT, Chen et al. 2022, for transformers):
the residual stream of width ``h`` becomes ``H > h``, the old values in its first ``h``
dimensions and (up to ``noise_std``) zeros in the rest; the intermediate width ``i`` of the MLP
may grow to ``I >= i`` the same way. Per tensor (old block in the top-left corner, the rest
``N(0, noise_std^2)``):

- ``embed_tokens`` (tied ``lm_head``) ``[V, h] -> [V, H]``: zeros in the new columns keep every
  logit (the new dimensions of the final norm's output meet zero columns);
- ``qkv_proj`` ``[q+2kv, h] -> [q+2kv, H]`` (new input columns), ``o_proj`` ``[h, q] -> [H, q]``
  (new output rows): the heads are unchanged (``q_norm``/``k_norm`` copied);
- ``gate_up_proj`` ``[2i, h] -> [2I, H]``: the gate rows stay rows ``0..i``, the up rows move to
  ``I..I+i``; ``down_proj`` ``[h, i] -> [H, I]``: a new intermediate unit has zero gate and up
  rows (``silu(0) * 0 = 0``) and a zero down column;
- RMSNorm over the wider stream divides by ``sqrt(mean(x^2))`` over ``H`` dimensions of which
  only ``h`` are non-zero, so every norm weight is scaled by ``sqrt(h / H)`` and ``rms_norm_eps``
  by ``h / H``: then ``x / sqrt(mean_H(x^2) + eps') * g'`` equals the old norm exactly.

With ``noise_std = 0`` the grown model's logits equal the old ones up to float rounding (the CPU
test checks it). Exact zeros would stay zero under gradient descent (their gradients vanish), so
training after growth needs ``noise_std > 0`` (e.g. 1e-3): the function then moves by about
that much.
"""

from __future__ import annotations

import math

import torch

from benchmarks.small_lm import build_model, small_config
from models.qwen3 import Qwen3ForCausalLM


def grown_config(cfg: dict, hidden: int, intermediate: int) -> dict:
    """``cfg`` (a ``small_config`` dict) at residual width ``hidden`` and MLP width
    ``intermediate``, with ``rms_norm_eps`` scaled by ``old hidden / hidden`` (module notes).

    Raises:
        ValueError: a width below the old one.
    """
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    if hidden < h or intermediate < i:
        raise ValueError(f"grow: the widths can only grow: hidden {h} -> {hidden}, "
                         f"intermediate {i} -> {intermediate}")
    shape = {k: cfg[k] for k in ("num_hidden_layers", "num_attention_heads",
                                 "num_key_value_heads", "head_dim")}
    new = small_config(hidden_size=hidden, intermediate_size=intermediate, **shape)
    new["rms_norm_eps"] = cfg["rms_norm_eps"] * h / hidden
    return new


def grow(model: Qwen3ForCausalLM, cfg: dict, hidden: int, intermediate: int,
         noise_std: float = 0.0, seed: int = 0) -> tuple[Qwen3ForCausalLM, dict]:
    """The model ``model`` (of config ``cfg``) widened to ``hidden`` / ``intermediate``.

    Args:
        model: a ``benchmarks.small_lm.build_model`` model (tied embeddings), any device.
        cfg: its config dict.
        hidden, intermediate: the new residual and MLP widths, >= the old ones.
        noise_std: the standard deviation of the new entries of every matrix (0: exact zeros).
        seed: the noise's seed (drawn on the CPU).

    Returns:
        ``(grown, grown_cfg)``: a float32 model on ``model``'s device in train mode with
        gradients, on the torch path, tied; ``grown_cfg`` from ``grown_config``.

    Raises:
        ValueError: a width below the old one, or an untied model.
    """
    if model.lm_head.weight is not model.model.embed_tokens.weight:
        raise ValueError("grow: the model's lm_head must be tied to its embedding")
    new_cfg = grown_config(cfg, hidden, intermediate)
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    scale = math.sqrt(h / hidden)
    grown = build_model(new_cfg, init=False)  # float32, CPU; every tensor is written below
    gen = torch.Generator().manual_seed(seed + 7)
    old = {n: p.detach().float().cpu() for n, p in model.named_parameters()}
    with torch.no_grad():
        for name, p in grown.named_parameters():
            src = old[name]
            if p.ndim == 1:
                if p.shape == src.shape:  # q_norm / k_norm: per head, unchanged
                    p.copy_(src)
                else:  # a norm over the residual stream (module notes)
                    p.fill_(scale)
                    p[:h] = src * scale
                continue
            if noise_std:
                p.copy_(torch.randn(p.shape, generator=gen) * noise_std)
            else:
                p.zero_()
            if name.endswith("gate_up_proj.weight"):  # gate rows 0..i, up rows I..I+i
                p[:i, :h] = src[:i]
                p[intermediate:intermediate + i, :h] = src[i:]
            else:
                p[:src.shape[0], :src.shape[1]] = src
    grown.tie_weights()
    return grown.to(next(model.parameters()).device).train().requires_grad_(True), new_cfg
