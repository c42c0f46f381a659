"""Qwen3's forward on CUDA tensors through the Triton kernels (``models/qwen3.py`` holds the
modules and the torch path, and picks this one: ``Qwen3ForCausalLM._forward_fused``).

Per layer (vLLM's residual flow: each layer takes the previous sublayer's output ``h`` and the
stream before it): add + RMSNorm (``kernels/rmsnorm.py``), the qkv projection, q/k-norm + RoPE
(``kernels/qk_norm_rope.py``; with ``kv_store`` it also stores the step's K/V:
``kernels/qk_norm_rope_store.py``), attention, ``o_proj``, add + RMSNorm, gate/up with SwiGLU,
``down_proj``; a decode step may prefetch the next weights into L2 beside that chain
(``models/weight_prefetch.py``). With ``REDUCE_IN_NORM`` a split-K ``o_proj`` or ``down_proj``
(the narrow weights of the small models: ``kernels.tiles.gemv_split_k``) hands its partial sums to
the add + RMSNorm that follows, which adds them as the reduce kernel would
(``kernels/splitk.py``): the same bits, two launches a layer fewer. A step of 1 to 16 tokens
(decode) runs its projections through ``kernels/gemv.py`` (SwiGLU in the gate/up epilogue), a
longer one through cuBLAS and ``kernels/silu_mul.py``. With ``NORM_IN_GEMV`` a decode step
(``forward_norm_in_gemv``) has no norm kernel between its GEMVs: ``o_proj`` and ``down_proj`` add
the residual and form the next norm's operand, qkv and gate/up apply its rstd after the dot
(``kernels/gemv_norm.py``; a rounding change, so not the bits of the path above).

The numerics follow the torch path step by step (each rounding to the model dtype included);
only the float32 reduction order differs (and, in the SwiGLU, Triton's approximate float32
``exp`` and division).
"""

from __future__ import annotations

import torch
from torch import nn

import kernels.gemv
from kernels.decode_prologue import DecodePrologue
from kernels.gemv import MAX_ROWS, gemv, gemv_swiglu
from kernels.gemv_norm import gemv_residual_norm, gemv_rstd
from kernels.qk_norm_rope import qk_norm_rope
from kernels.qk_norm_rope_store import qk_norm_rope_store
from kernels.rmsnorm import rmsnorm
from kernels.silu_mul import silu_mul
from models.weight_prefetch import prefetcher_for

# Whether a split-K o_proj / down_proj leaves its reduce to the add + RMSNorm after it (module
# notes). On: the decode A/B (``benchmarks/decode_e2e.py --variants default+reduce_in_norm``)
# measured it faster (BENCHMARKS.md); results are the same bit for bit either way.
REDUCE_IN_NORM = True
# Whether a decode step folds the RMSNorms between the GEMVs into them (``kernels/gemv_norm.py``:
# the residual add and the next norm's inputs in ``o_proj`` / ``down_proj``, the norm's rstd
# after the dot of qkv / gate-up), where none of qkv, ``o_proj`` and ``down_proj`` runs split-K
# (``norm_in_gemv``): two launches a layer fewer. Not the unfused path's bits (the norm rounds
# differently). On: +0.8 to +1.2 % tok/s for the 8B, BF16 and INT8, 4k and 32k, on an H100
# (BENCHMARKS.md; the A/B:
# ``benchmarks/decode_e2e.py --variants default,default+norm_in_gemv`` with this flag False,
# or the shipped flags without it against ``default``).
NORM_IN_GEMV = True
# Whether a decode step's q/k-norm + RoPE and KV store run inside decode stage 1
# (``kernels/decode_prologue.py``), for a backend that takes the raw q, k and v
# (``attend_prologue``: ``infer.attention.TritonAttention``) over a 16-bit pool: two launches a
# layer fewer than q/k-norm + RoPE, the store and stage 1. Not the unfused path's bits: a row's
# sum of squares is reduced in another order. In a step of one token per row (a verify step's
# drafts), each program stores every row's key it reads (``store_read_keys``): programs run in
# no set order. On: +0.6 to +4.2 % tok/s (0.6B and 8B, BF16, 4k and 32k) on an H100
# (BENCHMARKS.md; the A/B: ``benchmarks/decode_e2e.py --variants default,default+
# attention_prologue`` with this flag False). INT8 pools keep the fused q/k-norm + RoPE + KV
# store launch (``models.qwen3.FUSED_KV_STORE_INT8``): the prologue measured slower there.
ATTENTION_PROLOGUE = True


