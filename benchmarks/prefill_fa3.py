"""Does the FlashAttention-3 schedule beat our Triton prefill attention on Hopper? A Gluon
experiment for issue 16's 32k prefill target, not a kernel the engine runs.

``kernels/prefill_attention.py`` (Triton, FlashAttention-2 structure) runs at 491 TFLOP/s at 32k
on an H200, cuDNN at 595. FlashAttention-3 (Shah et al. 2024) overlaps the softmax with the
warpgroup MMAs, which Triton 3.6 cannot express (BENCHMARKS.md, "Compiled on a CPU: the prefill
loop software-pipelined by hand stays serial in Triton 3.6"); Gluon can.

The case: one sequence's last ``n_new`` queries (positions ``seq_len - n_new .. seq_len - 1``)
over its paged BF16 K/V (``[num_pages, Hkv, 64, 128]``, int32 page table), GQA, head_dim 128,
causal. One program per (128 query rows, query head); grid ``(Hq, tiles)``, heads fastest (a
group's heads share K/V in L2), tiles last-first. ``gl.warp_specialize`` splits a program in:

- a loading warp (``_fa3_loader``, 24 registers): the query tile by TMA, then per 64-key block
  (one page of the pool viewed as ``[rows, 128]``, ``kernels/pool_tma.py``) a TMA copy of K and
  one of V into a ring of ``STAGES`` buffers, ``k_ready``/``v_ready``/``kv_empty`` mbarriers;
- two compute warpgroups (``_fa3_compute`` twice, 4 warps and 64 query rows each, 240
  registers): separate partitions, so each has its own named barrier and they drift apart
  freely (one's softmax can run under the other's MMAs; FA3's explicit ping-pong is not done);
  each arrives once on ``kv_empty`` (count 2). Per block j, FA3's intra-warpgroup overlap
  (section 3.2, Algorithm 2): issue ``S_j = Q K_j^T`` async, rescale ``O`` meanwhile, issue
  ``O += P_{j-1} V_{j-1}`` (P from registers as the A operand), ``wait(1)`` (S_j done), the
  online softmax of S_j (float32, exp2, the scale folded into one FMA) while the P.V runs,
  ``wait(0)``, free the stage. The causal mask (and the sequence end) only on blocks that reach
  past the warpgroup's first row. The last page's slots past ``seq_len`` are zeroed in shared
  memory before their P.V (stale NaN would poison it). O leaves by TMA from Q's buffer.

Not the deeper overlap (the next scores issued before this softmax, a P.V in flight across the
back edge; FA3's own main loop does not do it either, it waits for all at each iteration's end):
it compiles, but ptxas then serializes every wgmma (C7514, "non wgmma instructions reading
accumulator registers of a wgmma between start and end of the pipeline stage"), with or without
the first iteration peeled. ``tests/compile_prefill_fa3.py`` runs ptxas and reports C7514.

Prediction (before any run): ~600 TFLOP/s at 32k on an H200 (from 491), a little above cuDNN's
595 only with the two warpgroups interleaving well; 4k lower (~480: more masked diagonal
blocks, one 64-key block of waste a tile). Near 491 would say the overlap did not happen.

GPU only (Hopper, sm_90). ``tests/test_prefill_fa3.py`` compiles it for sm_90 on a CPU and checks
it against ``kernels.reference.paged_attention`` on a GPU.

Timed by ``benchmarks/prefill_fa3_bench.py`` (``gpu_check.sh fa3``)::

    python3 benchmarks/prefill_fa3_bench.py [--lengths 4096,32768] [--new 2048] [--stages 2,3,4]
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BLOCK_M, BLOCK_N, HEAD_DIM, PAGE = 128, 64, 128, 64
HALF_M = BLOCK_M // 2  # query rows a compute warpgroup
REGS = gl.constexpr(240)  # registers a thread of the second compute warpgroup
LOG2E = 1.4426950408889634


@gluon.jit
def _fa3_loader(q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready,
                kv_empty, pt_ptr, head, m0, n_blocks, k_page_rows, k_head_rows, v_page_rows,
                v_head_rows, GROUP: gl.constexpr):
    """The loading warp: both halves of the query tile, then K and V of blocks ``0 ..
    n_blocks - 1`` (one page each) into the ring."""
    HALF: gl.constexpr = q_desc.block_type.shape[0]
    HD: gl.constexpr = q_desc.block_type.shape[1]
    STAGES: gl.constexpr = k_bufs.type.shape[0]
    mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [m0, head * HD], q_bar, q_smem.index(0))
    tma.async_copy_global_to_shared(q_desc, [m0 + HALF, head * HD], q_bar, q_smem.index(1))
    kv_head = head // GROUP
    for j in range(n_blocks):
        s = j % STAGES
        page = gl.load(pt_ptr + j)
        mbarrier.wait(kv_empty.index(s), ((j // STAGES) & 1) ^ 1)  # a new ring starts free
        mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [page * k_page_rows + kv_head * k_head_rows, 0],
                                        k_ready.index(s), k_bufs.index(s))
        mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [page * v_page_rows + kv_head * v_head_rows, 0],
                                        v_ready.index(s), v_bufs.index(s))


@gluon.jit
def _fa3_softmax(s, m_i, l_i, j, n_full, q_pos, k_off, kv_end, qk_scale, BLOCK_N: gl.constexpr):
    """Online softmax of raw scores ``s`` [rows, BLOCK_N] (float32) of block j: returns the
    probabilities, the rescale of the running sums, the new max (raw units) and sum."""
    if j >= n_full:  # the block reaches past the first row: causal mask, sequence end
        kpos = j * BLOCK_N + k_off
        keep = (gl.expand_dims(kpos, 0) <= gl.expand_dims(q_pos, 1)) & gl.expand_dims(
            kpos < kv_end, 0)
        s = gl.where(keep, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1))  # finite: every row sees key 0 in block 0
    alpha = gl.exp2((m_i - m_new) * qk_scale)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_new * qk_scale, 1))  # one FMA an element
    return p, alpha, m_new, l_i * alpha + gl.sum(p, 1)


@gluon.jit
def _fa3_rescale(o, alpha, o_layout: gl.constexpr):
    return o * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)


@gluon.jit
def _fa3_compute(q_smem, k_bufs, v_bufs, o_desc, q_bar, k_ready, v_ready, kv_empty, tail_bar,
                 head, r0, ctx, kv_end, seq_len, n_blocks, qk_scale, s_layout: gl.constexpr,
                 o_layout: gl.constexpr, ZEROES_TAIL: gl.constexpr):
    """One compute warpgroup: query rows ``r0 .. r0 + 63`` of the chunk against every block
    (FlashAttention-3's intra-warpgroup overlap, module notes)."""
    BM: gl.constexpr = q_smem.type.shape[0]
    HD: gl.constexpr = q_smem.type.shape[1]
    BN: gl.constexpr = k_bufs.type.shape[1]
    STAGES: gl.constexpr = k_bufs.type.shape[0]
    dt: gl.constexpr = q_smem.dtype
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    q_pos = ctx + r0 + gl.arange(0, BM, layout=gl.SliceLayout(1, s_layout))
    k_off = gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
    # blocks every row sees whole, no mask (clamped for a half of padding rows past n_new)
    n_full = gl.minimum((ctx + r0 + 1) // BN, kv_end // BN)
    s_zero = gl.zeros([BM, BN], gl.float32, s_layout)
    m_i = gl.full([BM], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BM], gl.float32, gl.SliceLayout(1, s_layout))

    mbarrier.wait(q_bar, 0)
    mbarrier.wait(k_ready.index(0), 0)
    s_tok = warpgroup_mma(q_smem, k_bufs.index(0).permute((1, 0)), s_zero, use_acc=False,
                          is_async=True)
    s = warpgroup_mma_wait(0, deps=[s_tok])
    p, alpha, m_i, l_i = _fa3_softmax(s, m_i, l_i, 0, n_full, q_pos, k_off, kv_end, qk_scale, BN)
    o = gl.zeros([BM, HD], gl.float32, o_layout)
    for j in range(1, n_blocks):
        mbarrier.wait(k_ready.index(j % STAGES), (j // STAGES) & 1)
        s_tok = warpgroup_mma(q_smem, k_bufs.index(j % STAGES).permute((1, 0)), s_zero,
                              use_acc=False, is_async=True)
        o = _fa3_rescale(o, alpha, o_layout)  # while S_j runs
        pv = (j - 1) % STAGES
        mbarrier.wait(v_ready.index(pv), ((j - 1) // STAGES) & 1)
        p_op = gl.convert_layout(p.to(dt), p_layout)
        acc = warpgroup_mma(p_op, v_bufs.index(pv), o, is_async=True)
        s = warpgroup_mma_wait(1, deps=[s_tok])  # S_j done, P_{j-1} V_{j-1} in flight
        p, alpha, m_i, l_i = _fa3_softmax(s, m_i, l_i, j, n_full, q_pos, k_off, kv_end,
                                          qk_scale, BN)
        o, p_op = warpgroup_mma_wait(0, deps=[acc, p_op])
        mbarrier.arrive(kv_empty.index(pv))  # K_{j-1}, V_{j-1} read (one of two arrivals)
    last = n_blocks - 1
    o = _fa3_rescale(o, alpha, o_layout)
    v_last = v_bufs.index(last % STAGES)
    mbarrier.wait(v_ready.index(last % STAGES), (last // STAGES) & 1)
    if (seq_len % BN != 0) & (n_blocks * BN > seq_len):
        # the sequence's last page: its slots past seq_len hold stale data, P is 0 there but
        # 0 * NaN is not; the first warpgroup zeroes them, the second waits for it
        if ZEROES_TAIL:
            v_reg_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1],
                                                          [1, 0])
            slot = gl.arange(0, BN, layout=gl.SliceLayout(1, v_reg_layout))
            v = v_last.load(v_reg_layout)
            v_last.store(gl.where(gl.expand_dims(last * BN + slot < seq_len, 1), v, 0.0))
            fence_async_shared()
            mbarrier.arrive(tail_bar)  # after a barrier of this warpgroup's threads
        else:
            mbarrier.wait(tail_bar, 0)
    acc = warpgroup_mma(gl.convert_layout(p.to(dt), p_layout), v_last, o, is_async=True)
    o = warpgroup_mma_wait(0, deps=[acc])
    o = o / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, o_layout)), 1)
    q_smem.store(o.to(dt))  # this half of the query tile's buffer holds its output
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [r0, head * HD], q_smem)
    tma.store_wait(0)


@gluon.jit
def _fa3_kernel(q_desc, k_desc, v_desc, o_desc, pt_ptr, seq_len, n_new, k_page_rows,
                k_head_rows, v_page_rows, v_head_rows, qk_scale, GROUP: gl.constexpr,
                STAGES: gl.constexpr):
    HALF: gl.constexpr = q_desc.block_type.shape[0]  # 64 query rows a warpgroup
    HD: gl.constexpr = q_desc.block_type.shape[1]
    BN: gl.constexpr = k_desc.block_type.shape[0]
    head = gl.program_id(0)
    m0 = (gl.num_programs(1) - 1 - gl.program_id(1)) * (2 * HALF)  # last (longest) tiles first
    ctx = seq_len - n_new
    kv_end = ctx + gl.minimum(m0 + 2 * HALF, n_new)  # one past the tile's last row's position
    n_blocks = (kv_end + BN - 1) // BN
    # wgmma accumulators of one warpgroup: [16, N] a warp, the 4 warps stacked on rows
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HD, 16])
    q_smem = gl.allocate_shared_memory(q_desc.dtype, [2, HALF, HD], q_desc.layout)
    k_bufs = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BN, HD], k_desc.layout)
    v_bufs = gl.allocate_shared_memory(v_desc.dtype, [STAGES, BN, HD], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    tail_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    kv_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    mbarrier.init(tail_bar, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(s), count=1)
        mbarrier.init(v_ready.index(s), count=1)
        mbarrier.init(kv_empty.index(s), count=2)  # one arrival a compute warpgroup
    gl.warp_specialize([
        (_fa3_compute, (q_smem.index(0), k_bufs, v_bufs, o_desc, q_bar, k_ready, v_ready,
                        kv_empty, tail_bar, head, m0, ctx, kv_end, seq_len, n_blocks, qk_scale,
                        s_layout, o_layout, True)),
        (_fa3_compute, (q_smem.index(1), k_bufs, v_bufs, o_desc, q_bar, k_ready, v_ready,
                        kv_empty, tail_bar, head, m0 + HALF, ctx, kv_end, seq_len, n_blocks,
                        qk_scale, s_layout, o_layout, False)),
        (_fa3_loader, (q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready,
                       kv_empty, pt_ptr, head, m0, n_blocks, k_page_rows, k_head_rows,
                       v_page_rows, v_head_rows, GROUP)),
    ], [4, 1], [REGS, 24])


def tile_layout(rows: int) -> gl.NVMMASharedLayout:
    """The TMA tiles' shared-memory layout: bfloat16 ``[rows, 128]`` (128-byte swizzle)."""
    return gl.NVMMASharedLayout.get_default_for([rows, HEAD_DIM], gl.bfloat16)


def prefill_fa3(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                page_table: torch.Tensor, seq_len: int, n_new: int, sm_scale: float | None = None,
                *, out: torch.Tensor | None = None, stages: int = 4) -> torch.Tensor:
    """Causal attention of one sequence's last ``n_new`` queries to its paged K/V (module notes).

    Oracle: ``kernels.reference.paged_attention``.

    Args:
        q: bfloat16 [n_new, Hq, 128], contiguous: the queries at positions ``seq_len - n_new ..
            seq_len - 1``.
        k_cache, v_cache: bfloat16 [num_pages, Hkv, 64, 128], the last two dims contiguous, page
            and head strides multiples of 128 (``kernels.pool_tma.tma_ok``); Hq % Hkv == 0.
            Their first ``seq_len`` positions (the chunk's own included) are stored.
        page_table: int32 [>= ceil(seq_len / 64)], contiguous: this sequence's page ids.
        seq_len, n_new: host ints, 1 <= n_new <= seq_len.
        sm_scale: logit scale; None means 1/sqrt(128).
        out: optional bfloat16 [n_new, Hq, 128] contiguous output; allocated if None.
        stages: K/V buffers in the ring (2 to 4; 32 KB each).

    Returns:
        bfloat16 [n_new, Hq, 128] (``out`` if given).

    Raises:
        ValueError: on shapes, dtypes, layouts or values it does not support, or without a
            Hopper GPU (sm_90: wgmma), before anything runs on a GPU.
    """
    from kernels.pool_tma import pool_rows, tma_ok

    def check(ok: bool, msg: str) -> None:
        if not ok:
            raise ValueError(f"prefill_fa3: {msg}")

    check(q.dim() == 3 and q.dtype == torch.bfloat16 and q.shape[2] == HEAD_DIM
          and q.is_contiguous(), f"q must be bfloat16 [n_new, Hq, {HEAD_DIM}], contiguous")
    check(all(c.dim() == 4 and c.dtype == torch.bfloat16 and c.shape[2:] == (PAGE, HEAD_DIM)
              and c.stride(3) == 1 and c.stride(2) == HEAD_DIM for c in (k_cache, v_cache))
          and k_cache.shape == v_cache.shape,
          f"k_cache, v_cache must be bfloat16 [num_pages, Hkv, {PAGE}, {HEAD_DIM}], alike, "
          "with contiguous last two dims")
    hq, hkv = q.shape[1], k_cache.shape[1]
    check(hq % hkv == 0, f"Hq={hq} is not a multiple of Hkv={hkv}")
    check(isinstance(seq_len, int) and isinstance(n_new, int) and 1 <= n_new <= seq_len
          and q.shape[0] == n_new, f"need host ints 1 <= n_new <= seq_len and q.shape[0] == "
          f"n_new; got seq_len={seq_len}, n_new={n_new}, q.shape[0]={q.shape[0]}")
    check(page_table.dtype == torch.int32 and page_table.dim() == 1
          and page_table.is_contiguous() and page_table.numel() * PAGE >= seq_len,
          "page_table must be int32 [>= ceil(seq_len / 64)], contiguous")
    check(tma_ok(k_cache) and tma_ok(v_cache), "the pools need page/head strides that are "
          "multiples of 128, a 16-byte aligned base and fewer than 2^31 rows (TMA)")
    check(2 <= stages <= 4, f"stages must be 2 to 4, got {stages}")
    check(out is None or (out.shape == q.shape and out.dtype == q.dtype
                          and out.is_contiguous()), "out must be like q")
    check(all(t.is_cuda and t.device == q.device for t in (q, k_cache, v_cache, page_table)
              if t is not None) and (out is None or out.device == q.device),
          "every tensor must be on the same CUDA device")
    check(torch.cuda.get_device_capability(q.device)[0] == 9, "needs a Hopper GPU (sm_90)")
    if out is None:
        out = torch.empty_like(q)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    q2, o2 = q.view(n_new, hq * HEAD_DIM), out.view(n_new, hq * HEAD_DIM)
    q_desc = TensorDescriptor(q2, list(q2.shape), list(q2.stride()), [HALF_M, HEAD_DIM],
                              tile_layout(HALF_M))
    o_desc = TensorDescriptor(o2, list(o2.shape), list(o2.stride()), [HALF_M, HEAD_DIM],
                              tile_layout(HALF_M))
    k_desc, v_desc = (TensorDescriptor(c, [pool_rows(c), HEAD_DIM], [HEAD_DIM, 1],
                                       [BLOCK_N, HEAD_DIM], tile_layout(BLOCK_N))
                      for c in (k_cache, v_cache))
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(HEAD_DIM)
    grid = (hq, -(-n_new // BLOCK_M))
    _fa3_kernel[grid](q_desc, k_desc, v_desc, o_desc, page_table, seq_len, n_new,
                      k_cache.stride(0) // HEAD_DIM, k_cache.stride(1) // HEAD_DIM,
                      v_cache.stride(0) // HEAD_DIM, v_cache.stride(1) // HEAD_DIM,
                      sm_scale * LOG2E, GROUP=hq // hkv, STAGES=stages, num_warps=4)
    return out
