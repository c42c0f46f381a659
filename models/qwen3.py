"""Qwen3 dense decoder (Qwen Team 2025, "Qwen3 Technical Report") as plain nn.Modules.

Design (after nano-vllm ``models/qwen3.py``): module attribute names equal the Hugging Face
checkpoint names, except for two fusions declared in ``packed_modules_mapping``: q/k/v projections
are one ``qkv_proj`` matmul and gate/up one ``gate_up_proj`` matmul (fewer kernel launches per
decode step). The loader (``models/loader.py``) copies each checkpoint tensor into its rows.

The model takes a flat token stream (no batch dim): ``forward(input_ids [T], positions [T],
attn, meta)``. Attention is a pluggable call ``attn(layer_idx, q, k, v, meta) -> o`` that owns the
KV cache; ``attn=None`` runs plain dense causal attention over the T tokens as one sequence
(``kernels.reference.dense_causal_attention``), which is what the tests compare to transformers.

Numerics follow transformers' Qwen3: RMSNorm normalizes in float32, casts back to the model dtype,
then multiplies by the weight; q/k get a per-head RMSNorm before RoPE; residual adds and matmuls
run in the model dtype; logits are computed in the model dtype and returned as float32.

On CUDA tensors (``FUSED_KERNELS`` and the model's ``use_fused_kernels``, both True by default) the
forward runs through the Triton kernels instead of ~20 small torch ops per layer
(``models/qwen3_fused.py``: fused add + RMSNorm, q/k-norm + RoPE, the decode GEMVs); the lm_head
of a decode step runs through ``kernels/gemv.py``. They follow the same numerics step by step up
to the float32 reduction order. The CPU path is the torch code below, unchanged.

With an attention backend that attends to K/V already in its pool (``StoredKVAttention``:
``infer.attention.TritonAttention``) and ``FUSED_KV_STORE`` (off by default; on for INT8 pools'
decode steps: ``FUSED_KV_STORE_INT8``), q/k-norm + RoPE also store the step's K/V into the
pool in the same launch (``kernels/qk_norm_rope_store.py``) and the backend stores nothing: one
launch per layer fewer, bit for bit the unfused pair. With ``models.qwen3_fused.ATTENTION_PROLOGUE``
(off) a 16-bit pool's decode step does both inside decode stage 1 instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from kernels import reference
from models.config import Qwen3Config
from models.qwen3_fused import forward_fused, gemv_rows, project
from models.rope import RotaryEmbedding, apply_rope

# Use the fused Triton kernels for CUDA tensors (False: always the torch path).
FUSED_KERNELS = True
# K/V stored in the q/k-norm + RoPE launch (``StoredKVAttention`` backends), for every pool: off,
# level at 4k and 0.4 % slower at 32k with BF16 on the H200 (stage 1 must wait for q before it
# walks any key; BENCHMARKS.md; the A/B: ``benchmarks/decode_e2e.py --variants
# default,default+fused_store``). For INT8 pools' decode steps (``FUSED_KV_STORE_INT8``), whose
# store costs about 3x BF16's, on: +0.3 to +0.4 % (8B) and +0.3 to +2.2 % (0.6B) on an H100;
# not for their prefill chunks, where it cost 1-2 % of the time to the first token.
FUSED_KV_STORE = False
FUSED_KV_STORE_INT8 = True

AttnFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor, object], torch.Tensor]


@runtime_checkable
class StoredKVAttention(Protocol):
    """An ``AttnFn`` that can also attend to K/V the caller stored (``infer.attention``'s
    ``TritonAttention``): ``layer_cache(i)`` has ``k``, ``v``, ``k_scale``, ``v_scale`` as
    ``kernels.store_kv`` takes them; ``attend_stored(i, q, meta)`` is the call without the store
    (this step's K/V already at ``meta.slot_mapping``)."""

    def __call__(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 meta) -> torch.Tensor: ...

    def layer_cache(self, layer_idx: int): ...

    def attend_stored(self, layer_idx: int, q: torch.Tensor, meta) -> torch.Tensor: ...


def fused_kv_store(attn, x: torch.Tensor) -> bool:
    """Whether q/k-norm + RoPE store the K/V of the step of ``x`` [T, hidden] for ``attn``
    (module notes): a ``StoredKVAttention`` with ``FUSED_KV_STORE``, or with
    ``FUSED_KV_STORE_INT8``, an INT8 pool and a decode step (1 to 16 tokens: ``gemv_rows``)."""
    if not isinstance(attn, StoredKVAttention):
        return False
    return FUSED_KV_STORE or (FUSED_KV_STORE_INT8 and gemv_rows(x)
                              and attn.layer_cache(0).k.dtype == torch.int8)


class RMSNorm(nn.Module):
    """RMSNorm (Zhang & Sennrich 2019) over the last dim, transformers' Qwen3 formulation."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [..., dim] any float dtype -> same shape and dtype."""
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class Qwen3Attention(nn.Module):
    def __init__(self, config: Qwen3Config, layer_idx: int):
        super().__init__()
        c = config
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = (
            c.num_attention_heads, c.num_key_value_heads, c.head_dim)
        self.q_size, self.kv_size = c.q_size, c.kv_size
        self.sm_scale = 1.0 / math.sqrt(c.head_dim)
        self.qkv_proj = nn.Linear(c.hidden_size, c.q_size + 2 * c.kv_size, bias=False)
        self.o_proj = nn.Linear(c.q_size, c.hidden_size, bias=False)
        self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps)
        self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                attn: AttnFn | None, meta) -> torch.Tensor:
        """x: [T, hidden]; cos/sin: [T, head_dim]. Returns [T, hidden]."""
        q, k, v = self._split_qkv(self.qkv_proj(x))
        q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return self.o_proj(self._attend(q, k, v, attn, meta))

    def _split_qkv(self, qkv: torch.Tensor):
        """qkv: [T, q + 2 kv] (the qkv projection) -> q (T, Hq, D), k and v (T, Hkv, D), views."""
        t = qkv.shape[0]
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        return (q.view(t, self.num_heads, self.head_dim),
                k.view(t, self.num_kv_heads, self.head_dim),
                v.view(t, self.num_kv_heads, self.head_dim))

    def _attend(self, q, k, v, attn: AttnFn | None, meta) -> torch.Tensor:
        """Attention output [T, q_size] (before o_proj)."""
        if attn is None:
            o = reference.dense_causal_attention(q, k, v, self.sm_scale).to(q.dtype)
        else:
            o = attn(self.layer_idx, q, k, v, meta)
        return o.reshape(q.shape[0], self.q_size)


