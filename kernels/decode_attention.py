"""Split-KV decode attention over the paged pool: the launcher of flash-decoding stage 1 and
its combine.

``decode_attention`` checks its arguments, picks the tiles (``kernels/tiles.py``) and the split
count and workspace (``kernels/decode_plan.py``), launches stage 1 (``kernels/decode_split.py``:
the kernel and its design notes: GQA packing, slabs, INT8 codes, PDL) and then the combine
(``kernels/combine.py``). The reference is ``kernels/reference.py``.

Design after vLLM's ``triton_decode_attention.py`` and flash-decoding (Dao et al. 2023).
"""

from __future__ import annotations

import math

import torch
import triton

from kernels.checks import (
    check_contiguous,
    check_int8_scales,
    check_last_dim_contiguous,
    check_pool_pair,
)
from kernels.combine import combine
from kernels.decode_plan import (  # noqa: F401  (re-exported: the launcher's public helpers)
    DecodeWorkspace,
    default_num_splits,
)
from kernels.decode_prologue import DecodePrologue, prologue_args
from kernels.decode_split import _decode_split_kernel
from kernels.device import supports_pdl
from kernels.tiles import DecodeTiles, decode_tiles

_LOG2E = 1.4426950408889634


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     seq_lens: torch.Tensor, page_table: torch.Tensor, *, num_queries: int = 1,
                     sm_scale: float | None = None, k_scale: torch.Tensor | None = None,
                     v_scale: torch.Tensor | None = None, num_splits: int | None = None,
                     workspace: DecodeWorkspace | None = None, out: torch.Tensor | None = None,
                     tiles: DecodeTiles | None = None,
                     slab_rows: torch.Tensor | None = None,
                     q_from_predecessor: bool = False,
                     prologue: DecodePrologue | None = None) -> torch.Tensor:
    """Causal attention of each sequence's ``n`` new queries to its paged K/V (split-KV decode).

    Args:
        q: [B * n, num_q_heads, head_dim] float16/bfloat16/float32, sequence-major (row
            ``b * n + t`` is query ``t`` of sequence ``b``, at position ``seq_lens[b] - n + t``);
            the last dim contiguous.
        k_cache, v_cache: contiguous [num_pages, kv_heads, page_size, head_dim] in q's dtype or
            int8 (an int8 ``v_cache`` holds transposed pages, [num_pages, kv_heads, head_dim,
            page_size]: ``infer/kv_pool.py``). The step's own K/V must already be stored
            (``kernels.store_kv``), unless ``prologue`` stores them.
        seq_lens: contiguous int32 [B] cached positions per sequence including this step's ``n``;
            a 0 marks a padding sequence, whose output rows are exact zeros.
        page_table: int32 [B, max_pages] page ids, row-contiguous; entries past
            ``cdiv(seq_lens[b], page_size)`` are never read.
        num_queries: n, new tokens per sequence (1..16), the same for every sequence.
        sm_scale: logit scale, default ``1 / sqrt(head_dim)``.
        k_scale, v_scale: contiguous float32 [num_pages, kv_heads, page_size], exactly when the
            caches are int8.
        num_splits: key splits per (sequence, KV head); default ``default_num_splits`` for the
            cache dtype. Fix it per CUDA-graph bucket.
        workspace: a ``DecodeWorkspace`` large enough for this call; allocated if None.
        out: [B * n, num_q_heads, head_dim] in q's dtype, last dim contiguous; allocated if None.
        tiles: a ``kernels.tiles.DecodeTiles``; None takes ``decode_tiles`` for the device, the
            cache dtype and the step's ``n * group`` rows. With ``lazy_rescale`` an INT8 pool
            whose P.V runs in float16 (``int8_magic`` 1, 2) needs ``256 * amax / 127 < 65504``
            for each value row, i.e. values below ~32k in magnitude; bfloat16 operands have no
            such limit.
        slab_rows: contiguous int32 [B] (``num_queries`` 1 only), or None: slabs. Row ``b``'s
            program then attends rows ``b .. b + slab_rows[b] - 1`` (at most
            ``slab_capacity(group)``), which must be one sequence's queries at consecutive
            positions (``seq_lens[b] + t`` for row ``b + t``: the kernel reads only row ``b``'s,
            and the rows' page-table entries must be the same), and 0 marks a row
            an earlier row's program covers (a padding row is its own slab: 1, seq_len 0). The
            keys are then read once per slab, not once per row (a speculative verify step), and
            each row's output is bit for bit what a step of that row alone computes (with
            ``slab_rows`` 1) if all of the slab's positions lie in one key block (positions
            ``j * tiles.block_n`` .. ``(j + 1) * tiles.block_n - 1``); otherwise it is still exact
            attention, only not bit-identical.
        q_from_predecessor: q was written by the kernel launched just before this call (e.g.
            ``kernels.qk_norm_rope_store``): with PDL, stage 1 waits for that kernel before it
            loads q instead of walking earlier keys first (results unchanged).
        prologue: a ``kernels.decode_prologue.DecodePrologue``, or None. Given, ``q`` is the
            raw q (before q-norm and RoPE; any row and head strides) and stage 1 normalizes and
            rotates q and the prologue's k itself and stores the step's K/V at its
            ``slot_mapping`` before reading them: the work of ``kernels.qk_norm_rope`` and
            ``kernels.store_kv`` in this launch (with PDL, after waiting for the kernel before).
            A 16-bit pool only. Only the keys of the step's queries' positions are stored
            (``seq_lens[b] - n ..``; a padding sequence, seq_len 0, stores nothing). With
            ``num_queries`` 1, rows may be one sequence's consecutive queries (a verify step,
            with or without ``slab_rows``): each program stores every row's key it reads.

    Returns:
        ``out`` [B * n, num_q_heads, head_dim] in q's dtype. With ``workspace`` and ``out`` given
        the call allocates nothing and never reads device memory on the host (CUDA-graph safe).

    Raises:
        ValueError: naming the argument, on inconsistent shapes/dtypes/strides, a missing or
            unexpected scale, a too-small workspace, tiles that do not fit the pages, a prologue
            with an INT8 pool or bad prologue tensors (``DecodePrologue``), or an
            unsupported head_dim (must be a power of two >= 16).
    """
    if out is None:
        out = torch.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or out.stride(-1) != 1:
        raise ValueError(f"out must be {q.dtype} {tuple(q.shape)} with a contiguous last dim")
    o_part, lse, tiles = _stage1(
        q, k_cache, v_cache, seq_lens, page_table, num_queries=num_queries, sm_scale=sm_scale,
        k_scale=k_scale, v_scale=v_scale, num_splits=num_splits, workspace=workspace,
        tiles=tiles, slab_rows=slab_rows, q_from_predecessor=q_from_predecessor,
        prologue=prologue)
    if seq_lens.shape[0] == 0:
        return out
    return combine(o_part, lse, out, pdl=tiles.pdl)


