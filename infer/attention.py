"""Attention backends over the paged KV pool, and the one place that picks a backend.

A backend is a callable ``attn(layer_idx, q, k, v, meta) -> o`` that the model calls once per layer
(``models/qwen3.py``): it stores the step's new K/V in the pool (quantizing for an INT8 pool), then
attends the step's queries to every cached position of their sequence, causally, with GQA.

- ``ReferenceAttention``: plain PyTorch (``kernels/reference.py``); the CPU path and the oracle.
- The Triton backend (``kernels/*.py``) plugs in through ``make_attention``/``resolve_attention``.
"""

from __future__ import annotations

import torch

from infer.kv_pool import KVPool
from infer.meta import AttnMeta
from kernels import reference


class ReferenceAttention:
    """Store K/V with ``reference.store_kv``, attend with ``reference.paged_attention``.

    Args:
        pool: the engine's ``KVPool``.
        sm_scale: logit scale; None means ``1 / sqrt(head_dim)`` (Qwen3's).
    """

    def __init__(self, pool: KVPool, sm_scale: float | None = None):
        self.pool = pool
        self.sm_scale = sm_scale

    def __call__(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 meta: AttnMeta) -> torch.Tensor:
        """One layer's attention for one step.

        Args:
            layer_idx: which layer's cache to use.
            q: [T, Hq, D] queries (after q-norm and RoPE); k, v: [T, Hkv, D] new keys/values.
            meta: the step's ``AttnMeta``.

        Returns:
            [T, Hq, D] in q's dtype.
        """
        cache = self.pool.layer(layer_idx)
        reference.store_kv(k, v, cache, meta.slot_mapping)
        return reference.paged_attention(q, cache, meta, self.sm_scale)


def resolve_attention(kind: str, device: torch.device) -> str:
    """Turn ``"auto"`` into a concrete backend name for ``device``.

    ``"auto"`` is ``"reference"`` until the Triton backend lands (then ``"triton"`` on CUDA).

    Raises:
        ValueError: on an unknown name.
    """
    if kind == "auto":
        return "reference"
    if kind not in ("reference", "triton"):
        raise ValueError(f"attention must be auto, reference or triton, got {kind!r}")
    return kind


def make_attention(kind: str, pool: KVPool, **kwargs):
    """Build the attention backend ``kind`` (``"reference"`` or ``"triton"``; resolve ``"auto"``
    with ``resolve_attention`` first) over ``pool``. Extra keyword arguments go to the backend.

    Raises:
        NotImplementedError: for a backend that is not built yet.
        ValueError: on an unknown name.
    """
    if kind == "reference":
        return ReferenceAttention(pool, **kwargs)
    if kind == "triton":
        raise NotImplementedError("the Triton attention backend is not built yet: "
                                  "use --attention reference")
    raise ValueError(f"unknown attention backend {kind!r}: use reference or triton")
