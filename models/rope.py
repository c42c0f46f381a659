"""Rotary position embedding (RoPE) for Qwen3, with optional YaRN scaling.

RoPE: Su et al. 2021, "RoFormer"; the rotate-half ("NeoX") layout, where dim i pairs with dim
i + D/2, as Qwen3 and transformers use. YaRN: Peng et al. 2023; the inverse frequencies and the
attention factor follow transformers' ``_compute_yarn_parameters`` exactly (including its
``truncate`` rounding of the ramp bounds and the ``mscale``/``mscale_all_dim`` variant), so that
logits match transformers at any position.

cos/sin are computed per step from the positions tensor, on its device, in float32 (the same ops
as transformers: ``positions.float() * inv_freq``, then cos/sin, times the attention factor, cast
to the model dtype). That is T x D/2 work per step, reads no table, needs no host sync and works
for any position, so it is safe inside CUDA graphs.
"""

from __future__ import annotations

import math

import torch

from models.config import YarnScaling


def rope_parameters(head_dim: int, theta: float,
                    scaling: YarnScaling | None) -> tuple[torch.Tensor, float]:
    """Inverse frequencies and the cos/sin multiplier.

    Returns:
        inv_freq: float32 [head_dim // 2] (CPU), radians per position for each rotated pair.
        attention_factor: float, multiplies cos and sin (1.0 without YaRN).
    """
    dim = head_dim
    pos_freqs = theta ** (torch.arange(0, dim, 2, dtype=torch.float, device="cpu") / dim)
    inv_freq = 1.0 / pos_freqs
    if scaling is None:
        return inv_freq, 1.0

    factor = scaling.factor
    attention_factor = scaling.cos_sin_scale

    def correction_dim(rotations: float) -> float:
        # the dim whose wavelength makes `rotations` turns over the original context
        orig = scaling.original_max_position_embeddings
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(scaling.beta_fast), correction_dim(scaling.beta_slow)
    if scaling.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # avoid 0/0, as transformers does
    idx = torch.arange(dim // 2, dtype=torch.float32, device="cpu")
    ramp = torch.clamp((idx - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp  # 1: keep the original frequency (high-frequency dims)
    inv_interp = 1.0 / (factor * pos_freqs)
    inv_freq = inv_interp * (1 - extrapolation) + inv_freq * extrapolation
    return inv_freq, float(attention_factor)


class RotaryEmbedding(torch.nn.Module):
    """Applies RoPE to q and k given int64 positions.

    The inverse frequencies live on the CPU and are copied once per device (lazily, on the first
    call; warm up before CUDA graph capture).
    """

    def __init__(self, head_dim: int, theta: float, scaling: YarnScaling | None):
        super().__init__()
        self.head_dim = head_dim
        self.inv_freq_cpu, self.attention_factor = rope_parameters(head_dim, theta, scaling)
        self._inv_freq: dict[torch.device, torch.Tensor] = {}

    def inv_freq(self, device: torch.device) -> torch.Tensor:
        """float32 [head_dim // 2] on ``device`` (copied on the first call per device)."""
        inv_freq = self._inv_freq.get(device)
        if inv_freq is None:
            inv_freq = self._inv_freq[device] = self.inv_freq_cpu.to(device)
        return inv_freq

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype):
        """cos, sin: [T, head_dim] in ``dtype`` for int64 positions [T] (the HF formulation)."""
        inv_freq = self.inv_freq(positions.device)
        freqs = positions.float()[:, None] * inv_freq  # (T, D/2) float32
        emb = torch.cat((freqs, freqs), dim=-1)  # (T, D)
        return ((emb.cos() * self.attention_factor).to(dtype),
                (emb.sin() * self.attention_factor).to(dtype))


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [T, H, D]; cos, sin: [T, D] in x's dtype. Returns [T, H, D] (rotate-half layout)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None] + rotated * sin[:, None]
