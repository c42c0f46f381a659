"""A range of key blocks of paged prefill attention: ``_attend_blocks``, the online-softmax update
of one query tile over keys ``lo .. hi`` (``kernels/prefill_attention.py`` holds the kernel, its
launcher and the design notes: the causal phases, the INT8 layout and scoring, TMA loads, the
grid).

Per ``BLOCK_N`` keys: the page lookup, the K/V loads (pointer loads, or TMA descriptor loads of a
page slice), the scores (with ``QK_INT8`` two int8 dots summed exactly in int32), the INT8 scales,
the causal mask (the diagonal phase only), the online-softmax update and ``P . V``. The lookup,
the scales and the online-softmax update are the shared steps of ``kernels/paged_walk.py``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels.paged_walk import block_page, load_scales, online_softmax, scale_probs, scale_scores


@triton.jit
def _attend_blocks(acc, l_i, m_i, q, q_lo, q_scale,
                   k_ptr, v_ptr,            # pool base + KV-head offset, [pages, ., P, D]
                   ks_ptr, vs_ptr,          # scale base + KV-head offset, [pages, ., P]
                   desc_k, desc_v,          # TMA descriptors: K as [rows, D], V as [rows, D]
                                            # (INT8: [rows, P], transposed pages)
                   pt_row_ptr,              # int32 [max_pages], this sequence's page ids
                   stride_kp, stride_vp, stride_sp, k_head_row, v_head_row,
                   lo, hi, q_pos, kv_end, qk_scale,
                   PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                   IS_INT8: tl.constexpr, MASKED: tl.constexpr, DOT_PREC: tl.constexpr,
                   USE_TMA: tl.constexpr, QK_INT8: tl.constexpr,
                   dt: tl.constexpr):
    """Online-softmax update of (acc, l_i, m_i) over keys ``lo .. hi`` (step BLOCK_N).

    ``dt`` is the P.V dtype (the query's). With ``QK_INT8``, ``q`` and ``q_lo`` are the int8
    halves of the query tile and ``q_scale`` its row scales (``kernels/query_int8.py``)."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    for n0 in tl.range(lo, hi, BLOCK_N):
        kpos = n0 + offs_n                                              # [BLOCK_N]
        kmask = kpos < kv_end
        # NOTE: the launcher makes BLOCK_N divide PAGE_SIZE or be a multiple of it; page ids of
        # blocks spanning pages are loaded masked in both phases.
        page = block_page(pt_row_ptr, n0, kpos, kv_end, PAGE_SIZE, BLOCK_N, True)
        if BLOCK_N <= PAGE_SIZE:
            slot = n0 % PAGE_SIZE + offs_n
        else:
            slot = kpos % PAGE_SIZE
        if USE_TMA:
            # Row of (page, head, slot) in the [rows, D] view; the launcher checks < 2^31.
            k_row = page * (stride_kp // HEAD_DIM) + k_head_row + n0 % PAGE_SIZE
            k = desc_k.load([k_row.to(tl.int32), 0])
            if IS_INT8:  # transposed V pages: a [D, BLOCK_N] tile at column n0 % PAGE_SIZE
                v_row = page * (stride_vp // PAGE_SIZE) + v_head_row
                v = tl.trans(desc_v.load([v_row.to(tl.int32), n0 % PAGE_SIZE]))
            else:
                v_row = page * (stride_vp // HEAD_DIM) + v_head_row + n0 % PAGE_SIZE
                v = desc_v.load([v_row.to(tl.int32), 0])
            if MASKED and not IS_INT8:  # whole-page tiles: zero what lies past the last row
                # (int8 codes are finite and masked keys get scale 0: nothing to zero)
                k = tl.where(kmask[:, None], k, 0)
                v = tl.where(kmask[:, None], v, 0)
        else:
            k_off = page * stride_kp + slot * HEAD_DIM                  # int64
            k_off2 = k_off[:, None] + offs_d[None, :]                   # [BLOCK_N, D]
            if IS_INT8:  # transposed V pages: code (slot, d) at d * PAGE_SIZE + slot
                v_off2 = (page * stride_vp + slot)[:, None] + offs_d[None, :] * PAGE_SIZE
            else:
                v_off2 = (page * stride_vp + slot * HEAD_DIM)[:, None] + offs_d[None, :]
            if MASKED:
                k = tl.load(k_ptr + k_off2, mask=kmask[:, None], other=0)
                v = tl.load(v_ptr + v_off2, mask=kmask[:, None], other=0)
            else:
                k = tl.load(k_ptr + k_off2)
                v = tl.load(v_ptr + v_off2)
        if QK_INT8:
            # exact in int32: |127 q_hi.k + q_lo.k| <= D * 127 * (127 * 127 + 64) < 2^31 (D <= 1024)
            t = tl.dot(q, tl.trans(k), out_dtype=tl.int32) * 127
            t = tl.dot(q_lo, tl.trans(k), t, out_dtype=tl.int32)
            qk = t.to(tl.float32)                                       # x q_scale * 127 later
        else:
            # fp32 [BLOCK_M, BLOCK_N]
            qk = tl.dot(q, tl.trans(k.to(dt)), input_precision=DOT_PREC)
        if IS_INT8:
            s_off = page * stride_sp + slot
            ks = load_scales(ks_ptr + s_off, kmask, MASKED)
            vs = load_scales(vs_ptr + s_off, kmask, MASKED)
            if QK_INT8:
                qk = scale_scores(qk, ks, qk_scale / 127.0)
            else:
                qk = scale_scores(qk, ks, qk_scale)
        else:
            qk = qk * qk_scale
        if MASKED:
            keep = (kpos[None, :] <= q_pos[:, None]) & kmask[None, :]
            qk = tl.where(keep, qk, float("-inf"))
        # NOTE: every row sees key 0 in its first block, so m_new is finite from the start (no
        # guard); with QK_INT8 the row scale of the query halves is still to be applied.
        p, m_i, l_i, acc = online_softmax(qk, q_scale, m_i, l_i, acc, False, QK_INT8, False)
        if IS_INT8:
            p = scale_probs(p, vs)
        acc = tl.dot(p.to(dt), v.to(dt), acc, input_precision=DOT_PREC)
    return acc, l_i, m_i
