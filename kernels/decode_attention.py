"""Split-KV decode attention over the paged pool (flash-decoding stage 1) and its launcher.

Each step adds the same ``n`` (1..16) new tokens to each of ``B`` sequences. One program takes one
(sequence, KV head) and one of ``NUM_SPLITS`` slices of that sequence's keys:

- GQA packing: the ``n * group`` (query token, query head) pairs that share the KV head are the
  rows of one tile (row ``r = t * group + g``), padded to ``ROWS >= 16`` for the tensor-core dot;
  q is loaded once and each key/value tile once per group.
- Keys are walked ``BLOCK_N`` positions per iteration (one page, part of a page, or several pages
  gathered through the page table). Scores are float32, scaled by ``sm_scale * log2(e)`` and
  exponentiated with ``exp2`` (online softmax, FlashAttention-2). P is cast to the query dtype for
  the P.V dot.
- The split's blocks are ``[s * nb // S, (s + 1) * nb // S)`` of the ``nb = cdiv(seq_len, BLOCK_N)``
  blocks, computed on device from ``seq_lens``: the grid ``(B * kv_heads, NUM_SPLITS)`` never
  depends on the context length, so a captured CUDA graph stays valid as sequences grow.
- Blocks wholly before the first query's position (``seq_len - n``) run without any mask; only the
  last block(s) mask keys by ``pos <= seq_len - n + t`` (causal) and loads by ``pos < seq_len``,
  so stale data or NaN in unused slots of the last page is never read.
- INT8 pools: int8 codes are loaded and converted in registers; each key's scale multiplies its
  score column and each value's scale its probability before P.V (no dequantized copy). The
  conversion (``INT8_MAGIC``) is 0: ``cvt`` to the query dtype (a low-throughput instruction: the
  kernel was issue-bound, not memory-bound); 1: the "magic number" trick of FasterTransformer /
  Marlin with integer ops only: ``(uint8(c) ^ 0x6480)`` is the fp16 bit pattern of ``1152 + c``,
  minus 1152.0 gives ``c`` exactly; 2: the same trick in inline PTX on four packed codes at once
  (one ``xor``, two ``prmt``, two ``sub.f16x2`` per four codes; GPU only, runs as 1 under the
  interpreter); 3: as 2, but the keys and values are loaded as int32 words (four codes each) and
  unpacked into plain float16 tiles (``_int8_words_to_f16``). Why 3: the P.V dot needs each thread's
  value operand as pairs of consecutive *keys* (one column, rows ``D`` bytes apart); with 0-2
  Triton moves the conversion after the shared-memory load, which then reads single bytes
  (``ld.shared.b8``, 64 per thread per 64-key block); with 3 the int8 tile is read as 16-byte
  words and the float16 tile goes through ``ldmatrix.trans`` as for BF16 (PTX compiled for
  sm_90 on a CPU). With 1-3 the dots run in float16 (q converted once; P times the value scales
  in float16), unless q is float32.
- Output per split (contract in ``kernels/combine.py``): float32 ``o_part`` normalized within the
  split and natural-log ``lse``; an empty split (or a row whose keys are all masked) writes
  ``lse = -inf`` and zeros.
- Fused combine (``fuse_combine=True``, constexpr ``FUSE_COMBINE``): no second launch. After a
  program has stored its partial, its threads meet at a barrier and one thread adds 1 to the
  int32 counter of its (sequence, KV head) with ``atom.add.acq_rel.gpu``; the program that gets
  back ``NUM_SPLITS - 1`` arrived last, merges all ``NUM_SPLITS`` partials of its rows straight
  into ``out`` (``kernels/combine.py`` ``_merge_splits``) and sets the counter back to 0, so the
  next call, and the next replay of a captured CUDA graph, starts from zero; the others exit.
  Ordering: each thread's partial stores precede the CTA barrier, which precedes the release
  half of the atomic (GPU scope; the release covers what other threads of the CTA wrote before
  the barrier, as in CUTLASS's ``Barrier::arrive_inc``); the counter's atomic adds form one
  chain, so the acquire half of the last one synchronizes with every earlier release, and the
  last program's loads (after the barrier that broadcasts the count; ``.cg``: from L2, past the
  non-coherent L1) see every partial. Nobody waits on anybody (no spin loop, hence no
  co-residency or cooperative launch). The pattern is the "last block done" reduction of the
  CUDA ``threadFenceReduction`` sample and CUTLASS's serial split-K reduction (``Semaphore``,
  ``Barrier``); FlashInfer's persistent attention also merges in its one launch, behind a
  grid-wide barrier.

Design after vLLM's ``triton_decode_attention.py`` (``_fwd_grouped_kernel_stage1``) and
flash-decoding (Dao et al. 2023); online softmax from FlashAttention-2 (Dao 2023).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels.checks import check_int8_scales
from kernels.combine import _merge_splits, combine, merge_tiles
from kernels.decode_plan import (  # noqa: F401  (re-exported: the launcher's public helpers)
    TILE_DEFAULTS,
    DecodeWorkspace,
    default_num_splits,
    tile_defaults,
)

_LOG2E = 1.4426950408889634
_LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _int8_to_f16_biased(c, MODE: tl.constexpr):
    """``1152 + c`` exactly in float16 for a tile of int8 codes (the magic number without its
    subtraction, which ``FOLD_OFFSET`` moves into the dots): MODE 2 packed inline PTX, else
    integer ops."""
    if MODE == 2:
        return tl.inline_asm_elementwise(
            asm="""{
            .reg .b32 t;
            xor.b32 t, $2, 0x80808080;
            prmt.b32 $0, t, 0x64646464, 0x4140;
            prmt.b32 $1, t, 0x64646464, 0x4342;
            }""",
            constraints="=r,=r,r", args=[c], dtype=tl.float16, is_pure=True, pack=4)
    else:
        u = c.to(tl.uint8, bitcast=True).to(tl.uint16)
        return (u ^ 0x6480).to(tl.float16, bitcast=True)


@triton.jit
def _int8_to_f16(c, MODE: tl.constexpr):
    """Exact int8 -> float16 of a tile of codes: MODE 1 integer ops, MODE 2 packed inline PTX."""
    if MODE == 2:
        return tl.inline_asm_elementwise(
            asm="""{
            .reg .b32 t, m;
            xor.b32 t, $2, 0x80808080;
            prmt.b32 $0, t, 0x64646464, 0x4140;
            prmt.b32 $1, t, 0x64646464, 0x4342;
            mov.b32 m, 0x64806480;
            sub.f16x2 $0, $0, m;
            sub.f16x2 $1, $1, m;
            }""",
            constraints="=r,=r,r", args=[c], dtype=tl.float16, is_pure=True, pack=4)
    else:
        u = c.to(tl.uint8, bitcast=True).to(tl.uint16)
        return (u ^ 0x6480).to(tl.float16, bitcast=True) - 1152.0


@triton.jit
def _int8_words_to_f16(w, ON_GPU: tl.constexpr, BIASED: tl.constexpr = False):
    """Exact float16 of the four int8 codes packed in each int32 of ``w`` [R, C] -> [R, 4 * C].

    Code ``k`` of a word (byte ``k``, little-endian) lands at column ``4 * c + k``. On the GPU one
    ``xor``, two ``prmt`` and two ``sub.f16x2`` per word (the magic number of ``_int8_to_f16``);
    under the interpreter the same values by integer ops. The join/reshape makes the float16
    tile in a plain blocked layout, so the dot takes it through ``ldmatrix`` like a 16-bit tile
    instead of loading single bytes of shared memory in the dot-operand layout.
    """
    if ON_GPU and BIASED:
        c0, c1, c2, c3 = tl.inline_asm_elementwise(
            asm="""{
            .reg .b32 t, lo, hi;
            xor.b32 t, $4, 0x80808080;
            prmt.b32 lo, t, 0x64646464, 0x4140;
            prmt.b32 hi, t, 0x64646464, 0x4342;
            mov.b32 {$0, $1}, lo;
            mov.b32 {$2, $3}, hi;
            }""",
            constraints="=h,=h,=h,=h,r", args=[w],
            dtype=(tl.float16, tl.float16, tl.float16, tl.float16), is_pure=True, pack=1)
    elif ON_GPU:
        c0, c1, c2, c3 = tl.inline_asm_elementwise(
            asm="""{
            .reg .b32 t, lo, hi, m;
            xor.b32 t, $4, 0x80808080;
            prmt.b32 lo, t, 0x64646464, 0x4140;
            prmt.b32 hi, t, 0x64646464, 0x4342;
            mov.b32 m, 0x64806480;
            sub.f16x2 lo, lo, m;
            sub.f16x2 hi, hi, m;
            mov.b32 {$0, $1}, lo;
            mov.b32 {$2, $3}, hi;
            }""",
            constraints="=h,=h,=h,=h,r", args=[w],
            dtype=(tl.float16, tl.float16, tl.float16, tl.float16), is_pure=True, pack=1)
    else:
        u = w.to(tl.uint32, bitcast=True)
        off = 0.0 if BIASED else 1152.0  # BIASED: 1152 + c, the offset left to the caller
        c0 = ((u & 0xFF).to(tl.uint16) ^ 0x6480).to(tl.float16, bitcast=True) - off
        c1 = (((u >> 8) & 0xFF).to(tl.uint16) ^ 0x6480).to(tl.float16, bitcast=True) - off
        c2 = (((u >> 16) & 0xFF).to(tl.uint16) ^ 0x6480).to(tl.float16, bitcast=True) - off
        c3 = (((u >> 24) & 0xFF).to(tl.uint16) ^ 0x6480).to(tl.float16, bitcast=True) - off
    x = tl.join(tl.join(c0, c2), tl.join(c1, c3))  # [R, C, 2, 2]: (i, o) holds code 2i + o
    return tl.reshape(x, [w.shape[0], 4 * w.shape[1]])


@triton.jit
def _int8_codes(c, dt: tl.constexpr, MODE: tl.constexpr):
    """int8 codes as ``dt`` (the dot dtype): a plain convert (MODE 0) or via exact float16."""
    if MODE == 0:
        return c.to(dt)
    else:
        return _int8_to_f16(c, MODE).to(dt)  # a no-op for dt = float16


@triton.jit
def _attend_block(acc, m_i, l_i, q, q_bias, blk, seq_len, qpos,
                  pt_row_ptr, k_head_ptr, v_head_ptr, ks_head_ptr, vs_head_ptr, qk_scale,
                  NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
                  BLOCK_N: tl.constexpr, MASKED: tl.constexpr, IS_INT8: tl.constexpr,
                  INT8_MAGIC: tl.constexpr, V_WORDS: tl.constexpr, DOT_PREC: tl.constexpr,
                  FOLD_OFFSET: tl.constexpr = False):
    """One BLOCK_N-key step of the online softmax; returns the updated (acc, m_i, l_i).

    With ``FOLD_OFFSET`` (INT8, magic-number modes) the codes enter the dots as ``1152 + c``
    and the offset is removed once per row instead of once per code: the score dot starts from
    ``q_bias = -1152 * sum_d q`` [ROWS, BLOCK_N] and the P.V dot from ``acc * alpha - 1152 *
    sum_j pv_j``; float32 accumulation keeps ~20 bits after the cancellation.
    """
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    pos = blk * BLOCK_N + offs_n  # (BLOCK_N,) key positions
    if BLOCK_N <= PAGE_SIZE:
        # the block lies inside one page (blk < cdiv(seq_len, BLOCK_N): the entry is in use)
        page = tl.load(pt_row_ptr + (blk * BLOCK_N) // PAGE_SIZE).to(tl.int64)
    else:
        if MASKED:
            page = tl.load(pt_row_ptr + pos // PAGE_SIZE, mask=pos < seq_len, other=0)
        else:
            page = tl.load(pt_row_ptr + pos // PAGE_SIZE)
        page = page.to(tl.int64)
    within = pos % PAGE_SIZE
    # contiguous pool: page stride KV_HEADS * PAGE_SIZE * HEAD_DIM elements (scales: no HEAD_DIM)
    kv_off = page * (NUM_KV_HEADS * PAGE_SIZE * HEAD_DIM) + within * HEAD_DIM  # (BLOCK_N,) int64
    k_ptrs = k_head_ptr + kv_off[:, None] + offs_d[None, :]  # (BLOCK_N, HEAD_DIM)
    v_ptrs = v_head_ptr + kv_off[:, None] + offs_d[None, :]
    if MASKED:
        kv_valid = pos < seq_len
    if IS_INT8 and V_WORDS:
        # the codes as int32 words, 4 codes each (offsets in words: all multiples of 4 B)
        offs_w = tl.arange(0, HEAD_DIM // 4)
        w_off = (page * (NUM_KV_HEADS * PAGE_SIZE * HEAD_DIM // 4)
                 + within * (HEAD_DIM // 4))[:, None] + offs_w[None, :]
        kw_ptrs = k_head_ptr.to(tl.pointer_type(tl.int32), bitcast=True) + w_off
        if MASKED:
            kw = tl.load(kw_ptrs, mask=kv_valid[:, None], other=0)
        else:
            kw = tl.load(kw_ptrs)
        k = _int8_words_to_f16(kw, INT8_MAGIC == 2, FOLD_OFFSET).to(q.dtype)
    elif MASKED:
        k = tl.load(k_ptrs, mask=kv_valid[:, None], other=0)
    else:
        k = tl.load(k_ptrs)

    # scores in log2 units: (ROWS, BLOCK_N)
    if IS_INT8:
        s_off = page * (NUM_KV_HEADS * PAGE_SIZE) + within
        if MASKED:
            ks = tl.load(ks_head_ptr + s_off, mask=kv_valid, other=0.0)
        else:
            ks = tl.load(ks_head_ptr + s_off)
        if not V_WORDS:  # (with V_WORDS k is float16 already)
            if FOLD_OFFSET:
                k = _int8_to_f16_biased(k, INT8_MAGIC).to(q.dtype)
            else:
                k = _int8_codes(k, q.dtype, INT8_MAGIC)
        if FOLD_OFFSET:
            s = tl.dot(q, tl.trans(k), q_bias, input_precision=DOT_PREC)
        else:
            s = tl.dot(q, tl.trans(k), input_precision=DOT_PREC)
        s = s * (ks * qk_scale)[None, :]
    else:
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PREC) * qk_scale
    if MASKED:
        s = tl.where(pos[None, :] <= qpos[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # all masked so far: no NaN
    else:
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = m_new
    alpha = tl.exp2(m_i - m_use)
    p = tl.exp2(s - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if not FOLD_OFFSET:
        acc = acc * alpha[:, None]

    if IS_INT8 and V_WORDS:
        vw_ptrs = v_head_ptr.to(tl.pointer_type(tl.int32), bitcast=True) + w_off
        if MASKED:
            vw = tl.load(vw_ptrs, mask=kv_valid[:, None], other=0)
        else:
            vw = tl.load(vw_ptrs)
        v = _int8_words_to_f16(vw, INT8_MAGIC == 2, FOLD_OFFSET).to(q.dtype)
    elif MASKED:
        v = tl.load(v_ptrs, mask=kv_valid[:, None], other=0)  # masked keys: V rows are 0
    else:
        v = tl.load(v_ptrs)
    if IS_INT8:
        if MASKED:
            vs = tl.load(vs_head_ptr + s_off, mask=kv_valid, other=0.0)
        else:
            vs = tl.load(vs_head_ptr + s_off)
        pv = (p * vs[None, :]).to(q.dtype)
        if FOLD_OFFSET:
            if not V_WORDS:
                v = _int8_to_f16_biased(v, INT8_MAGIC).to(q.dtype)
            pv_sum = tl.sum(pv.to(tl.float32), axis=1)  # exactly the values the dot sees
            acc = acc * alpha[:, None] - (1152.0 * pv_sum)[:, None]
        elif not V_WORDS:
            v = _int8_codes(v, q.dtype, INT8_MAGIC)
        acc = tl.dot(pv, v, acc, input_precision=DOT_PREC)
    else:
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PREC)
    return acc, m_new, l_i


@triton.jit
def _attend_block_t(acc_t, m_i, l_i, q_t, blk, seq_len, qpos,
                    pt_row_ptr, k_head_ptr, v_head_ptr, ks_head_ptr, vs_head_ptr, qk_scale,
                    NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
                    BLOCK_N: tl.constexpr, MASKED: tl.constexpr, IS_INT8: tl.constexpr,
                    INT8_MAGIC: tl.constexpr, V_WORDS: tl.constexpr, DOT_PREC: tl.constexpr):
    """``_attend_block`` with the operands swapped ("swap AB"): keys and values are the M side.

    ``S^T = K Q^T`` is [BLOCK_N, ROWS] and ``O^T += V^T P^T`` is [HEAD_DIM, ROWS], so the
    BLOCK_N keys (and HEAD_DIM) fill the M = 64 rows of a Hopper warpgroup MMA and the few
    query rows its N side, instead of padding the queries to M = 16 rows of ``mma.sync``.
    acc_t is [HEAD_DIM, ROWS]; m_i and l_i are per query row as in ``_attend_block``.
    """
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    pos = blk * BLOCK_N + offs_n
    if BLOCK_N <= PAGE_SIZE:
        page = tl.load(pt_row_ptr + (blk * BLOCK_N) // PAGE_SIZE).to(tl.int64)
    else:
        if MASKED:
            page = tl.load(pt_row_ptr + pos // PAGE_SIZE, mask=pos < seq_len, other=0)
        else:
            page = tl.load(pt_row_ptr + pos // PAGE_SIZE)
        page = page.to(tl.int64)
    within = pos % PAGE_SIZE
    kv_off = page * (NUM_KV_HEADS * PAGE_SIZE * HEAD_DIM) + within * HEAD_DIM
    k_ptrs = k_head_ptr + kv_off[:, None] + offs_d[None, :]
    v_ptrs = v_head_ptr + kv_off[:, None] + offs_d[None, :]
    if MASKED:
        kv_valid = pos < seq_len
        k = tl.load(k_ptrs, mask=kv_valid[:, None], other=0)
    else:
        k = tl.load(k_ptrs)
    if IS_INT8:
        s_off = page * (NUM_KV_HEADS * PAGE_SIZE) + within
        if MASKED:
            ks = tl.load(ks_head_ptr + s_off, mask=kv_valid, other=0.0)
        else:
            ks = tl.load(ks_head_ptr + s_off)
        s = tl.dot(_int8_codes(k, q_t.dtype, INT8_MAGIC), q_t, input_precision=DOT_PREC)
        s = s * (ks * qk_scale)[:, None]
    else:
        s = tl.dot(k, q_t, input_precision=DOT_PREC) * qk_scale  # [BLOCK_N, ROWS]
    if MASKED:
        s = tl.where(pos[:, None] <= qpos[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        m_use = m_new
    alpha = tl.exp2(m_i - m_use)
    p = tl.exp2(s - m_use[None, :])
    l_i = l_i * alpha + tl.sum(p, axis=0)
    acc_t = acc_t * alpha[None, :]
    if IS_INT8 and V_WORDS:
        offs_w = tl.arange(0, HEAD_DIM // 4)
        vw_ptrs = (v_head_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
                   + (page * (NUM_KV_HEADS * PAGE_SIZE * HEAD_DIM // 4)
                      + within * (HEAD_DIM // 4))[:, None] + offs_w[None, :])
        if MASKED:
            vw = tl.load(vw_ptrs, mask=kv_valid[:, None], other=0)
        else:
            vw = tl.load(vw_ptrs)
        v = _int8_words_to_f16(vw, INT8_MAGIC == 2).to(q_t.dtype)
    elif MASKED:
        v = tl.load(v_ptrs, mask=kv_valid[:, None], other=0)
    else:
        v = tl.load(v_ptrs)
    if IS_INT8:
        if MASKED:
            vs = tl.load(vs_head_ptr + s_off, mask=kv_valid, other=0.0)
        else:
            vs = tl.load(vs_head_ptr + s_off)
        pv = (p * vs[:, None]).to(q_t.dtype)
        if not V_WORDS:
            v = _int8_codes(v, q_t.dtype, INT8_MAGIC)
        acc_t = tl.dot(tl.trans(v), pv, acc_t, input_precision=DOT_PREC)
    else:
        acc_t = tl.dot(tl.trans(v), p.to(v.dtype), acc_t, input_precision=DOT_PREC)
    return acc_t, m_new, l_i


@triton.jit
def _decode_split_kernel(
    q_ptr,  # [B * NUM_QUERIES, Hq, D]
    k_ptr,  # [num_pages, Hkv, PAGE_SIZE, D] model dtype or int8
    v_ptr,  # [num_pages, Hkv, PAGE_SIZE, D]
    k_scale_ptr,  # float32 [num_pages, Hkv, PAGE_SIZE] (INT8 only)
    v_scale_ptr,  # float32 [num_pages, Hkv, PAGE_SIZE] (INT8 only)
    seq_lens_ptr,  # int32 [B]
    page_table_ptr,  # int32 [B, max_pages]
    o_part_ptr,  # float32 [B, Hkv, NUM_SPLITS, NUM_QUERIES * GROUP, D]
    lse_ptr,  # float32 [B, Hkv, NUM_SPLITS, NUM_QUERIES * GROUP]
    counter_ptr,  # int32 [B * Hkv], zeros between calls (FUSE_COMBINE only)
    out_ptr,  # [B * NUM_QUERIES, Hq, D] q dtype (FUSE_COMBINE only)
    qk_scale,  # sm_scale * log2(e)
    stride_qt, stride_qh,
    stride_pt,
    stride_ob, stride_oh, stride_os, stride_or,
    stride_lb, stride_lh, stride_ls,
    stride_tt, stride_th,  # out token and head strides
    NUM_KV_HEADS: tl.constexpr,
    GROUP: tl.constexpr,
    NUM_QUERIES: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    IS_INT8: tl.constexpr,
    INT8_MAGIC: tl.constexpr,
    V_WORDS: tl.constexpr,
    DOT_PREC: tl.constexpr,
    FUSE_COMBINE: tl.constexpr,
    MERGE_R: tl.constexpr,  # the merge's tiles (kernels/combine.py merge_tiles)
    MERGE_LSE_BLOCK: tl.constexpr,
    MERGE_BLOCK_S: tl.constexpr,
    SWAP_AB: tl.constexpr,
    USE_PDL: tl.constexpr,
    FOLD_OFFSET: tl.constexpr,
):
    if USE_PDL:
        # launched early (programmatic dependent launch): wait until the previous kernel (the KV
        # store, or the last layer's combine) has finished and its writes are visible, then let
        # our own dependent (the combine) launch; it waits for us in turn
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    pid_bh = tl.program_id(0)
    split = tl.program_id(1)
    b = (pid_bh // NUM_KV_HEADS).to(tl.int64)
    h = (pid_bh % NUM_KV_HEADS).to(tl.int64)
    seq_len = tl.load(seq_lens_ptr + b)

    rows = tl.arange(0, ROWS)
    offs_d = tl.arange(0, HEAD_DIM)
    t = rows // GROUP  # query token of each row
    row_valid = rows < NUM_QUERIES * GROUP
    q_off = (b * NUM_QUERIES + t) * stride_qt + (h * GROUP + rows % GROUP) * stride_qh
    q = tl.load(q_ptr + q_off[:, None] + offs_d[None, :], mask=row_valid[:, None], other=0.0)
    if IS_INT8 and INT8_MAGIC != 0 and q.dtype != tl.float32:
        q = q.to(tl.float16)  # the codes become exact float16: dot in float16
    qpos = seq_len - NUM_QUERIES + t  # (ROWS,) position of each row's query

    n_blocks = tl.cdiv(seq_len, BLOCK_N)
    start = split * n_blocks // NUM_SPLITS
    end = (split + 1) * n_blocks // NUM_SPLITS
    # blocks whose keys all precede the first query: no mask needed
    n_full = tl.maximum(seq_len - NUM_QUERIES + 1, 0) // BLOCK_N

    pt_row_ptr = page_table_ptr + b * stride_pt
    k_head_ptr = k_ptr + h * (PAGE_SIZE * HEAD_DIM)
    v_head_ptr = v_ptr + h * (PAGE_SIZE * HEAD_DIM)
    ks_head_ptr = k_scale_ptr + h * PAGE_SIZE
    vs_head_ptr = v_scale_ptr + h * PAGE_SIZE

    m_i = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([ROWS], dtype=tl.float32)
    if SWAP_AB:
        q_t = tl.trans(q)
        acc_t = tl.zeros([HEAD_DIM, ROWS], dtype=tl.float32)
        for blk in range(start, tl.minimum(end, n_full)):
            acc_t, m_i, l_i = _attend_block_t(
                acc_t, m_i, l_i, q_t, blk, seq_len, qpos, pt_row_ptr, k_head_ptr, v_head_ptr,
                ks_head_ptr, vs_head_ptr, qk_scale, NUM_KV_HEADS, HEAD_DIM, PAGE_SIZE, BLOCK_N,
                False, IS_INT8, INT8_MAGIC, V_WORDS, DOT_PREC)
        for blk in range(tl.maximum(start, n_full), end):
            acc_t, m_i, l_i = _attend_block_t(
                acc_t, m_i, l_i, q_t, blk, seq_len, qpos, pt_row_ptr, k_head_ptr, v_head_ptr,
                ks_head_ptr, vs_head_ptr, qk_scale, NUM_KV_HEADS, HEAD_DIM, PAGE_SIZE, BLOCK_N,
                True, IS_INT8, INT8_MAGIC, V_WORDS, DOT_PREC)
        acc = tl.trans(acc_t)
    else:
        acc = tl.zeros([ROWS, HEAD_DIM], dtype=tl.float32)
        if FOLD_OFFSET:  # the score dot starts from -1152 * sum_d q (see _attend_block)
            q_bias = tl.broadcast_to((-1152.0 * tl.sum(q.to(tl.float32), axis=1))[:, None],
                                     [ROWS, BLOCK_N])
        else:
            q_bias = 0.0
        for blk in range(start, tl.minimum(end, n_full)):
            acc, m_i, l_i = _attend_block(
                acc, m_i, l_i, q, q_bias, blk, seq_len, qpos, pt_row_ptr, k_head_ptr, v_head_ptr,
                ks_head_ptr, vs_head_ptr, qk_scale, NUM_KV_HEADS, HEAD_DIM, PAGE_SIZE, BLOCK_N,
                False, IS_INT8, INT8_MAGIC, V_WORDS, DOT_PREC, FOLD_OFFSET)
        for blk in range(tl.maximum(start, n_full), end):
            acc, m_i, l_i = _attend_block(
                acc, m_i, l_i, q, q_bias, blk, seq_len, qpos, pt_row_ptr, k_head_ptr, v_head_ptr,
                ks_head_ptr, vs_head_ptr, qk_scale, NUM_KV_HEADS, HEAD_DIM, PAGE_SIZE, BLOCK_N,
                True, IS_INT8, INT8_MAGIC, V_WORDS, DOT_PREC, FOLD_OFFSET)

    seen = l_i > 0.0
    o = acc / tl.where(seen, l_i, 1.0)[:, None]
    lse = tl.where(seen, (m_i + tl.log2(tl.where(seen, l_i, 1.0))) * _LN2,
                   float("-inf"))
    o_base = o_part_ptr + b * stride_ob + h * stride_oh + split * stride_os
    tl.store(o_base + rows[:, None] * stride_or + offs_d[None, :], o, mask=row_valid[:, None])
    l_base = lse_ptr + b * stride_lb + h * stride_lh + split * stride_ls
    tl.store(l_base + rows, lse, mask=row_valid)

    if FUSE_COMBINE:
        tl.debug_barrier()  # all of this program's stores precede the release below
        arrived = tl.atomic_add(counter_ptr + pid_bh, 1, sem="acq_rel", scope="gpu")
        if arrived == NUM_SPLITS - 1:  # the last split of (b, h): every partial is visible
            _merge_splits(
                o_part_ptr + b * stride_ob + h * stride_oh, lse_ptr + b * stride_lb + h * stride_lh,
                out_ptr, b, h, stride_os, stride_or, stride_ls, stride_tt, stride_th,
                GROUP, NUM_QUERIES, NUM_SPLITS, HEAD_DIM, MERGE_R, MERGE_LSE_BLOCK, MERGE_BLOCK_S)
            tl.atomic_xchg(counter_ptr + pid_bh, 0, sem="relaxed", scope="gpu")  # for the next call


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     seq_lens: torch.Tensor, page_table: torch.Tensor, *, num_queries: int = 1,
                     sm_scale: float | None = None, k_scale: torch.Tensor | None = None,
                     v_scale: torch.Tensor | None = None, num_splits: int | None = None,
                     workspace: DecodeWorkspace | None = None, out: torch.Tensor | None = None,
                     block_n: int | None = None, num_warps: int | None = None,
                     num_stages: int | None = None, int8_magic: int | None = None,
                     fuse_combine: bool | None = None, swap_ab: bool | None = None,
                     pdl: bool | None = None, int8_fold: bool | None = None,
                     maxnreg: int | None = None) -> torch.Tensor:
    """Causal attention of each sequence's ``n`` new queries to its paged K/V (split-KV decode).

    Args:
        q: [B * n, num_q_heads, head_dim] float16/bfloat16/float32, sequence-major (row
            ``b * n + t`` is query ``t`` of sequence ``b``, at position ``seq_lens[b] - n + t``);
            the last dim contiguous.
        k_cache, v_cache: contiguous [num_pages, kv_heads, page_size, head_dim] in q's dtype or
            int8. The step's own K/V must already be stored (``kernels.store_kv``).
        seq_lens: int32 [B] cached positions per sequence including this step's ``n``; a 0 marks
            a padding sequence, whose output rows are exact zeros.
        page_table: int32 [B, max_pages] page ids, row-contiguous; entries past
            ``cdiv(seq_lens[b], page_size)`` are never read.
        num_queries: n, new tokens per sequence (1..16), the same for every sequence.
        sm_scale: logit scale, default ``1 / sqrt(head_dim)``.
        k_scale, v_scale: contiguous float32 [num_pages, kv_heads, page_size], exactly when the
            caches are int8.
        num_splits: key splits per (sequence, KV head); default ``default_num_splits`` for the
            cache dtype. Fix it per CUDA-graph bucket.
        workspace: a ``DecodeWorkspace`` large enough for this call; allocated if None.
        out: [B * n, num_q_heads, head_dim] in q's dtype; allocated if None.
        block_n, num_warps, num_stages: tile overrides for tuning (keys per iteration, a power of
            two that divides or is a multiple of page_size); defaults from ``TILE_DEFAULTS`` on a
            GPU, ``block_n = page_size`` on a CPU.
        int8_magic: INT8 code conversion, 0 (cvt), 1 (magic number, integer ops), 2 (magic
            number, packed inline PTX; 1 under the interpreter) or 3 (2, with keys and values
            loaded as int32 words); default from ``TILE_DEFAULTS``.
        fuse_combine: merge the splits in stage 1 (the last program of each sequence and KV head;
            the workspace's counters) instead of a separate combine launch; default from
            ``TILE_DEFAULTS``. Same result up to float32 summation order.
        swap_ab: compute ``S^T = K Q^T`` and ``O^T = V^T P^T`` (keys on the MMA's M side, so a
            Hopper warpgroup MMA fits a few query rows without padding them to 16-row
            ``mma.sync`` tiles; the trick of TensorRT-LLM's and FlashInfer's decode kernels);
            default from ``TILE_DEFAULTS``. Same result up to float32 summation order.
        pdl: launch stage 1 and the combine with programmatic dependent launch (CUDA sm_90+,
            ``griddepcontrol``): each kernel may be scheduled while its predecessor in the stream
            still runs, waits for it (``griddepcontrol.wait``) before its first load, then lets
            its own dependent launch, so the launch latency between kernels is hidden (also
            inside a CUDA graph). Results are unchanged; GPU only, default from
            ``TILE_DEFAULTS``.
        int8_fold: INT8 with int8_magic 1-3, without swap_ab: feed the dots ``1152 + c`` and
            remove the offset once per row (``-1152 * sum(q)`` as the score dot's accumulator,
            ``-1152 * sum(pv)`` added to the output's), which drops the per-code subtraction;
            same result up to float32 rounding; default from ``TILE_DEFAULTS``.
        maxnreg: cap on registers per thread for stage 1 (ptxas ``maxnreg``; GPU only, for
            tuning: 128 keeps 4 programs of 4 warps per SM).

    Returns:
        ``out`` [B * n, num_q_heads, head_dim] in q's dtype. With ``workspace`` and ``out`` given
        the call allocates nothing and never reads device memory on the host (CUDA-graph safe).

    Raises:
        ValueError: on inconsistent shapes/dtypes, a missing/unexpected scale, a too-small
            workspace, or an unsupported head_dim (must be a power of two >= 16).
    """
    if out is None:
        out = torch.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or out.stride(-1) != 1:
        raise ValueError(f"out must be {q.dtype} {tuple(q.shape)} with a contiguous last dim")
    if fuse_combine is None:
        fuse_combine = tile_defaults(k_cache.dtype)["fuse_combine"]
    o_part, lse = _decode_stage1(
        q, k_cache, v_cache, seq_lens, page_table, num_queries=num_queries, sm_scale=sm_scale,
        k_scale=k_scale, v_scale=v_scale, num_splits=num_splits, workspace=workspace,
        block_n=block_n, num_warps=num_warps, num_stages=num_stages, int8_magic=int8_magic,
        fuse_combine=fuse_combine, out=out, swap_ab=swap_ab, pdl=pdl, int8_fold=int8_fold,
        maxnreg=maxnreg)
    if seq_lens.shape[0] == 0 or fuse_combine:
        return out
    if pdl is None:
        pdl = tile_defaults(k_cache.dtype)["pdl"]
    return combine(o_part, lse, out, pdl=pdl and q.device.type == "cuda")


def _decode_stage1(q, k_cache, v_cache, seq_lens, page_table, *, num_queries=1, sm_scale=None,
                   k_scale=None, v_scale=None, num_splits=None, workspace=None, block_n=None,
                   num_warps=None, num_stages=None, int8_magic=None, fuse_combine=None, out=None,
                   swap_ab=None, pdl=None, int8_fold=None, maxnreg=None):
    """Stage 1 alone (checks and launch); returns the workspace views ``(o_part, lse)``.

    Arguments as ``decode_attention``; split out so benchmarks can time stage 1 and the combine
    separately. With ``fuse_combine`` (default from ``TILE_DEFAULTS``) stage 1 also writes the
    merged result into ``out`` (required, checked by the caller).
    """
    if q.dim() != 3 or q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"q must be float16/bfloat16/float32 [B * n, q_heads, head_dim], got "
                         f"{q.dtype} {tuple(q.shape)}")
    if k_cache.dim() != 4 or k_cache.shape != v_cache.shape or k_cache.dtype != v_cache.dtype:
        raise ValueError("k_cache and v_cache must match, each [num_pages, kv_heads, page_size, "
                         "head_dim]")
    is_int8 = k_cache.dtype == torch.int8
    if not is_int8 and k_cache.dtype != q.dtype:
        raise ValueError(f"the cache holds {k_cache.dtype} but q is {q.dtype}: use the same dtype "
                         "(or an int8 cache)")
    if is_int8 != (k_scale is not None) or is_int8 != (v_scale is not None):
        raise ValueError("pass k_scale and v_scale exactly when the cache is int8")
    _, kv_heads, page_size, head_dim = k_cache.shape
    total, q_heads, q_dim = q.shape
    batch = seq_lens.shape[0]
    if q_dim != head_dim or q_heads % kv_heads:
        raise ValueError(f"q has {q_heads} heads x {q_dim}; the cache {kv_heads} KV heads x "
                         f"{head_dim} (q heads must be a multiple of KV heads)")
    if head_dim & (head_dim - 1) or head_dim < 16:
        raise ValueError(f"head_dim must be a power of two >= 16, got {head_dim}")
    if not 1 <= num_queries <= 16 or total != batch * num_queries:
        raise ValueError(f"q has {total} rows; expected batch {batch} x num_queries "
                         f"{num_queries} (1..16)")
    if seq_lens.dtype != torch.int32 or seq_lens.dim() != 1:
        raise ValueError("seq_lens must be int32 [B]")
    if page_table.dtype != torch.int32 or page_table.dim() != 2 or page_table.shape[0] != batch:
        raise ValueError(f"page_table must be int32 [{batch}, max_pages]")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("k_cache and v_cache must be contiguous")
    assert q.stride(-1) == 1 and page_table.stride(-1) == 1 and seq_lens.is_contiguous()
    if is_int8:
        check_int8_scales(k_cache, k_scale, v_scale)
    else:
        k_scale, v_scale = k_cache, v_cache  # placeholders, never read (IS_INT8=False)

    group = q_heads // kv_heads
    rows = num_queries * group
    on_gpu = q.device.type == "cuda"
    tiles = tile_defaults(k_cache.dtype)
    if num_splits is None:
        num_splits = default_num_splits(batch, kv_heads, q.device, k_cache.dtype)
    if num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    tile_rows = max(16, triton.next_power_of_2(rows))
    big_tile = tile_rows > 16  # many rows (n * group > 16): the 4-warp, 64-key tile
    if block_n is None:
        block_n = (64 if big_tile else tiles["block_n"]) if on_gpu else page_size
    if block_n & (block_n - 1) or (block_n % page_size and page_size % block_n):
        raise ValueError(f"block_n={block_n} must be a power of two dividing or a multiple of "
                         f"page_size={page_size}")
    if int8_magic is None:
        int8_magic = tiles["int8_magic"]
    if int8_magic not in (0, 1, 2, 3):
        raise ValueError(f"int8_magic must be 0 (cvt), 1 or 2 (magic number) or 3 (2, values "
                         f"as words), got {int8_magic}")
    v_words = is_int8 and int8_magic == 3
    if v_words:
        int8_magic = 2
    if int8_magic == 2 and not on_gpu:
        int8_magic = 1  # the interpreter runs no inline PTX; 1 computes the same codes
    if fuse_combine is None:
        fuse_combine = tiles["fuse_combine"]
    if swap_ab is None:
        swap_ab = tiles["swap_ab"]
    if pdl is None:
        pdl = tiles["pdl"]
    if int8_fold is None:
        int8_fold = tiles["int8_fold"]
    fold = bool(int8_fold) and is_int8 and int8_magic != 0 and not swap_ab
    if fuse_combine and out is None:
        raise ValueError("fuse_combine=True writes the output in stage 1: pass out")
    use_pdl = bool(pdl) and on_gpu
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(head_dim)
    if workspace is None:
        workspace = DecodeWorkspace.allocate(batch, kv_heads, rows, num_splits, head_dim,
                                             q.device)
    o_part, lse = workspace.views(batch, kv_heads, num_splits, rows, head_dim)
    counters = workspace.counter_view(batch)
    if batch == 0:
        return o_part, lse
    if not fuse_combine:
        out = o_part  # placeholder, never read or written (FUSE_COMBINE=False)
    merge_r, merge_lse_block, merge_block_s = merge_tiles(rows, num_splits, head_dim)

    _decode_split_kernel[(batch * kv_heads, num_splits)](
        q, k_cache, v_cache, k_scale, v_scale, seq_lens, page_table, o_part, lse, counters, out,
        sm_scale * _LOG2E, q.stride(0), q.stride(1), page_table.stride(0),
        o_part.stride(0), o_part.stride(1), o_part.stride(2), o_part.stride(3),
        lse.stride(0), lse.stride(1), lse.stride(2), out.stride(0), out.stride(1),
        NUM_KV_HEADS=kv_heads, GROUP=group, NUM_QUERIES=num_queries, HEAD_DIM=head_dim,
        PAGE_SIZE=page_size, BLOCK_N=block_n, ROWS=max(16, triton.next_power_of_2(rows)),
        NUM_SPLITS=num_splits, IS_INT8=is_int8, INT8_MAGIC=int8_magic if is_int8 else 0,
        V_WORDS=v_words,
        DOT_PREC="ieee" if q.dtype == torch.float32 else "tf32", FUSE_COMBINE=bool(fuse_combine),
        MERGE_R=merge_r, MERGE_LSE_BLOCK=merge_lse_block, MERGE_BLOCK_S=merge_block_s,
        SWAP_AB=bool(swap_ab), USE_PDL=use_pdl, FOLD_OFFSET=fold,
        **({"launch_pdl": True} if use_pdl else {}),
        **({"maxnreg": maxnreg} if maxnreg and on_gpu else {}),
        num_warps=num_warps or (max(4, tiles["num_warps"]) if big_tile else tiles["num_warps"]),
        num_stages=num_stages or tiles["num_stages"],
    )
    return o_part, lse
