"""Attention backends over the paged KV pool, and the one place that picks a backend.

A backend is a callable ``attn(layer_idx, q, k, v, meta) -> o`` that the model calls once per layer
(``models/qwen3.py``): it stores the step's new K/V in the pool (quantizing for an INT8 pool), then
attends the step's queries to every cached position of their sequence, causally, with GQA.

- ``ReferenceAttention``: plain PyTorch (``kernels/reference.py``); the CPU path and the oracle.
- ``TritonAttention``: the Triton kernels (``kernels/store_kv.py``, ``kernels/decode_attention.py``
  with ``kernels/combine.py``, ``kernels/prefill_attention.py``); the default on CUDA. It can also
  attend with the step's K/V already stored by the caller (``layer_cache`` + ``attend_stored``,
  ``models.qwen3.StoredKVAttention``): the model's fused path then stores them in its q/k-norm +
  RoPE launch (``kernels/qk_norm_rope_store.py``) and this backend launches no store. And it
  can take the step's raw q, k and v (``attend_prologue``): a decode step's q/k-norm + RoPE and
  KV store then run inside decode stage 1 (``kernels/decode_prologue.py``).
"""

from __future__ import annotations

import torch

from infer.kv_pool import KVPool, LayerCache
from infer.meta import AttnMeta
from kernels import reference
from kernels.decode_attention import (
    DecodeWorkspace,
    decode_attention,
    default_num_splits,
    slab_capacity,
)
from kernels.decode_prologue import DecodePrologue
from kernels.prefill_attention import prefill_attention
from kernels.qk_norm_rope import qk_norm_rope
from kernels.store_kv import store_kv
from kernels.tiles import decode_tiles

# Steps of up to this many new tokens per sequence take the split-KV decode kernel (GQA-packed
# rows: n * group <= 16 * group); longer steps (prefill chunks) take the prefill kernel.
MAX_DECODE_QUERIES = 16


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


