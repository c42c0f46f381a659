"""Key-channel balancing for the INT8 KV cache: per-channel power-of-two scales moved from K to Q.

An INT8 pool keeps one scale per token and KV head (``infer/kv_pool.py``), so a key channel far
larger than the rest sets that scale and the others keep few levels (KIVI, Liu et al., 2024;
KVQuant, Hooper et al., 2024: keys carry per-channel outliers). Attention only needs the dot
product ``q . k``, and ``q . k = (q * s) . (k / s)`` for any per-channel ``s``: dividing the large
key channels down (and multiplying the matching query channels up) flattens the keys before they
are quantized, as SmoothQuant (Xiao et al., 2023) moves activation outliers into weights.

Qwen3 has the place to put ``s`` for free: the per-channel weights of ``q_norm`` and ``k_norm``
(shape ``[head_dim]``, shared by all heads) are the last per-channel multiplications before RoPE.
Two constraints make the fold exact:

- RoPE (rotate-half layout) mixes channel ``i`` with ``i + head_dim / 2``, so both channels of a
  pair get the same ``s``; a rotation then commutes with the scaling.
- Every ``s`` is a power of two, so ``w * s`` is exact in bfloat16 and float32 and every product
  ``(q_i s_i)(k_i / s_i)`` equals ``q_i k_i`` bit for bit: with a BF16 cache, attention and
  logits do not change at all; only the INT8 codes of the keys do.

The scales come from the weights alone (no calibration text). A pair's expected key magnitude
after ``k_norm`` is estimated, per KV head, as ``|w_knorm_i| * ||W_k[i, :] * g||`` (``W_k`` the
key rows of ``qkv_proj``, ``g`` the layer's ``input_layernorm`` weight: the input's per-feature
scale), relative within the head (``k_norm`` divides each head by its own RMS), then the largest
over heads; ``mode="norm"`` uses ``|w_knorm_i|`` alone. ``s = 2 ** round(log2(m))``, centred
so the scales' geometric mean is 1: the keys are flattened as far as powers of two allow.
"""

from __future__ import annotations

import os

import torch

MODES = ("off", "norm", "proj")
DEFAULT_MODE = "proj"


def default_mode() -> str:
    """The mode an ``Engine`` with an INT8 pool folds into the model it loads:
    ``INFER_KEY_BALANCE`` (one of ``MODES``) or ``DEFAULT_MODE``.

    Raises:
        ValueError: ``INFER_KEY_BALANCE`` is set to something else.
    """
    mode = os.environ.get("INFER_KEY_BALANCE", DEFAULT_MODE).strip() or DEFAULT_MODE
    if mode not in MODES:
        raise ValueError(f"INFER_KEY_BALANCE must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


@torch.no_grad()
def key_magnitudes(layer, mode: str) -> torch.Tensor:
    """float32 [head_dim]: the estimated magnitude of each RoPE pair of keys (both channels of a
    pair get the pair's value) for one decoder layer (``models.qwen3.Qwen3DecoderLayer``).

    Raises:
        ValueError: an unknown ``mode`` (or ``"off"``, which has no magnitudes).
    """
    a = layer.self_attn
    w = a.k_norm.weight.detach().float().abs()  # [D]
    if mode == "norm":
        m = w
    elif mode == "proj":
        d, h = a.head_dim, a.num_kv_heads
        wk = a.qkv_proj.weight.detach()[a.q_size:a.q_size + a.kv_size].float()  # [H * D, hidden]
        g = layer.input_layernorm.weight.detach().float()
        rows = (wk * g).norm(dim=1).view(h, d)  # [H, D]
        rows = rows / rows.pow(2).mean(1, keepdim=True).sqrt().clamp_min(1e-30)
        m = w * rows.amax(0)
    else:
        raise ValueError(f"key balance mode must be one of {', '.join(MODES[1:])}, got {mode!r}")
    half = m.shape[0] // 2
    pair = torch.sqrt(m[:half] ** 2 + m[half:] ** 2)
    return torch.cat([pair, pair])


def power_of_two_scales(m: torch.Tensor) -> torch.Tensor:
    """float32 [D] scales ``2 ** round(log2(m))`` with geometric mean ~1 (``m`` > 0; zeros are
    treated as the smallest positive entry)."""
    pos = m[m > 0]
    floor = float(pos.min()) if pos.numel() else 1.0
    lg = torch.log2(m.clamp_min(floor))
    return torch.exp2(torch.round(lg - lg.mean()))


@torch.no_grad()
def balance_keys(model, mode: str = "proj") -> list[torch.Tensor]:
    """Fold key-channel scales into every layer's ``q_norm``/``k_norm`` weights, in place.

    ``model``: ``models.qwen3.Qwen3ForCausalLM`` (any dtype, any device). Returns the scales
    (float32 [head_dim] per layer; all ones for ``mode="off"``). With a BF16 (or float32) cache the
    model's outputs are bit-identical before and after (module docstring); use it for an INT8
    cache.

    Raises:
        ValueError: an unknown ``mode`` or an odd ``head_dim``.
    """
    if mode not in MODES:
        raise ValueError(f"key balance mode must be one of {', '.join(MODES)}, got {mode!r}")
    out = []
    for layer in model.model.layers:
        a = layer.self_attn
        if a.head_dim % 2:
            raise ValueError(f"key balance needs an even head_dim (RoPE pairs), got {a.head_dim}")
        if mode == "off":
            out.append(torch.ones(a.head_dim))
            continue
        s = power_of_two_scales(key_magnitudes(layer, mode))
        dev = a.k_norm.weight.device
        a.k_norm.weight.div_(s.to(dev, a.k_norm.weight.dtype))
        a.q_norm.weight.mul_(s.to(dev, a.q_norm.weight.dtype))
        out.append(s.cpu())
    return out
