"""Paged causal prefill attention: a chunk of new queries attends to its cached prefix and itself.

FlashAttention-2 structure (Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism
and Work Partitioning"; Triton's fused-attention tutorial): one program holds ``BLOCK_M`` queries of
one sequence and one query head, walks that sequence's K/V ``BLOCK_N`` positions at a time through
the page table, and keeps a running max and sum in float32 (online softmax, ``exp2`` with the scale
pre-multiplied by log2(e); the steps shared with decode are in ``kernels/paged_walk.py``). Scores
never touch memory. Probabilities are cast to the K/V element type for the P.V product on tensor
cores.

Causality over the paged pool (see ``infer/meta.py`` for the length vocabulary): query ``t`` of
sequence ``b`` sits at position ``ctx_b + t`` with ``ctx_b = seq_lens[b] - n_b``. A tile of rows
``m0 .. m0+BLOCK_M-1`` therefore sees every key ``< ctx_b + m0 + 1`` unmasked (phase 1, no mask, no
bounds check), then the few blocks that overlap the diagonal with a mask (phase 2); it never loads a
key beyond its last row's position. Masked loads fill with zeros, so stale data or NaN in unused
slots of the last page cannot leak (0 * NaN would poison the P.V product).

INT8 pools (``kernels/reference.quantize_int8`` layout; V pages transposed, ``[num_pages, Hkv, D,
page_size]``, see ``infer/kv_pool.py``): each key's scale multiplies its column of scores and each
value's scale multiplies its column of probabilities before P.V. No dequantized copy is written.
The value codes are converted to the query dtype in registers for P.V. With ``QK_INT8`` (16-bit
queries) the key codes feed the tensor cores as they are: each program splits its query tile once
into two int8 halves and a row scale (``kernels/query_int8.py``) and scores with two int8 dots
summed exactly in int32, ``127 * (q_hi . k) + q_lo . k``; float32 queries keep the converting path.
With ``STAGE_Q`` (on Hopper) the two int8 query tiles take a round trip through the program's own
slots of ``out`` (store, block barrier, load): Triton feeds a loaded tile to the warpgroup MMA from
shared memory, while a computed one stays in registers and is re-read from shared memory at every
key block.

Grid: ``(Hq, cdiv(max_query_len, BLOCK_M), B)``. Heads vary fastest, so the query heads sharing a
KV head run side by side and share K/V through L2; query tiles are visited last-first, so the
longest (most keys) tiles of the causal triangle start first. Tiles past a sequence's ``n_b`` exit.
One query head per program (not GQA packing, which decode uses): prefill is compute-bound and the
group's K/V tiles come from L2, so packing would save L2 traffic, not FLOPs.

K/V tiles come in by pointer loads (Triton pipelines them with cp.async over ``num_stages``), or,
with ``use_tma``, through TMA tensor descriptors over the pool viewed as ``[rows, D]``
(``kernels/pool_tma.py``; Hopper+; a tile is one page slice, masked tiles are zeroed in registers
instead; the default on Hopper). Tiles come from a fixed heuristic (``kernels.tiles.prefill_tiles``,
no autotuning); ``benchmarks/attention.py --sweep`` measures others. Measurements behind these
choices: BENCHMARKS.md ("Prefill" and "Kernel design notes moved from the code").

The file holds the kernel and its launcher (the walk over a range of key blocks is
``kernels/prefill_blocks.py``'s); the launcher's argument checks are long because the kernel takes
a flattened batch, two pool layouts, two load paths and an optional int8 scoring path, and every
one of them is checked with a message at the boundary.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels.checks import check_pool_pair
from kernels.pool_tma import pool_descriptor, tma_ok
from kernels.prefill_blocks import _attend_blocks
from kernels.query_int8 import split_query_int8
from kernels.tiles import PrefillTiles, prefill_tiles, qk_int8_supported

LOG2E = 1.4426950408889634


@triton.jit
def _prefill_kernel(
    q_ptr,                     # [T, Hq, D] queries (bf16/fp16/fp32)
    k_ptr, v_ptr,              # [num_pages, Hkv, PAGE_SIZE, D] pool (q dtype or int8; int8 V:
                               # [num_pages, Hkv, D, PAGE_SIZE])
    ks_ptr, vs_ptr,            # float32 [num_pages, Hkv, PAGE_SIZE] scales (INT8 only)
    desc_k, desc_v,            # TMA descriptors over k/v as [rows, D] (USE_TMA only)
    o_ptr,                     # [T, Hq, D] output, q dtype
    seq_lens_ptr,              # int32 [B], positions cached after this step
    qsl_ptr,                   # int32 [B + 1], row offsets of each sequence's queries
    pt_ptr,                    # int32 [B, max_pages], page table
    stride_qt, stride_qh, stride_ot, stride_oh,
    stride_kp, stride_kh, stride_vp, stride_vh, stride_sp, stride_sh, stride_pt,
    qk_scale,                  # sm_scale * log2(e)
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_INT8: tl.constexpr,
    DOT_PREC: tl.constexpr, USE_TMA: tl.constexpr, QK_INT8: tl.constexpr,
    STAGE_Q: tl.constexpr,
):
    head = tl.program_id(0)
    tile = tl.num_programs(1) - 1 - tl.program_id(1)     # last (longest) tiles first
    b = tl.program_id(2)
    q_start = tl.load(qsl_ptr + b)
    n_b = tl.load(qsl_ptr + b + 1) - q_start
    m0 = tile * BLOCK_M
    if m0 >= n_b:
        return
    seq_len = tl.load(seq_lens_ptr + b)
    ctx = seq_len - n_b                                  # positions cached before the chunk
    kv_head = head // GROUP

    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < n_b
    rows = (q_start + offs_m).to(tl.int64)
    q = tl.load(q_ptr + rows[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)          # [BLOCK_M, D]
    q_pos = ctx + offs_m                                 # [BLOCK_M]
    dt: tl.constexpr = q_ptr.dtype.element_ty            # the P.V dtype
    if QK_INT8:
        q, q_lo, q_scale = split_query_int8(q)
        if STAGE_Q:
            # Round-trip the int8 halves through this tile's own output slots (each (row, head)
            # slot holds D 16-bit values: 2 * D bytes, room for q_hi then q_lo; only this program
            # touches them until it writes its output). Loaded tiles are what Triton feeds to a
            # warpgroup MMA straight from shared memory; computed ones it keeps in registers and
            # re-reads from shared memory every key block (module notes).
            tl.static_assert(o_ptr.dtype.element_ty.primitive_bitwidth == 16)
            o8 = o_ptr.to(tl.pointer_type(tl.int8))
            q8_off = rows[:, None] * stride_ot * 2 + head * (2 * stride_oh) + offs_d[None, :]
            tl.store(o8 + q8_off, q, mask=row_ok[:, None])
            tl.store(o8 + q8_off + HEAD_DIM, q_lo, mask=row_ok[:, None])
            tl.debug_barrier()  # the block's stores are visible to all its threads
            q = tl.load(o8 + q8_off, mask=row_ok[:, None], other=0, cache_modifier=".cg")
            q_lo = tl.load(o8 + q8_off + HEAD_DIM, mask=row_ok[:, None], other=0,
                           cache_modifier=".cg")
    else:
        q_lo, q_scale = q, tl.full([BLOCK_M], 1.0, tl.float32)  # unused

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)

    k_base = k_ptr + kv_head.to(tl.int64) * stride_kh
    v_base = v_ptr + kv_head.to(tl.int64) * stride_vh
    ks_base = ks_ptr + kv_head.to(tl.int64) * stride_sh
    vs_base = vs_ptr + kv_head.to(tl.int64) * stride_sh
    pt_row = pt_ptr + b.to(tl.int64) * stride_pt
    k_head_row = kv_head * (stride_kh // HEAD_DIM)       # TMA row offsets of this KV head
    v_head_row = kv_head * (stride_vh // (PAGE_SIZE if IS_INT8 else HEAD_DIM))

    full_end = ctx + m0 + 1                              # keys every row of the tile sees
    full_blocks_end = (full_end // BLOCK_N) * BLOCK_N
    kv_end = ctx + tl.minimum(m0 + BLOCK_M, n_b)          # one past the last row's position
    # Phase 1: blocks wholly below the diagonal: no mask, no bounds check.
    acc, l_i, m_i = _attend_blocks(acc, l_i, m_i, q, q_lo, q_scale, k_base, v_base, ks_base,
                                   vs_base, desc_k, desc_v, pt_row, stride_kp, stride_vp, stride_sp,
                                   k_head_row, v_head_row, 0, full_blocks_end, q_pos, kv_end,
                                   qk_scale, PAGE_SIZE, BLOCK_N, HEAD_DIM, IS_INT8, False,
                                   DOT_PREC, USE_TMA, QK_INT8, dt)
    # Phase 2: the blocks that overlap the diagonal (or the sequence end).
    acc, l_i, m_i = _attend_blocks(acc, l_i, m_i, q, q_lo, q_scale, k_base, v_base, ks_base,
                                   vs_base, desc_k, desc_v, pt_row, stride_kp, stride_vp, stride_sp,
                                   k_head_row, v_head_row, full_blocks_end, kv_end, q_pos, kv_end,
                                   qk_scale, PAGE_SIZE, BLOCK_N, HEAD_DIM, IS_INT8, True,
                                   DOT_PREC, USE_TMA, QK_INT8, dt)
    out = acc / l_i[:, None]
    tl.store(o_ptr + rows[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])


def prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      seq_lens: torch.Tensor, query_start_loc: torch.Tensor,
                      page_table: torch.Tensor, *, max_query_len: int, sm_scale: float | None,
                      k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None,
                      out: torch.Tensor | None = None,
                      tiles: PrefillTiles | None = None) -> torch.Tensor:
    """Causal attention of a step's new queries to their sequences' paged K/V (prefill chunks).

    The step's own K/V must already be in the pool (``kernels/store_kv.py``). Oracle:
    ``kernels.reference.paged_attention``.

    Args:
        q: [T, Hq, D] bfloat16/float16/float32, queries of all sequences flattened (after q-norm and
            RoPE); the last dim contiguous. D a power of two >= 16.
        k_cache, v_cache: [num_pages, Hkv, page_size, D], q's dtype or int8 (INT8 pool; its V
            holds transposed pages, [num_pages, Hkv, D, page_size]); the last two dims contiguous
            (the page and head strides may be anything; the default TMA loads need them
            multiples of the last dim, or they fall back to pointer loads). Hq % Hkv == 0.
        seq_lens: int32 [B], positions cached per sequence including this step's new tokens.
        query_start_loc: int32 [B + 1], row offsets into T: sequence b owns rows
            ``query_start_loc[b] .. query_start_loc[b+1]`` (n_b rows, n_b may be 0).
        page_table: int32 [B, max_pages], page ids; position p of b is in page
            ``page_table[b, p // page_size]`` at slot ``p % page_size``.
        max_query_len: host int >= max_b n_b (sizes the grid; tiles past n_b exit at once).
        sm_scale: logit scale; None means 1/sqrt(D).
        k_scale, v_scale: float32 [num_pages, Hkv, page_size] per-(position, KV head) scales for an
            INT8 pool (both with the same strides, last dim contiguous); None otherwise.
        out: optional [T, Hq, D] output in q's dtype (last dim contiguous); allocated if None.
            It may be q itself but must not otherwise overlap q: with ``tiles.stage_q`` its slots
            also hold the int8 query halves for a while.
        tiles: a ``kernels.tiles.PrefillTiles``; None takes ``prefill_tiles`` for the device,
            dtypes and shapes (TMA loads where the pool allows them). ``qk_int8`` needs
            ``kernels.tiles.qk_int8_supported``; ``stage_q`` is ignored without ``qk_int8``.

    Returns:
        [T, Hq, D] in q's dtype (``out`` if given). Rows are written only for real queries.

    Raises:
        ValueError: on shapes, dtypes, layouts or tiles the kernel does not support.
    """
    def check(ok: bool, msg: str) -> None:
        if not ok:
            raise ValueError(f"prefill_attention: {msg}")

    check(q.dim() == 3 and q.stride(2) == 1, "q must be [T, Hq, D] with a contiguous last dim")
    check(q.dtype in (torch.bfloat16, torch.float16, torch.float32),
          f"q must be bfloat16, float16 or float32, got {q.dtype}")
    t, hq, d = q.shape
    try:
        check_pool_pair(k_cache, v_cache)
    except ValueError as e:
        check(False, str(e))
    num_pages, hkv, page_size, dk = k_cache.shape
    check(dk == d and d >= 16 and d & (d - 1) == 0, f"head_dim {d} must match and be a power of 2")
    check(hq % hkv == 0, f"Hq={hq} is not a multiple of Hkv={hkv}")
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        check(c.stride(3) == 1 and c.stride(2) == c.shape[3],
              f"{name}'s last two dims must be contiguous")
    is_int8 = k_cache.dtype == torch.int8
    check(is_int8 or k_cache.dtype == q.dtype,
          f"a {k_cache.dtype} pool needs {k_cache.dtype} queries, got {q.dtype}")
    if is_int8:
        check(k_scale is not None and v_scale is not None, "an INT8 pool needs k_scale and v_scale")
        for s in (k_scale, v_scale):
            check(s.dtype == torch.float32 and s.shape == k_cache.shape[:3] and s.stride(2) == 1,
                  "scales must be float32 [num_pages, Hkv, page_size], last dim contiguous")
        check(k_scale.stride() == v_scale.stride(), "k_scale and v_scale strides differ")
    else:
        check(k_scale is None and v_scale is None, "scales are only for an INT8 pool")
        k_scale = v_scale = k_cache  # unused placeholders
    b = seq_lens.shape[0]
    check(seq_lens.dtype == torch.int32 and query_start_loc.dtype == torch.int32
          and page_table.dtype == torch.int32, "seq_lens, query_start_loc, page_table: int32")
    check(query_start_loc.shape == (b + 1,) and page_table.dim() == 2
          and page_table.shape[0] == b and page_table.stride(1) == 1,
          "need query_start_loc [B+1] and page_table [B, max_pages] (last dim contiguous)")
    check(max_query_len >= 1, "max_query_len must be >= 1")
    if out is None:
        out = torch.empty_like(q)
    check(out.shape == q.shape and out.dtype == q.dtype and out.stride(2) == 1,
          "out must be like q")
    if t == 0 or b == 0:
        return out

    if tiles is None:
        tiles = prefill_tiles(q.device, q.dtype, k_cache.dtype, max_query_len=max_query_len,
                              page_size=page_size, head_dim=d,
                              tma=tma_ok(k_cache) and tma_ok(v_cache))
    block_m, block_n = tiles.block_m, tiles.block_n
    check(page_size % block_n == 0 if block_n <= page_size else block_n % page_size == 0,
          f"tiles.block_n={block_n} must divide page_size={page_size} or be a multiple of it")
    check(q.device.type != "cuda" or min(block_m, block_n) >= 16,
          "tensor-core tiles need tiles.block_m, tiles.block_n >= 16")
    desc_k = desc_v = k_cache  # unused placeholders unless use_tma
    if tiles.use_tma:
        check(block_n <= page_size, "TMA loads need tiles.block_n <= page_size")
        desc_k = pool_descriptor(k_cache, block_n)
        desc_v = pool_descriptor(v_cache, block_n, transposed=is_int8)
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(d)
    check(not tiles.qk_int8 or qk_int8_supported(q.device, q.dtype, k_cache.dtype, d),
          "tiles.qk_int8 needs an INT8 pool and 16-bit queries (CUDA: sm_80+, head_dim 32 to "
          "1024)")
    grid = (hq, triton.cdiv(max_query_len, block_m), b)
    _prefill_kernel[grid](
        q, k_cache, v_cache, k_scale, v_scale, desc_k, desc_v, out, seq_lens, query_start_loc,
        page_table,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1),
        k_scale.stride(0), k_scale.stride(1), page_table.stride(0),
        sm_scale * LOG2E,
        GROUP=hq // hkv, HEAD_DIM=d, PAGE_SIZE=page_size, BLOCK_M=block_m, BLOCK_N=block_n,
        IS_INT8=is_int8, DOT_PREC="ieee" if q.dtype == torch.float32 else "tf32",
        USE_TMA=bool(tiles.use_tma), QK_INT8=bool(tiles.qk_int8),
        STAGE_Q=bool(tiles.stage_q and tiles.qk_int8),
        num_warps=tiles.num_warps, num_stages=tiles.num_stages,
    )
    return out
