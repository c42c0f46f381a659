"""The step's q/k-norm + RoPE and its K/V store inside split-KV decode stage 1 (the prologue).

Without it a decode layer runs three kernels between the qkv projection and the attention's
combine: q/k-norm + RoPE (``kernels/qk_norm_rope.py``), the KV store (``kernels/store_kv.py``)
and stage 1 (``kernels/decode_split.py``). With a ``DecodePrologue`` stage 1 takes the raw
q, k and v (views into the qkv projection's output) and does the other two itself:

- every program normalizes and rotates the q rows it attends (``norm_rope_rows``: a few KB from
  L2, recomputed by each split of a (sequence, KV head));
- a program stores, before it walks its key blocks, every new key (normalized and rotated) and
  value of the step that it will read there, and a CTA barrier orders those stores before its
  own loads. With several tokens per sequence, one program holds all of a sequence's rows, and
  the splits partition the blocks: each new (token, KV head) is stored once, by the program that
  reads it (``store_new_kv``). With one token per row (the graph runner's steps) rows may be one
  sequence's queries (a speculative verify step), and a later row reads the keys that earlier
  rows add; programs of one launch run in no set order, so each program stores every row's key
  that it reads itself (``store_read_keys``: the row's position in its blocks and below its own
  length, and its slot the one its page table gives there). A key read by several programs is
  written by each, with the same bits.

Its cos/sin come from ``positions`` and ``inv_freq`` (no chain kernel writes them), so a stage 1
launched early on the PDL chain computes those of its first token, a ``[HEAD_DIM]`` row, before it
waits for the qkv projection. Steps of more tokens per program (a verify step's slab, a short
prompt) loop over the rest after the wait, one token's rows at a time, so that no ``[rows,
HEAD_DIM]`` table of angles is held.

16-bit pools only. With an INT8 pool (then one-warp programs, 8 per SM, ~130 splits per KV head)
the q-norm that every split recomputes made the step 6-22 % slower than the fused q/k-norm + RoPE
+ KV store launch (``kernels/qk_norm_rope_store.py``) that INT8 decode steps keep (BENCHMARKS.md);
with the 4-warp INT8 tile (4 programs per SM, 66 splits) that replaced it, still 0.2-3 % slower.

Numerics: the element-wise steps and their roundings to the model dtype are those of
``qk_norm_rope``; the row's sum of squares is reduced over the whole row at once instead of over
its two halves, so a row's rstd may differ from the unfused path's in its last float32 bit (the
tests' tolerance). The rotate-half pairs are formed in the full
``[rows, HEAD_DIM]`` layout: element ``d`` reads its partner at ``(d + HEAD_DIM / 2) % HEAD_DIM``,
a second load of the same L2 lines, and takes ``-sin`` below the half, ``+sin`` above.

Fusion after TensorRT-LLM's and FlashInfer's decode attention with RoPE applied inside the
attention kernel ("pos_encoding_mode"), with Qwen3's q/k-norm and the paged KV write folded in as
in ``kernels/qk_norm_rope_store.py``.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from kernels.qk_norm_rope import _check_inputs as _check_qk_inputs
from kernels.qk_norm_rope import rope_trig
from kernels.store_kv import _check_inputs as _check_store_inputs


class DecodePrologue(NamedTuple):
    """What stage 1 needs to normalize, rotate and store the step's new tokens itself.

    Attributes:
        k, v: [T, kv_heads, head_dim] raw keys (before k-norm and RoPE) and values, q's dtype,
            last dim contiguous (views into the qkv projection's output are fine).
        q_weight, k_weight: [head_dim] the q_norm and k_norm weights, q's dtype.
        eps: the RMSNorm epsilon.
        positions: int64 [T], each token's position (RoPE).
        inv_freq: float32 [head_dim // 2] (``models.rope.rope_parameters``).
        attention_factor: multiplies cos and sin (YaRN's mscale; 1.0 without YaRN).
        slot_mapping: int64 [T], the pool slot of each token (negative: nothing stored).

    ``q_weight``, ``k_weight``, ``positions``, ``inv_freq`` and ``slot_mapping`` contiguous.
    """

    k: torch.Tensor
    v: torch.Tensor
    q_weight: torch.Tensor
    k_weight: torch.Tensor
    eps: float
    positions: torch.Tensor
    inv_freq: torch.Tensor
    attention_factor: float
    slot_mapping: torch.Tensor


def prologue_args(prologue: DecodePrologue | None, q: torch.Tensor, k_cache: torch.Tensor,
                  v_cache: torch.Tensor, k_scale: torch.Tensor | None,
                  v_scale: torch.Tensor | None, num_rows: int) -> dict:
    """Stage 1's prologue parameters for ``prologue`` (None: placeholders, never read);
    ``num_rows``: the step's B (sequences, or one-token rows).

    Raises:
        ValueError: naming the argument, on what ``kernels.qk_norm_rope.qk_norm_rope`` or
            ``kernels.store_kv.store_kv`` would reject for these tensors.
    """
    if prologue is None:
        return dict(k_new_ptr=q, v_new_ptr=q, qw_ptr=q, kw_ptr=q, pos_ptr=q, inv_freq_ptr=q,
                    slot_ptr=q, eps=0.0, attention_factor=1.0, stride_kt=0, stride_kh=0,
                    stride_vt=0, stride_vh=0, num_rows=0, PROLOGUE=False, PRECISE_TRIG=False)
    p = prologue
    if k_cache.dtype == torch.int8:
        raise ValueError("decode_attention: the prologue takes a 16-bit pool (an INT8 pool's "
                         "step stores through kernels.qk_norm_rope_store)")
    _check_qk_inputs("decode_attention", q, p.k, p.q_weight, p.k_weight, p.positions, p.inv_freq)
    _check_store_inputs("decode_attention", p.k, p.v, k_cache, v_cache, p.slot_mapping, k_scale,
                        v_scale)
    return dict(k_new_ptr=p.k, v_new_ptr=p.v, qw_ptr=p.q_weight, kw_ptr=p.k_weight,
                pos_ptr=p.positions, inv_freq_ptr=p.inv_freq, slot_ptr=p.slot_mapping,
                eps=float(p.eps), attention_factor=float(p.attention_factor),
                stride_kt=p.k.stride(0), stride_kh=p.k.stride(1), stride_vt=p.v.stride(0),
                stride_vh=p.v.stride(1), num_rows=num_rows, PROLOGUE=True,
                PRECISE_TRIG=os.environ.get("TRITON_INTERPRET") != "1")


@triton.jit
def rope_cos_sin(pos, inv_freq_ptr, attention_factor, HEAD_DIM: tl.constexpr,
                 DTYPE: tl.constexpr, PRECISE_TRIG: tl.constexpr):
    """cos and sin of the angles at ``pos`` (an int64 scalar) for each element ``d`` of a head
    row (pair ``d % (HEAD_DIM / 2)``), times ``attention_factor``, rounded to ``DTYPE``: float32
    [HEAD_DIM]. The math of ``kernels.qk_norm_rope._rope_cos_sin``."""
    offs_d = tl.arange(0, HEAD_DIM)
    freqs = pos.to(tl.float32) * tl.load(inv_freq_ptr + offs_d % (HEAD_DIM // 2))
    return rope_trig(freqs, attention_factor, DTYPE, PRECISE_TRIG)


@triton.jit
def norm_rope_rows(row_ptr, valid, w_ptr, cos, sin, eps, HEAD_DIM: tl.constexpr):
    """RMSNorm (weight at ``w_ptr``) then rotate-half RoPE of the head rows at ``row_ptr``
    ([R] pointers, rows where not ``valid`` read as 0): [R, HEAD_DIM] in the rows' dtype.
    ``cos``/``sin``: the rows' float32 [HEAD_DIM] from ``rope_cos_sin``. The steps and
    roundings of ``kernels.qk_norm_rope._norm_rope_halves`` (module notes)."""
    dtype = row_ptr.dtype.element_ty
    HALF: tl.constexpr = HEAD_DIM // 2
    offs_d = tl.arange(0, HEAD_DIM)
    rot = (offs_d + HALF) % HEAD_DIM  # each element's rotate-half partner
    x = tl.load(row_ptr[:, None] + offs_d[None, :], mask=valid[:, None], other=0.0)
    xr = tl.load(row_ptr[:, None] + rot[None, :], mask=valid[:, None], other=0.0)
    x = x.to(tl.float32)
    xr = xr.to(tl.float32)
    rstd = tl.math.rsqrt(tl.sum(x * x, axis=1) / HEAD_DIM + eps)
    w = tl.load(w_ptr + offs_d).to(tl.float32)
    wr = tl.load(w_ptr + rot).to(tl.float32)
    n = (w[None, :] * (x * rstd[:, None]).to(dtype).to(tl.float32)).to(dtype).to(tl.float32)
    nr = (wr[None, :] * (xr * rstd[:, None]).to(dtype).to(tl.float32)).to(dtype).to(tl.float32)
    a = (n * cos[None, :]).to(dtype).to(tl.float32)
    b = (nr * sin[None, :]).to(dtype).to(tl.float32)
    return tl.where(offs_d[None, :] < HALF, a - b, a + b).to(dtype)


@triton.jit
def store_new_kv(tok0, first, n_tok, lo, hi, cos0, sin0, pos_ptr, inv_freq_ptr,
                 attention_factor, k_new_ptr, v_new_ptr, kw_ptr, slot_ptr, eps, stride_kt,
                 stride_kh, stride_vt, stride_vh, h, k_head_ptr, v_head_ptr,
                 NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
                 PRECISE_TRIG: tl.constexpr):
    """A step of several tokens per sequence (one program holds all of a sequence's rows):
    store KV head ``h``'s new keys and values of the step's tokens ``tok0 + i`` (at positions
    ``first + i``, ``i < n_tok``) whose position lies in ``[lo, hi)`` (this program's key
    blocks), one token at a time (``store_token``). ``cos0``/``sin0``: token ``tok0``'s."""
    for i in range(tl.maximum(lo - first, 0), tl.minimum(hi - first, n_tok)):
        tok = tok0 + i
        if i == 0:
            cos, sin = cos0, sin0
        else:
            cos, sin = rope_cos_sin(tl.load(pos_ptr + tok), inv_freq_ptr, attention_factor,
                                    HEAD_DIM, k_new_ptr.dtype.element_ty, PRECISE_TRIG)
        store_token(tok, cos, sin, k_new_ptr, v_new_ptr, kw_ptr, slot_ptr, eps, stride_kt,
                    stride_kh, stride_vt, stride_vh, h, k_head_ptr, v_head_ptr, NUM_KV_HEADS,
                    HEAD_DIM, PAGE_SIZE)


@triton.jit
def store_read_keys(tok0, num_rows, seq_len, lo, hi, cos0, sin0, seq_lens_ptr, pt_row_ptr,
                    pos_ptr, inv_freq_ptr, attention_factor, k_new_ptr, v_new_ptr, kw_ptr,
                    slot_ptr, eps, stride_kt, stride_kh, stride_vt, stride_vh, h, k_head_ptr,
                    v_head_ptr, NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
                    PAGE_SIZE: tl.constexpr, PRECISE_TRIG: tl.constexpr):
    """A step of one token per row (``num_rows`` rows; rows may be one sequence's queries, as
    in a speculative verify step): store KV head ``h``'s new key and value of every row ``r``
    whose key this program reads, i.e. at a position ``seq_lens[r] - 1`` in ``[lo, hi)`` (its
    blocks), below its own ``seq_len``, at the slot this program's page table (``pt_row_ptr``)
    gives for that position. A key that several programs read is stored by each of them, with
    the same bits (the same code on the same inputs). ``cos0``/``sin0``: row ``tok0``'s."""
    for r in range(0, num_rows):
        p = tl.load(seq_lens_ptr + r) - 1
        slot = tl.load(slot_ptr + r)
        if (p >= lo) & (p < hi) & (p < seq_len) & (slot >= 0):
            page = tl.load(pt_row_ptr + p // PAGE_SIZE).to(tl.int64)
            if page * PAGE_SIZE + p % PAGE_SIZE == slot:
                if r == tok0:
                    cos, sin = cos0, sin0
                else:
                    cos, sin = rope_cos_sin(tl.load(pos_ptr + r), inv_freq_ptr,
                                            attention_factor, HEAD_DIM,
                                            k_new_ptr.dtype.element_ty, PRECISE_TRIG)
                store_token(r, cos, sin, k_new_ptr, v_new_ptr, kw_ptr, slot_ptr, eps,
                            stride_kt, stride_kh, stride_vt, stride_vh, h, k_head_ptr,
                            v_head_ptr, NUM_KV_HEADS, HEAD_DIM, PAGE_SIZE)


@triton.jit
def store_token(tok, cos, sin, k_new_ptr, v_new_ptr, kw_ptr, slot_ptr, eps, stride_kt,
                stride_kh, stride_vt, stride_vh, h, k_head_ptr, v_head_ptr,
                NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr):
    """Normalize and rotate KV head ``h``'s new key of step token ``tok`` (``cos``/``sin``: its
    position's) and store it and the raw value at the token's slot (negative: nothing). The pool
    is addressed as stage 1 reads it: ``*_head_ptr`` are head ``h``'s bases of the contiguous
    16-bit K and V pools."""
    offs_d = tl.arange(0, HEAD_DIM)
    one = tl.arange(0, 2) == 0  # a two-row tile holding one token (row 0)
    slot = tl.load(slot_ptr + tok)
    mine = one & (slot >= 0)
    page = tl.where(mine, slot // PAGE_SIZE, 0)
    off = tl.where(mine, slot % PAGE_SIZE, 0)
    k = norm_rope_rows(tl.where(one, k_new_ptr + tok * stride_kt + h * stride_kh, k_new_ptr),
                       mine, kw_ptr, cos, sin, eps, HEAD_DIM)
    v_row = tl.where(one, v_new_ptr + tok * stride_vt + h * stride_vh, v_new_ptr)
    v = tl.load(v_row[:, None] + offs_d[None, :], mask=mine[:, None], other=0.0)
    page_off = page * (NUM_KV_HEADS * PAGE_SIZE * HEAD_DIM)
    kv_off = (page_off + off * HEAD_DIM)[:, None] + offs_d[None, :]
    tl.store(k_head_ptr + kv_off, k.to(k_head_ptr.dtype.element_ty), mask=mine[:, None])
    tl.store(v_head_ptr + kv_off, v.to(v_head_ptr.dtype.element_ty), mask=mine[:, None])
