"""The split-KV decode kernel over the paged pool (flash-decoding stage 1); its launcher and
argument checks are ``kernels/decode_attention.py``.

The per-block step (page lookup, scores, online softmax, P.V) and the INT8 code conversions live
in ``kernels/decode_block.py`` (with the steps shared with prefill in ``kernels/paged_walk.py``),
the tiles in ``kernels/tiles.py`` (``DecodeTiles``), the workspace and split count in
``kernels/decode_plan.py``, the combine in ``kernels/combine.py``.

Each step adds the same ``n`` (1..16) new tokens to each of ``B`` sequences. One program takes one
(sequence, KV head) and one of ``NUM_SPLITS`` slices of that sequence's keys:

- GQA packing: the ``n * group`` (query token, query head) pairs that share the KV head are the
  rows of one tile (row ``r = t * group + g``), padded to ``ROWS >= 16`` for the tensor-core dot;
  q is loaded once and each key/value tile once per group.
- Slabs (``slab_rows``, a speculative verify step): each row of the step is one query, and a
  program takes up to ``slab_capacity(group)`` consecutive rows of one sequence into the padding
  of that same 16-row tile, so the sequence's keys are read once per slab instead of once per
  row. Row invariance holds by construction: every operation on a row (the dots, the masks, the
  online softmax, the conditional rescale's decision) reads only that row, and a slab within one
  key block has the split bounds and the unmasked/masked block boundary of each of its rows
  alone. Plain steps pass ``slab_rows`` 1, so both run one kernel.
- Keys are walked ``BLOCK_N`` positions per iteration (one page, part of a page, or several pages
  gathered through the page table). Scores are float32, scaled by ``sm_scale * log2(e)`` and
  exponentiated with ``exp2`` (online softmax, FlashAttention-2). P is cast to the query dtype for
  the P.V dot.
- The split's blocks are ``[s * nb // S, (s + 1) * nb // S)`` of the ``nb = cdiv(seq_len, BLOCK_N)``
  blocks, computed on device from ``seq_lens``: the grid ``(B * kv_heads, NUM_SPLITS)`` never
  depends on the context length, so a captured CUDA graph stays valid as sequences grow.
- Blocks wholly before the first query's position (``seq_len - n``) hold only keys of earlier
  steps and run without any mask; only the last block(s) mask keys by ``pos <= seq_len - n + t``
  (causal) and loads by ``pos < seq_len``, so stale data or NaN in unused slots of the last page is
  never read. (INT8 code loads need no mask: codes are finite, and masked keys get scale 0.)
- INT8 pools (V pages transposed, ``[num_pages, kv_heads, head_dim, page_size]``: the value codes
  reach the P.V operand with word-wide shared-memory loads; with V laid out like K every code took
  a one-byte load): int8 codes are loaded and converted in registers; each key's scale multiplies
  its score column and each value's scale its probability before P.V (no dequantized copy). The
  conversion (``INT8_MAGIC``) is 0: ``cvt`` to the query dtype (a low-throughput instruction: the
  kernel was issue-bound, not memory-bound); 1: the "magic number" trick of FasterTransformer /
  Marlin with integer ops only: ``(uint8(c) ^ 0x6480)`` is the fp16 bit pattern of ``1152 + c``,
  minus 1152.0 gives ``c`` exactly; 2: the same trick in inline PTX on four packed codes at once
  (one ``xor``, two ``prmt``, two ``sub.f16x2`` per four codes; GPU only, runs as 1 under the
  interpreter). With 1 and 2 the dots run in float16 (q converted once; P times the value scales
  in float16), unless q is float32.
- Conditional rescaling (``LAZY_RESCALE``, FlashAttention-4, Zadouri et al. 2025): in unmasked
  blocks the running max and the ``ROWS x HEAD_DIM`` accumulator rescale happen only when some
  row's max grows by more than 2^8; after the first blocks of a split that is rare.
- Output per split (contract in ``kernels/combine.py``): float32 ``o_part`` normalized within the
  split and natural-log ``lse``; an empty split (or a row whose keys are all masked) writes
  ``lse = -inf`` and zeros.
- ``do_not_specialize``: the page-table row stride (the table's width: a prompt's own, or the
  pool's in the graph runner's steps) and the lse strides (the workspace slice of one sequence,
  or the packed view of a verify step's one-query rows) would otherwise make Triton compile
  again for a stride of 1 or one divisible by 16; the decode and verify steps' kernels were the
  same code (``tests/compile_launch_ptx.py``), so they now share one compile.
- Programmatic dependent launch (``pdl``, CUDA sm_90+, ``griddepcontrol``): stage 1 and the
  combine are launched so that each may be scheduled while its predecessor in the stream (the KV
  store, stage 1) still runs, which hides the launch gap between kernels, also in a CUDA graph.
  The combine waits (``gdc_wait``) before its first load. Stage 1 lets its dependent launch at
  once and walks the blocks of earlier steps' keys BEFORE it waits: only the blocks holding this
  step's keys (written by the KV store, its predecessor) and the workspace stores come after the
  wait. This is safe because everything read before the wait (q, ``seq_lens``, the page table,
  earlier keys) was written by kernels that finished before the predecessor started (the KV store
  is launched without PDL); a caller must keep it so. When the predecessor writes q too (the
  fused q/k-norm + RoPE + KV store, ``kernels/qk_norm_rope_store.py``), the caller passes
  ``q_from_predecessor`` and stage 1 waits before it loads q: it is still scheduled early, but
  walks all its blocks after the wait.
- The prologue (``PROLOGUE``, 16-bit pools; ``kernels/decode_prologue.py``): q is the raw q of
  the qkv projection; the program normalizes and rotates its q rows itself (the first token's
  cos/sin before the wait, which then comes first) and stores the step's K/V whose positions lie
  in its blocks before it walks them: no q/k-norm + RoPE or KV store launch before stage 1.

Alternatives measured and removed are listed in BENCHMARKS.md ("Kernel design notes moved from
the code").

Design after vLLM's ``triton_decode_attention.py`` (``_fwd_grouped_kernel_stage1``) and
flash-decoding (Dao et al. 2023); online softmax from FlashAttention-2 (Dao 2023).
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels.decode_block import _attend_block
from kernels.decode_prologue import norm_rope_rows, rope_cos_sin, store_new_kv, store_read_keys

_LN2 = tl.constexpr(0.6931471805599453)


# the page-table and lse strides vary with the step's layout but not the code (module notes)
@triton.jit(do_not_specialize=["stride_pt", "stride_lb", "stride_lh", "stride_ls",
                               "num_rows"])
def _decode_split_kernel(
    q_ptr,  # [B * NUM_QUERIES, Hq, D]; PROLOGUE: before q-norm and RoPE
    k_ptr,  # [num_pages, Hkv, PAGE_SIZE, D] model dtype or int8
    v_ptr,  # [num_pages, Hkv, PAGE_SIZE, D]; int8: [num_pages, Hkv, D, PAGE_SIZE]
    k_scale_ptr,  # float32 [num_pages, Hkv, PAGE_SIZE] (INT8 only)
    v_scale_ptr,  # float32 [num_pages, Hkv, PAGE_SIZE] (INT8 only)
    seq_lens_ptr,  # int32 [B]
    page_table_ptr,  # int32 [B, max_pages]
    slab_ptr,  # int32 [B], rows per program (SLAB > 1 only)
    o_part_ptr,  # float32 [B, Hkv, NUM_SPLITS, NUM_QUERIES * GROUP, D]
    lse_ptr,  # float32 [B, Hkv, NUM_SPLITS, NUM_QUERIES * GROUP]
    qk_scale,  # sm_scale * log2(e)
    stride_qt, stride_qh,
    stride_pt,
    stride_ob, stride_oh, stride_os, stride_or,
    stride_lb, stride_lh, stride_ls,
    # PROLOGUE only (kernels/decode_prologue.py): the step's raw k and v [T, Hkv, D], the
    # q_norm / k_norm weights [D], positions int64 [T], inv_freq float32 [D / 2], slots int64 [T]
    k_new_ptr, v_new_ptr, qw_ptr, kw_ptr, pos_ptr, inv_freq_ptr, slot_ptr,
    eps, attention_factor,
    stride_kt, stride_kh, stride_vt, stride_vh,
    num_rows,  # B: the step's rows (sequences, or one-token rows)
    NUM_KV_HEADS: tl.constexpr,
    GROUP: tl.constexpr,
    NUM_QUERIES: tl.constexpr,
    SLAB: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    IS_INT8: tl.constexpr,
    INT8_MAGIC: tl.constexpr,
    DOT_PREC: tl.constexpr,
    USE_PDL: tl.constexpr,
    Q_AFTER_WAIT: tl.constexpr,  # USE_PDL only: the predecessor writes q, wait before loading it
    LAZY_RESCALE: tl.constexpr,
    PROLOGUE: tl.constexpr = False,  # q/k-norm + RoPE and the step's K/V store (16-bit pools)
    PRECISE_TRIG: tl.constexpr = False,  # PROLOGUE: libdevice cos/sin (GPU), else tl.cos/sin
):
    if USE_PDL:
        # our dependent (the combine) may launch now; it waits for us in turn
        tl.extra.cuda.gdc_launch_dependents()
    pid_bh = tl.program_id(0)
    split = tl.program_id(1)
    b = (pid_bh // NUM_KV_HEADS).to(tl.int64)
    h = (pid_bh % NUM_KV_HEADS).to(tl.int64)

    rows = tl.arange(0, ROWS)
    offs_d = tl.arange(0, HEAD_DIM)
    t = rows // GROUP  # query token of each row
    if SLAB > 1:
        # slabs: rows b .. b + count - 1 of the step are one sequence's queries at consecutive
        # positions (the same page table), as a step of ``count`` queries of row b's sequence;
        # count 0: an earlier row's program covers row b (no block, nothing stored). Both
        # loads are issued at once, as the one load of a plain step
        count = tl.load(slab_ptr + b)
        first = tl.load(seq_lens_ptr + b) - 1  # the first query's position
        seq_len = tl.where(count > 0, first + count, 0)  # the last query's seq_len
        row_valid = (rows < SLAB * GROUP) & (t < count)
        qpos = first + t
        q_row = b + t
        out_row = (b + t) * stride_ob + (rows % GROUP) * stride_or
        lse_row = (b + t) * stride_lb + rows % GROUP
    else:
        seq_len = tl.load(seq_lens_ptr + b)
        row_valid = rows < NUM_QUERIES * GROUP
        first = seq_len - NUM_QUERIES
        qpos = first + t  # (ROWS,) position of each row's query
        q_row = b * NUM_QUERIES + t
        out_row = b * stride_ob + rows * stride_or
        lse_row = b * stride_lb + rows
    q_off = q_row * stride_qt + (h * GROUP + rows % GROUP) * stride_qh
    if PROLOGUE:
        # the step's tokens of this program: tok0 .. tok0 + n_tok - 1 (kernels/decode_prologue)
        if SLAB > 1:
            tok0 = b
            n_tok = count
        else:
            tok0 = b * NUM_QUERIES
            n_tok = NUM_QUERIES
        dt = q_ptr.dtype.element_ty
        # the first token's cos/sin before the wait: positions, inv_freq are no chain output
        cos0, sin0 = rope_cos_sin(tl.load(pos_ptr + tok0), inv_freq_ptr, attention_factor,
                                  HEAD_DIM, dt, PRECISE_TRIG)
        if USE_PDL:
            tl.extra.cuda.gdc_wait()  # q, k and v: the qkv projection's output
        q = norm_rope_rows(q_ptr + q_off, row_valid & (t == 0), qw_ptr, cos0, sin0, eps,
                           HEAD_DIM)
        for i in range(1, n_tok):  # the rows of the other tokens, one token at a time
            cos_i, sin_i = rope_cos_sin(tl.load(pos_ptr + tok0 + i), inv_freq_ptr,
                                        attention_factor, HEAD_DIM, dt, PRECISE_TRIG)
            q_i = norm_rope_rows(q_ptr + q_off, row_valid & (t == i), qw_ptr, cos_i, sin_i, eps,
                                 HEAD_DIM)
            q = tl.where((t == i)[:, None], q_i, q)
    else:
        if Q_AFTER_WAIT:
            tl.extra.cuda.gdc_wait()  # q (and this step's K/V) come from the predecessor
        q = tl.load(q_ptr + q_off[:, None] + offs_d[None, :], mask=row_valid[:, None],
                    other=0.0)
    if IS_INT8 and INT8_MAGIC != 0 and q.dtype != tl.float32:
        q = q.to(tl.float16)  # the codes become exact float16: dot in float16

    n_blocks = tl.cdiv(seq_len, BLOCK_N)
    start = split * n_blocks // NUM_SPLITS
    end = (split + 1) * n_blocks // NUM_SPLITS
    # blocks whose keys all precede the first query (keys of earlier steps): no mask needed
    n_old = tl.maximum(first, 0) // BLOCK_N

    pt_row_ptr = page_table_ptr + b * stride_pt
    k_head_ptr = k_ptr + h * (PAGE_SIZE * HEAD_DIM)
    v_head_ptr = v_ptr + h * (PAGE_SIZE * HEAD_DIM)
    ks_head_ptr = k_scale_ptr + h * PAGE_SIZE
    vs_head_ptr = v_scale_ptr + h * PAGE_SIZE
    if PROLOGUE:
        # the step's keys and values this program reads, into the pool before its blocks are
        # read: one-token rows may be one sequence's (a verify step), so every row is checked
        if NUM_QUERIES == 1:
            store_read_keys(tok0, num_rows, seq_len, start * BLOCK_N, end * BLOCK_N, cos0, sin0,
                            seq_lens_ptr, pt_row_ptr, pos_ptr, inv_freq_ptr, attention_factor,
                            k_new_ptr, v_new_ptr, kw_ptr, slot_ptr, eps, stride_kt, stride_kh,
                            stride_vt, stride_vh, h, k_head_ptr, v_head_ptr, NUM_KV_HEADS,
                            HEAD_DIM, PAGE_SIZE, PRECISE_TRIG)
        else:
            store_new_kv(tok0, first, n_tok, start * BLOCK_N, end * BLOCK_N, cos0, sin0,
                         pos_ptr, inv_freq_ptr, attention_factor, k_new_ptr, v_new_ptr, kw_ptr,
                         slot_ptr, eps, stride_kt, stride_kh, stride_vt, stride_vh, h,
                         k_head_ptr, v_head_ptr, NUM_KV_HEADS, HEAD_DIM, PAGE_SIZE,
                         PRECISE_TRIG)

    acc = tl.zeros([ROWS, HEAD_DIM], dtype=tl.float32)
    m_i = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([ROWS], dtype=tl.float32)
    for blk in range(start, tl.minimum(end, n_old)):
        acc, m_i, l_i = _attend_block(
            acc, m_i, l_i, q, blk, seq_len, qpos, pt_row_ptr, k_head_ptr, v_head_ptr,
            ks_head_ptr, vs_head_ptr, qk_scale, NUM_KV_HEADS, HEAD_DIM, PAGE_SIZE, BLOCK_N,
            False, IS_INT8, INT8_MAGIC, DOT_PREC, LAZY_RESCALE)
    if PROLOGUE:
        # this program's own stores of the step's K/V (above) before its loads of them
        tl.debug_barrier()
    elif USE_PDL:
        # launched early (programmatic dependent launch): wait until the previous kernel (the KV
        # store) has finished and its writes (this step's keys) are visible; the workspace
        # stores below also wait for it (a previous combine may still read the workspace)
        tl.extra.cuda.gdc_wait()
    for blk in range(tl.maximum(start, n_old), end):
        acc, m_i, l_i = _attend_block(
            acc, m_i, l_i, q, blk, seq_len, qpos, pt_row_ptr, k_head_ptr, v_head_ptr,
            ks_head_ptr, vs_head_ptr, qk_scale, NUM_KV_HEADS, HEAD_DIM, PAGE_SIZE, BLOCK_N,
            True, IS_INT8, INT8_MAGIC, DOT_PREC, LAZY_RESCALE)

    seen = l_i > 0.0
    o = acc / tl.where(seen, l_i, 1.0)[:, None]
    lse = tl.where(seen, (m_i + tl.log2(tl.where(seen, l_i, 1.0))) * _LN2,
                   float("-inf"))
    o_base = o_part_ptr + h * stride_oh + split * stride_os
    tl.store(o_base + out_row[:, None] + offs_d[None, :], o, mask=row_valid[:, None])
    tl.store(lse_ptr + h * stride_lh + split * stride_ls + lse_row, lse, mask=row_valid)
