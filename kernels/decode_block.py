"""One key block of split-KV decode: the online-softmax step of stage 1 and the INT8 code
conversions it uses (``kernels/decode_split.py`` holds the kernel and the design notes: GQA
packing, INT8 layout and conversions, conditional rescaling, masking;
``kernels/decode_attention.py`` its launcher).

The block step, per ``BLOCK_N`` keys of one (sequence, KV head): look the page up in the page
table, load K (and, for INT8 pools, the key scales), score ``q . K^T`` in float32 on tensor cores,
update the running max and sum (exp2, log2 units; FlashAttention-2), and accumulate ``P . V``.
The page lookup, the scale application and the plain online-softmax update are the shared steps
of ``kernels/paged_walk.py``; the conditional rescaling of unmasked blocks is decode's own.
INT8 value codes come from transposed pages (``[num_pages, kv_heads, head_dim, page_size]``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels.paged_walk import block_page, load_scales, online_softmax, scale_probs, scale_scores


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
def _int8_codes(c, dt: tl.constexpr, MODE: tl.constexpr):
    """int8 codes as ``dt`` (the dot dtype): a plain convert (MODE 0) or via exact float16."""
    if MODE == 0:
        return c.to(dt)
    else:
        return _int8_to_f16(c, MODE).to(dt)  # a no-op for dt = float16


@triton.jit
def _attend_block(acc, m_i, l_i, q, blk, seq_len, qpos,
                  pt_row_ptr, k_head_ptr, v_head_ptr, ks_head_ptr, vs_head_ptr, qk_scale,
                  NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
                  BLOCK_N: tl.constexpr, MASKED: tl.constexpr, IS_INT8: tl.constexpr,
                  INT8_MAGIC: tl.constexpr, DOT_PREC: tl.constexpr,
                  LAZY_RESCALE: tl.constexpr):
    """One BLOCK_N-key step of the online softmax; returns the updated (acc, m_i, l_i)."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    pos = blk * BLOCK_N + offs_n  # (BLOCK_N,) key positions
    # (blk < cdiv(seq_len, BLOCK_N): a block inside one page reads an entry in use)
    page = block_page(pt_row_ptr, blk * BLOCK_N, pos, seq_len, PAGE_SIZE, BLOCK_N, MASKED)
    within = pos % PAGE_SIZE
    # contiguous pool: page stride KV_HEADS * PAGE_SIZE * HEAD_DIM elements (scales: no HEAD_DIM)
    page_off = page * (NUM_KV_HEADS * PAGE_SIZE * HEAD_DIM)  # int64
    kv_off = page_off + within * HEAD_DIM  # (BLOCK_N,)
    k_ptrs = k_head_ptr + kv_off[:, None] + offs_d[None, :]  # (BLOCK_N, HEAD_DIM)
    if IS_INT8:  # transposed V pages: code (slot, d) at d * PAGE_SIZE + slot
        v_ptrs = v_head_ptr + (page_off + within)[:, None] + offs_d[None, :] * PAGE_SIZE
    else:
        v_ptrs = v_head_ptr + kv_off[:, None] + offs_d[None, :]
    kv_valid = pos < seq_len  # used by masked blocks only
    if MASKED and not IS_INT8:  # int8 codes are finite: masked keys get scale 0 instead
        k = tl.load(k_ptrs, mask=kv_valid[:, None], other=0)
    else:
        k = tl.load(k_ptrs)  # page id 0 for a masked page-table entry: valid memory

    # scores in log2 units: (ROWS, BLOCK_N)
    if IS_INT8:
        s_off = page * (NUM_KV_HEADS * PAGE_SIZE) + within
        ks = load_scales(ks_head_ptr + s_off, kv_valid, MASKED)
        s = tl.dot(q, tl.trans(_int8_codes(k, q.dtype, INT8_MAGIC)), input_precision=DOT_PREC)
        s = scale_scores(s, ks, qk_scale)
    else:
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PREC) * qk_scale
    if MASKED:
        s = tl.where(pos[None, :] <= qpos[:, None], s, float("-inf"))
    if LAZY_RESCALE and not MASKED:
        # a row rescales only when its max grew by more than 2^8 (FlashAttention-4's
        # conditional rescaling): otherwise it keeps its stale max, so p <= 256 (exact in
        # fp16/bf16 range); the acc rescale (ROWS x HEAD_DIM multiplies) runs only when some row
        # needs it. NOTE: the decision is per row (a row's result never depends on the other rows
        # of the tile), so a verify step's rows compute what one-row steps would, bit for bit
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        grow = m_new - m_i > 8.0
        if tl.max(grow.to(tl.int32), axis=0) > 0:
            alpha = tl.where(grow, tl.exp2(m_i - m_new), 1.0)
            acc = acc * alpha[:, None]
            l_i = l_i * alpha
            m_i = tl.where(grow, m_new, m_i)
        p = tl.exp2(s - m_i[:, None])
        l_i = l_i + tl.sum(p, axis=1)
        m_new = m_i
    else:
        # a masked block may hold no key of a row yet (all masked so far): guard the max
        p, m_new, l_i, acc = online_softmax(s, m_i, m_i, l_i, acc, MASKED, False, True)

    if MASKED and not IS_INT8:
        v = tl.load(v_ptrs, mask=kv_valid[:, None], other=0)  # masked keys: V rows are 0
    else:
        v = tl.load(v_ptrs)
    if IS_INT8:
        vs = load_scales(vs_head_ptr + s_off, kv_valid, MASKED)
        pv = scale_probs(p, vs).to(q.dtype)
        acc = tl.dot(pv, _int8_codes(v, q.dtype, INT8_MAGIC), acc, input_precision=DOT_PREC)
    else:
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PREC)
    return acc, m_new, l_i
