"""L2 prefetch of a decode program's first K/V pages, issued before it waits for its predecessor.

Split-KV decode stage 1 (``kernels/decode_split.py``) is launched with programmatic dependent
launch: it may start while the qkv projection before it still runs, but it cannot score a key
before that projection's q is written, so it waits (``griddepcontrol.wait``) near its start. At
4k positions every program walks one or two key blocks, so it spends most of its life waiting on
the latency of those first loads, after the wait, after the q-norm and RoPE of its prologue.

``prefetch_kv_pages`` issues one ``cp.async.bulk.prefetch.L2`` per page for K and V (and the INT8
scales) of the program's first ``PAGES`` pages, before the wait: the page table and the keys of
earlier steps are no output of the predecessor (the safety rule of ``kernels/decode_split.py``),
and a prefetch is a hint that writes nothing, so no result can change. When the program then
loads those blocks, they come from L2, and the DRAM fetch overlapped the predecessor's tail and
the prologue. A page of the step's own key (written by the prologue or the KV store after the
prefetch) is still read correctly: the prefetch fills L2, which the writes then update.

The idea, the DRAM kept busy while a kernel's dependencies resolve, is the persistent
"megakernel" decoders' (Hazy Research 2025); ``kernels/l2_prefetch.py`` has the instruction.
GPU only (sm_90+): the launcher passes ``PAGES = 0`` elsewhere (the interpreter runs no PTX).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _bulk_prefetch_l2(ptrs, nbytes):
    """One ``cp.async.bulk.prefetch.L2`` per lane of ``ptrs`` (16-byte aligned) for ``nbytes``
    (int32, a multiple of 16); a lane with ``nbytes <= 0`` issues nothing."""
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.gt.s32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; "
        "mov.u32 $0, 0; }",
        "=r,l,r", [ptrs, nbytes], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def prefetch_kv_pages(pt_row_ptr, pos_lo, pos_hi, seq_len, k_head_ptr, v_head_ptr,
                      ks_head_ptr, vs_head_ptr,
                      NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
                      PAGE_SIZE: tl.constexpr, PAGES: tl.constexpr, IS_INT8: tl.constexpr):
    """Prefetch into L2 the K and V pages (one KV head's ``PAGE_SIZE x HEAD_DIM`` slab of each:
    16 KB for BF16 at page 64, head_dim 128) holding positions ``[pos_lo, min(pos_hi, seq_len))``
    of one sequence, at most ``PAGES`` (a power of two, <= 32) pages from the first; with
    ``IS_INT8`` also the float32 scales of those pages. ``pt_row_ptr`` is the sequence's
    page-table row; ``*_head_ptr`` point at the KV head's slab of page 0 (the pool layouts of
    ``kernels/decode_split.py``: a page's slab of one head is contiguous in K, V and the scales,
    the INT8 V pages transposed).

    The prefetches are the lanes of a 128-wide tensor (one per thread of a 4-warp program, so
    no thread repeats another's; unused lanes issue nothing): lane ``i`` takes page ``i %
    PAGES`` of tensor ``i // PAGES`` (K, V, then the K and V scales)."""
    lane = tl.arange(0, 128)
    j = lane % PAGES
    kind = lane // PAGES
    first = pos_lo // PAGE_SIZE
    n_pages = tl.cdiv(tl.minimum(pos_hi, seq_len), PAGE_SIZE) - first
    valid = (j < n_pages) & (kind < (4 if IS_INT8 else 2))
    page = tl.load(pt_row_ptr + first + j, mask=valid, other=0).to(tl.int64)
    es: tl.constexpr = k_head_ptr.dtype.element_ty.primitive_bitwidth // 8
    slab_bytes = page * (NUM_KV_HEADS * PAGE_SIZE * HEAD_DIM * es)
    scale_bytes = page * (NUM_KV_HEADS * PAGE_SIZE * 4)
    u8 = tl.pointer_type(tl.uint8)
    ptr = tl.where(kind == 0, k_head_ptr.to(u8) + slab_bytes, v_head_ptr.to(u8) + slab_bytes)
    size = tl.full([128], PAGE_SIZE * HEAD_DIM * es, tl.int32)
    if IS_INT8:
        ptr = tl.where(kind == 2, ks_head_ptr.to(u8) + scale_bytes, ptr)
        ptr = tl.where(kind == 3, vs_head_ptr.to(u8) + scale_bytes, ptr)
        size = tl.where(kind >= 2, PAGE_SIZE * 4, size)
    _bulk_prefetch_l2(ptr, tl.where(valid, size, 0))


def prefetch_pages(blocks: int, block_n: int, page_size: int) -> int:
    """Pages to prefetch for a program's first ``blocks`` key blocks of ``block_n`` keys
    (``prefetch_kv_pages``'s ``PAGES``): a power of two up to 32, 0 when ``blocks`` is 0."""
    if blocks <= 0:
        return 0
    return min(32, triton.next_power_of_2(max(1, -(-blocks * block_n // page_size))))