def gemv_rows(x: torch.Tensor) -> bool:
    """Whether x [T, in] is a step for ``kernels/gemv.py`` (1 to 16 rows: decode)."""
    return 0 < x.shape[0] <= MAX_ROWS


def project(linear: nn.Linear, x: torch.Tensor, reduce: bool = True):
    """x [T, in] -> [T, out]; up to 16 rows (a decode step) through ``kernels/gemv.py``, more
    through ``linear`` (cuBLAS). ``reduce=False``: a split-K GEMV's result may come back as
    ``kernels.splitk.SplitKPartials`` (for ``kernels.rmsnorm.rmsnorm``)."""
    return gemv(x, linear.weight, reduce=reduce) if gemv_rows(x) else linear(x)


def attention_prologue(attn, qkv: torch.Tensor) -> bool:
    """Whether the step of ``qkv`` [T, q + 2 kv] hands its raw q, k and v to ``attn``
    (``ATTENTION_PROLOGUE``; a step of 1 to 16 tokens, which ``attn`` attends in decode stage 1
    when every sequence adds as many; a backend with ``attend_prologue``; a 16-bit pool)."""
    return (ATTENTION_PROLOGUE and gemv_rows(qkv) and hasattr(attn, "attend_prologue")
            and attn.layer_cache(0).k.dtype != torch.int8)


def attend(layer, qkv: torch.Tensor, positions: torch.Tensor, rotary, attn, meta,
           kv_store: bool) -> torch.Tensor:
    """Attention of one decoder layer from its qkv projection [T, q + 2 kv]: q/k-norm + RoPE,
    then ``attn`` (``kv_store``: the same launch stores K/V into ``attn``'s pool, and
    ``attn.attend_stored`` attends; ``attention_prologue``: ``attn`` gets the raw q, k, v and
    does both, inside decode stage 1 for a decode step; ``kv_store`` unused). Returns [T, q_size],
    before ``o_proj``."""
    a = layer.self_attn
    q, k, v = a._split_qkv(qkv)
    norm_rope = (a.q_norm.weight, a.k_norm.weight, a.q_norm.eps, positions,
                 rotary.inv_freq(qkv.device), rotary.attention_factor)
    if attention_prologue(attn, qkv):
        p = DecodePrologue(k, v, *norm_rope, meta.slot_mapping)
        return attn.attend_prologue(a.layer_idx, q, p, meta).reshape(q.shape[0], a.q_size)
    if kv_store:
        cache = attn.layer_cache(a.layer_idx)
        q = qk_norm_rope_store(q, k, v, *norm_rope, cache.k, cache.v, meta.slot_mapping,
                               cache.k_scale, cache.v_scale)
        return attn.attend_stored(a.layer_idx, q, meta).reshape(q.shape[0], a.q_size)
    q, k = qk_norm_rope(q, k, *norm_rope)
    return a._attend(q, k, v, attn, meta)


def layer_forward(layer, h, residual, positions, rotary, attn, meta, kv_store, prefetch=None):
    """One decoder layer with fused add + norm: ``h`` the previous sublayer's output [T, hidden],
    ``residual`` the stream before adding it (None at the first layer, where ``h`` is the
    embedding). ``prefetch``: a ``models.weight_prefetch.WeightPrefetcher`` forked after the qkv
    projection, or None. Returns (this MLP's output, the stream before adding it); the output
    is ``SplitKPartials`` where ``REDUCE_IN_NORM`` leaves a split-K ``down_proj`` unreduced."""
    norm, eps = layer.input_layernorm, layer.input_layernorm.eps
    if residual is None:
        residual, h = h, rmsnorm(h, norm.weight, eps)
    else:
        h, residual = rmsnorm(h, norm.weight, eps, residual)
    qkv = project(layer.self_attn.qkv_proj, h)
    if prefetch is not None:
        prefetch.after_qkv(layer.self_attn.layer_idx)
    o = attend(layer, qkv, positions, rotary, attn, meta, kv_store)
    reduce = not REDUCE_IN_NORM
    h, residual = rmsnorm(project(layer.self_attn.o_proj, o, reduce),
                          layer.post_attention_layernorm.weight, eps, residual)
    mlp = layer.mlp
    if gemv_rows(h):  # the output may be SplitKPartials: the next add + RMSNorm reduces it
        return gemv(gemv_swiglu(h, mlp.gate_up_proj.weight), mlp.down_proj.weight,
                    reduce=reduce), residual
    return mlp.down_proj(silu_mul(mlp.gate_up_proj(h))), residual


