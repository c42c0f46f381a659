"""Outlier channels of the cached keys and values, and what INT8 per-token scales cost on them.

Trained transformers often carry a few key channels far larger than the rest (Dettmers et al.,
LLM.int8(), 2022; KIVI, Liu et al., 2024: keys have per-channel outliers, values do not). With one
INT8 scale per token and KV head (``infer/kv_pool.py``) such a channel sets the scale, and the
other channels of that head keep fewer levels. ``channel_stats`` reads one sequence's K and V
from a BF16 pool after its prefill and reports, per layer:

- ``k_outlier`` / ``v_outlier``: the largest ratio, over KV heads, of the largest channel's RMS
  (over positions) to the median channel's RMS; 1.3-1.4 for random weights, 2-5 for most
  layers of a trained model, 10 or more for an outlier channel;
- ``k_int8_rel_err`` / ``v_int8_rel_err``: ``||x - dequant(quant(x))|| / ||x||`` over the
  layer's cached positions with the pool's scheme (symmetric, scale = absmax / 127 per token and
  KV head, round to nearest).

Used by ``benchmarks/int8_kl.py`` (one ``kv_channels`` JSON line per run).
"""

from __future__ import annotations

import torch

from infer.kv_pool import KVPool


def cached(x: torch.Tensor, pages: list[int], n: int) -> torch.Tensor:
    """float32 [n, kv_heads, head_dim]: the first ``n`` positions of a sequence on ``pages``,
    from a floating-point pool tensor ``x`` [num_pages, kv_heads, page_size, head_dim] (a
    ``"bf16"`` pool: bfloat16 on a GPU, float32 in the CPU tests)."""
    sel = x[torch.tensor(pages, device=x.device)]  # [P, H, page, D]
    return sel.permute(0, 2, 1, 3).reshape(-1, x.shape[1], x.shape[3])[:n].float()


def outlier_ratio(x: torch.Tensor) -> float:
    """x: [n, heads, dim] -> max over heads of (max channel RMS / median channel RMS)."""
    rms = x.pow(2).mean(0).sqrt()  # [heads, dim]
    return float((rms.max(-1).values / rms.median(-1).values.clamp_min(1e-12)).max())


def int8_rel_err(x: torch.Tensor) -> float:
    """x: [n, heads, dim] -> the relative L2 error of per-(token, head) absmax INT8."""
    scale = x.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 127.0
    q = torch.round(x / scale).clamp(-127, 127)
    return float((x - q * scale).norm() / x.norm().clamp_min(1e-12))


def channel_stats(pool: KVPool, pages: list[int], n: int) -> list[dict]:
    """One dict per layer (module docstring) for the ``n`` cached positions on ``pages``.

    Raises:
        ValueError: for an INT8 pool (its codes are already rounded) or ``n`` < 2.
    """
    if pool.kv_dtype != "bf16":
        raise ValueError("channel_stats reads a 16-bit pool, got an INT8 one")
    if n < 2:
        raise ValueError(f"channel_stats needs 2 or more positions, got {n}")
    out = []
    for i in range(pool.num_layers):
        layer = pool.layer(i)
        k, v = cached(layer.k, pages, n), cached(layer.v, pages, n)
        out.append({"layer": i, "k_outlier": round(outlier_ratio(k), 2),
                    "v_outlier": round(outlier_ratio(v), 2),
                    "k_int8_rel_err": round(int8_rel_err(k), 5),
                    "v_int8_rel_err": round(int8_rel_err(v), 5)})
    return out