def _decode_stage1(q, k_cache, v_cache, seq_lens, page_table, **kw):
    """Stage 1 alone; returns the workspace views ``(o_part, lse)``. Arguments as
    ``decode_attention`` (without ``out``); split out so benchmarks can time stage 1 and the
    combine separately."""
    return _stage1(q, k_cache, v_cache, seq_lens, page_table, **kw)[:2]


def slab_capacity(group: int) -> int:
    """The most consecutive query rows of one sequence a slab program attends (``slab_rows``):
    as many tokens as fit the one-row tile of ``group`` query heads (16 rows, or the next power
    of two of ``group``), so a slab's tile is the one-row step's tile, padding filled. 1 means
    no slabs (``group`` > 8)."""
    return max(16, triton.next_power_of_2(group)) // group


def _stage1(q, k_cache, v_cache, seq_lens, page_table, *, num_queries=1, sm_scale=None,
            k_scale=None, v_scale=None, num_splits=None, workspace=None, tiles=None,
            slab_rows=None, q_from_predecessor=False, prologue=None):
    """Stage 1's checks and launch; returns ``(o_part, lse, tiles used)``."""
    if q.dim() != 3 or q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"q must be float16/bfloat16/float32 [B * n, q_heads, head_dim], got "
                         f"{q.dtype} {tuple(q.shape)}")
    check_pool_pair(k_cache, v_cache)
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
    check_last_dim_contiguous("decode_attention", q=q, page_table=page_table)
    check_contiguous("decode_attention", seq_lens=seq_lens)
    if is_int8:
        check_int8_scales(k_cache, k_scale, v_scale)
    extra = prologue_args(prologue, q, k_cache, v_cache, k_scale, v_scale, batch)
    if not is_int8:
        k_scale, v_scale = k_cache, v_cache  # placeholders, never read (IS_INT8=False)

    group = q_heads // kv_heads
    rows = num_queries * group
    slab = 1
    if slab_rows is not None:
        if num_queries != 1:
            raise ValueError(f"slab_rows needs num_queries 1 (one query per row), got "
                             f"{num_queries}")
        if slab_rows.dtype != torch.int32 or slab_rows.shape != (batch,) or \
                slab_rows.device != seq_lens.device:
            raise ValueError(f"slab_rows must be int32 [{batch}] on {seq_lens.device}")
        check_contiguous("decode_attention", slab_rows=slab_rows)
        slab = slab_capacity(group)
    on_gpu = q.device.type == "cuda"
    if tiles is None:
        tiles = decode_tiles(q.device, k_cache.dtype, page_size=page_size, rows=rows)
    if num_splits is None:
        num_splits = default_num_splits(batch, kv_heads, q.device, k_cache.dtype)
    if num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    block_n = tiles.block_n
    if block_n % page_size and page_size % block_n:
        raise ValueError(f"tiles.block_n={block_n} must divide or be a multiple of "
                         f"page_size={page_size}")
    int8_magic = tiles.int8_magic
    if int8_magic == 2 and not on_gpu:
        int8_magic = 1  # the interpreter runs no inline PTX; 1 computes the same codes
    use_pdl = bool(tiles.pdl) and supports_pdl(q.device)
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(head_dim)
    if workspace is None:
        workspace = DecodeWorkspace.allocate(batch, kv_heads, rows, num_splits, head_dim,
                                             q.device)
    o_part, lse = workspace.views(batch, kv_heads, num_splits, rows, head_dim)
    if batch == 0:
        return o_part, lse, tiles

    _decode_split_kernel[(batch * kv_heads, num_splits)](
        q, k_cache, v_cache, k_scale, v_scale, seq_lens, page_table,
        seq_lens if slab_rows is None else slab_rows, o_part, lse,
        sm_scale * _LOG2E, q.stride(0), q.stride(1), page_table.stride(0),
        o_part.stride(0), o_part.stride(1), o_part.stride(2), o_part.stride(3),
        lse.stride(0), lse.stride(1), lse.stride(2),
        NUM_KV_HEADS=kv_heads, GROUP=group, NUM_QUERIES=num_queries, SLAB=slab,
        HEAD_DIM=head_dim,
        PAGE_SIZE=page_size, BLOCK_N=block_n, ROWS=max(16, triton.next_power_of_2(rows)),
        NUM_SPLITS=num_splits, IS_INT8=is_int8, INT8_MAGIC=int8_magic if is_int8 else 0,
        DOT_PREC="ieee" if q.dtype == torch.float32 else "tf32", USE_PDL=use_pdl,
        Q_AFTER_WAIT=use_pdl and bool(q_from_predecessor),
        LAZY_RESCALE=bool(tiles.lazy_rescale), **extra,
        num_warps=tiles.num_warps,
        num_stages=tiles.num_stages,
        **({"launch_pdl": True} if use_pdl else {}),
    )
    return o_part, lse, tiles