def norm_in_gemv(model, x: torch.Tensor) -> bool:
    """Whether the step of ``x`` [T, hidden] runs ``forward_norm_in_gemv``: ``NORM_IN_GEMV``, a
    decode step (``gemv_rows``), and the producers (``o_proj``, ``down_proj``) and the plain
    consumer (qkv) without split-K (the SwiGLU gate/up never splits); a GPU with more SMs may
    split a weight that 132 SMs do not."""
    if not (NORM_IN_GEMV and gemv_rows(x)):
        return False
    layer = model.model.layers[0]
    weights = (layer.self_attn.qkv_proj.weight, layer.self_attn.o_proj.weight,
               layer.mlp.down_proj.weight)
    return all(kernels.gemv.gemv_tiles(x.device, x.dtype, *w.shape, swiglu=False).split_k == 1
               for w in weights)


def forward_norm_in_gemv(model, x: torch.Tensor, positions: torch.Tensor, attn, meta, *,
                         kv_store: bool) -> torch.Tensor:
    """``forward_fused`` for a decode step with the norms inside the GEMVs (``NORM_IN_GEMV``):
    the first layer's input norm and the final norm stay kernels of their own (the final one on
    the last ``down_proj``'s stream, the same bits as the add + RMSNorm), every other norm is
    ``kernels.gemv_norm``'s producer / consumer pair. Same arguments and result."""
    m = model.model
    layers = m.layers
    stream, pending = x, None
    h = rmsnorm(x, layers[0].input_layernorm.weight, layers[0].input_layernorm.eps)
    prefetch = prefetcher_for(model, x)
    for i, layer in enumerate(layers):
        a = layer.self_attn
        qkv = gemv(h, a.qkv_proj.weight) if pending is None else gemv_rstd(pending,
                                                                           a.qkv_proj.weight)
        if prefetch is not None:
            prefetch.after_qkv(a.layer_idx)
        o = attend(layer, qkv, positions, m.rotary, attn, meta, kv_store)
        post = layer.post_attention_layernorm
        stream, pending = gemv_residual_norm(o, a.o_proj.weight, stream, post.weight, post.eps)
        act = gemv_rstd(pending, layer.mlp.gate_up_proj.weight, swiglu=True)
        # the last layer's producer leaves the final norm's inputs unused: the same kernel as
        # every other down_proj's (one compile fewer than a plain GEMV here)
        nxt = layers[i + 1].input_layernorm if i + 1 < len(layers) else m.norm
        stream, pending = gemv_residual_norm(act, layer.mlp.down_proj.weight, stream,
                                             nxt.weight, nxt.eps)
    if prefetch is not None:
        prefetch.join()
    return rmsnorm(stream, m.norm.weight, m.norm.eps)


def forward_fused(model, x: torch.Tensor, positions: torch.Tensor, attn, meta, *,
                  kv_store: bool) -> torch.Tensor:
    """``Qwen3ForCausalLM.forward`` from the embeddings ``x`` [T, hidden]: [T, hidden] after the
    final norm. ``kv_store``: module notes."""
    if norm_in_gemv(model, x):
        return forward_norm_in_gemv(model, x, positions, attn, meta, kv_store=kv_store)
    m = model.model
    residual = None
    prefetch = prefetcher_for(model, x) if gemv_rows(x) else None
    for layer in m.layers:
        x, residual = layer_forward(layer, x, residual, positions, m.rotary, attn, meta,
                                    kv_store, prefetch)
    if prefetch is not None:
        prefetch.join()
    if residual is None:
        return rmsnorm(x, m.norm.weight, m.norm.eps)
    return rmsnorm(x, m.norm.weight, m.norm.eps, residual)[0]