class Qwen3MLP(nn.Module):
    def __init__(self, config: Qwen3Config):
        super().__init__()
        self.intermediate_size = config.intermediate_size
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(reference.silu_mul(self.gate_up_proj(x)))


class Qwen3DecoderLayer(nn.Module):
    def __init__(self, config: Qwen3Config, layer_idx: int):
        super().__init__()
        self.self_attn = Qwen3Attention(config, layer_idx)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x, cos, sin, attn, meta):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, attn, meta)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3Model(nn.Module):
    def __init__(self, config: Qwen3Config):
        super().__init__()
        self.rotary = RotaryEmbedding(config.head_dim, config.rope_theta, config.rope_scaling)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            Qwen3DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class Qwen3ForCausalLM(nn.Module):
    """Qwen3 causal LM over a flat token stream.

    Parameter names are the checkpoint's except for the fusions in ``packed_modules_mapping``
    (checkpoint name part -> (module name part, shard index)). With ``tie_word_embeddings`` the
    ``lm_head.weight`` parameter is the embedding matrix itself.
    """

    use_fused_kernels = True  # set False on an instance to force the torch path on CUDA

    packed_modules_mapping = {
        "q_proj": ("qkv_proj", 0),
        "k_proj": ("qkv_proj", 1),
        "v_proj": ("qkv_proj", 2),
        "gate_proj": ("gate_up_proj", 0),
        "up_proj": ("gate_up_proj", 1),
    }

    def __init__(self, config: Qwen3Config):
        super().__init__()
        self.config = config
        self.model = Qwen3Model(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.tie_weights()

    def tie_weights(self) -> None:
        """Make lm_head share the embedding matrix (call again after ``to_empty``)."""
        self.lm_head.weight = self.model.embed_tokens.weight

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embed_tokens.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    def packed_shards(self) -> dict[str, list[int]]:
        """Row sizes of each fused module's parts, in shard order (for the loader)."""
        c = self.config
        return {"qkv_proj": [c.q_size, c.kv_size, c.kv_size],
                "gate_up_proj": [c.intermediate_size, c.intermediate_size]}

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                attn: AttnFn | None = None, meta=None) -> torch.Tensor:
        """Run the decoder over a flat stream of tokens.

        Args:
            input_ids: int64 [T] token ids (< vocab_size).
            positions: int64 [T] on the same device, each token's position in its sequence
                (used for RoPE only; never read on the host).
            attn: ``attn(layer_idx, q [T,Hq,D], k [T,Hkv,D], v [T,Hkv,D], meta) -> [T,Hq,D]``
                in the model dtype, with q/k after q_norm/k_norm and RoPE; it stores k/v itself
                (a ``StoredKVAttention`` may get them stored: ``FUSED_KV_STORE``). None: dense
                causal attention over the T tokens as one sequence.
            meta: passed through to ``attn`` (an ``infer.meta.AttnMeta``).

        Returns:
            [T, hidden] in the model dtype, after the final norm.
        """
        x = self.model.embed_tokens(input_ids)  # (T, hidden)
        if x.is_cuda and FUSED_KERNELS and self.use_fused_kernels:
            return self._forward_fused(x, positions, attn, meta)
        cos, sin = self.model.rotary.cos_sin(positions, x.dtype)  # (T, D) each
        for layer in self.model.layers:
            x = layer(x, cos, sin, attn, meta)
        return self.model.norm(x)

    def _forward_fused(self, x, positions, attn, meta) -> torch.Tensor:
        """``forward`` with the Triton kernels (``models/qwen3_fused.py``); x: the embeddings."""
        return forward_fused(self, x, positions, attn, meta, kv_store=fused_kv_store(attn, x))

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [N, hidden] (rows of ``forward``'s output) -> float32 logits [N, vocab],
        computed in the model dtype (up to 16 rows on CUDA: ``kernels/gemv.py``)."""
        if hidden.is_cuda and FUSED_KERNELS and self.use_fused_kernels:
            return project(self.lm_head, hidden).float()
        return self.lm_head(hidden).float()