class TritonAttention:
    """Store K/V and attend with the Triton kernels, straight from the paged pool.

    A step whose sequences all add the same ``n <= 16`` tokens (decode, speculative verification)
    runs split-KV decode attention (flash-decoding; Dao et al. 2023) into a workspace allocated
    once here; any other step (prefill chunks) runs the paged FlashAttention-2 prefill kernel.

    Args:
        pool: the engine's ``KVPool`` (on a CUDA device, or on the CPU under TRITON_INTERPRET=1).
        sm_scale: logit scale; None means ``1 / sqrt(head_dim)``.
        max_batch: the most sequences one decode step holds (sizes the workspace).
        num_splits: split-KV splits per (sequence, KV head); None means the tile default's
            programs per SM for one sequence (``default_num_splits``: 2 for 16-bit caches, 8 for
            INT8). Fixed for the life of the backend and the same for every batch size, so that
            a sequence's attention is bit for bit the same whatever the batch it decodes in
            (CUDA-graph friendly too).
        group: the GQA group (query heads per KV head); sizes the workspace rows.

    Attributes:
        slab_tokens: the most consecutive one-query rows of a sequence the decode kernel attends
            in one program (``AttnMeta.slab_rows``; ``kernels.decode_attention.slab_capacity``).
        slab_block_n: the decode tiles' key block; a slab inside one such block of positions
            gives each row exactly its one-row result.
    """

    def __init__(self, pool: KVPool, sm_scale: float | None = None, max_batch: int = 1,
                 num_splits: int | None = None, group: int = 1):
        self.pool = pool
        self.sm_scale = sm_scale
        kv_dtype = pool.layer(0).k.dtype
        self.num_splits = num_splits or default_num_splits(1, pool.kv_heads, pool.device,
                                                           kv_dtype)
        self.group = group
        self.slab_tokens = slab_capacity(group)
        self.slab_block_n = decode_tiles(pool.device, kv_dtype, page_size=pool.page_size,
                                         rows=group).block_n
        self.workspace = DecodeWorkspace.allocate(
            max_batch, pool.kv_heads, MAX_DECODE_QUERIES * group, self.num_splits,
            pool.head_dim, pool.device)

    def __call__(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 meta: AttnMeta) -> torch.Tensor:
        """One layer's attention for one step; arguments as ``ReferenceAttention.__call__``."""
        cache = self.pool.layer(layer_idx)
        store_kv(k, v, cache.k, cache.v, meta.slot_mapping, cache.k_scale, cache.v_scale)
        return self._attend(cache, q, meta, q_from_predecessor=False)

    def layer_cache(self, layer_idx: int) -> LayerCache:
        """Layer ``layer_idx``'s view of the pool, for a caller that stores the step's K/V itself
        (``kernels.qk_norm_rope_store``) and then calls ``attend_stored``."""
        return self.pool.layer(layer_idx)

    def attend_stored(self, layer_idx: int, q: torch.Tensor, meta: AttnMeta) -> torch.Tensor:
        """One layer's attention for one step whose new K/V the caller has already stored in
        ``layer_cache(layer_idx)`` at ``meta.slot_mapping``, as ``store_kv`` stores them.

        q (``[T, Hq, D]``, after q-norm and RoPE) may come from the kernel launched just before
        (``kernels.qk_norm_rope_store`` writes q and K/V in one launch): the decode kernel then
        waits for it before loading q (``q_from_predecessor``). Returns [T, Hq, D] in q's dtype.
        """
        return self._attend(self.pool.layer(layer_idx), q, meta, q_from_predecessor=True)

    def attend_prologue(self, layer_idx: int, q: torch.Tensor, prologue: DecodePrologue,
                        meta: AttnMeta) -> torch.Tensor:
        """One layer's attention for one step from its raw q ([T, Hq, D], before q-norm and
        RoPE) and ``prologue`` (the raw k and v, the norm and RoPE parameters, the slots), over
        a 16-bit pool: a decode step's stage 1 normalizes, rotates and stores them itself
        (``kernels.decode_prologue``; a verify step's one-query rows of one sequence included);
        any other step (a prefill chunk, sequences adding unequal numbers of tokens) runs
        ``qk_norm_rope``, the store and attention as three launches. Returns [T, Hq, D] in q's
        dtype.

        Raises:
            ValueError: for an INT8 pool's decode step (``kernels.decode_prologue``)."""
        cache = self.pool.layer(layer_idx)
        if self._is_decode(q, meta):
            return self._attend(cache, q, meta, q_from_predecessor=False, prologue=prologue)
        p = prologue
        q, k = qk_norm_rope(q, p.k, p.q_weight, p.k_weight, p.eps, p.positions, p.inv_freq,
                            p.attention_factor)
        store_kv(k, p.v, cache.k, cache.v, p.slot_mapping, cache.k_scale, cache.v_scale)
        return self._attend(cache, q, meta, q_from_predecessor=False)

    @staticmethod
    def _is_decode(q: torch.Tensor, meta: AttnMeta) -> bool:
        """Whether the step takes the decode kernel: every sequence adds the same n <= 16."""
        n = meta.max_query_len
        return n <= MAX_DECODE_QUERIES and q.shape[0] == n * meta.num_seqs

    def _attend(self, cache: LayerCache, q: torch.Tensor, meta: AttnMeta,
                q_from_predecessor: bool, prologue: DecodePrologue | None = None
                ) -> torch.Tensor:
        """Decode or prefill attention of q to ``cache`` (this step's K/V already stored, or
        stored by a decode step's ``prologue``)."""
        n = meta.max_query_len
        if self._is_decode(q, meta):
            return decode_attention(
                q, cache.k, cache.v, meta.seq_lens, meta.page_table, num_queries=n,
                sm_scale=self.sm_scale, k_scale=cache.k_scale, v_scale=cache.v_scale,
                num_splits=self.num_splits, workspace=self.workspace,
                slab_rows=meta.slab_rows if n == 1 else None,
                q_from_predecessor=q_from_predecessor, prologue=prologue)
        return prefill_attention(
            q, cache.k, cache.v, meta.seq_lens, meta.query_start_loc, meta.page_table,
            max_query_len=n, sm_scale=self.sm_scale, k_scale=cache.k_scale,
            v_scale=cache.v_scale)


def resolve_attention(kind: str, device: torch.device) -> str:
    """Turn ``"auto"`` into a concrete backend name for ``device``.

    ``"auto"`` is ``"triton"`` on CUDA and ``"reference"`` elsewhere (the Triton interpreter is
    far too slow for real use on a CPU).

    Raises:
        ValueError: on an unknown name.
    """
    if kind == "auto":
        return "triton" if torch.device(device).type == "cuda" else "reference"
    if kind not in ("reference", "triton"):
        raise ValueError(f"attention must be auto, reference or triton, got {kind!r}")
    return kind


def make_attention(kind: str, pool: KVPool, group: int = 1, max_batch: int = 1, **kwargs):
    """Build the attention backend ``kind`` (``"reference"`` or ``"triton"``; resolve ``"auto"``
    with ``resolve_attention`` first) over ``pool``. ``group`` is the GQA group (query heads per
    KV head) and ``max_batch`` the most sequences of a decode step (both size the Triton
    workspace); extra keyword arguments go to the backend.

    Raises:
        ValueError: on an unknown name.
    """
    if kind == "reference":
        return ReferenceAttention(pool, **kwargs)
    if kind == "triton":
        return TritonAttention(pool, group=group, max_batch=max_batch, **kwargs)
    raise ValueError(f"unknown attention backend {kind!r}: use reference or triton")
