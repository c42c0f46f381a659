"""Per-step attention metadata, built once per step and passed explicitly to every layer.

The length vocabulary, for one sequence ``b`` of a step that adds ``n_b`` new tokens::

    position:   0 ........................ seq_lens[b]-n_b ......... seq_lens[b]-1
                |<----- cached before the step ----->|<--- n_b new tokens --->|
                                                      query 0 ..... query n_b-1

- ``seq_lens[b]``: positions cached for ``b`` once this step's K/V are stored (new ones included).
- query ``t`` of ``b`` sits at position ``seq_lens[b] - n_b + t`` and attends to positions
  ``0 .. seq_lens[b] - n_b + t`` (causal).
- The step's tokens are flattened over sequences: ``query_start_loc[b] .. query_start_loc[b+1]``
  are the rows of ``b`` in the ``[T, heads, head_dim]`` tensors (T = total new tokens).
- Position ``p`` of ``b`` lives in page ``page_table[b, p // page_size]`` at offset
  ``p % page_size``; its flat slot is ``page * page_size + offset`` (``slot_mapping``).

A padding sequence (a row of a CUDA-graph batch bucket with no sequence in it) has ``seq_lens``
0 and slot -1 for its ``n`` query rows: ``store_kv`` skips slot -1 and the attention gives exact
zeros for it.

This module is the one home of the slot rule (``slot``), page growth (``grow_pages``) and the
page-table row (``plan_step``): prefill, the eager decode step and the graph runner all plan
through it.

Design after FlashInfer's plan()/run() split and vLLM's attention metadata: the host plans, the
kernels read only tensors (no Python objects).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from infer.kv_pool import KVPool

PAD_SLOT = -1  # the slot of a padding row's token: store_kv writes nothing for it


@dataclass
class AttnMeta:
    """Metadata of one forward step over the paged KV pool.

    Attributes:
        positions: int64 [T], the RoPE position of each new token.
        slot_mapping: int64 [T], flat pool slot (page * page_size + offset) where each new token's
            K/V are stored.
        seq_lens: int32 [B], cached positions per sequence after this step's K/V are stored.
        query_start_loc: int32 [B + 1], cumulative new-token counts (row offsets into T).
        page_table: int32 [B, max_pages], page ids per sequence; unused entries may hold any
            valid page id (they are never read past ``seq_lens``).
        max_query_len: host int, the largest ``n_b`` of the step (decides decode vs prefill).
        max_seq_len: host int, the largest ``seq_lens[b]`` (for references and bounds; kernels
            must not size their grid by it on the decode path).
        slab_rows: int32 [B] or None, a one-token-per-row step only (the graph runner's): per
            row, how many consecutive rows from it are one sequence's queries at consecutive
            positions that the decode kernel attends together (0: covered by an earlier row;
            ``kernels.decode_attention``'s ``slab_rows``). Backends without slabs ignore it.
    """

    positions: torch.Tensor
    slot_mapping: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: torch.Tensor
    page_table: torch.Tensor
    max_query_len: int
    max_seq_len: int
    slab_rows: torch.Tensor | None = None

    @property
    def num_seqs(self) -> int:
        return self.seq_lens.shape[0]

    @property
    def num_tokens(self) -> int:
        return self.positions.shape[0]


def slot(pages: Sequence[int], position: int, page_size: int) -> int:
    """The flat pool slot of ``position`` in a sequence holding ``pages``:
    ``pages[position // page_size] * page_size + position % page_size``."""
    return pages[position // page_size] * page_size + position % page_size


def grow_pages(pool: KVPool, pages: list[int], num_positions: int) -> None:
    """Extend ``pages`` (in place) with pages from ``pool`` until it holds ``num_positions``.

    Raises:
        OutOfPages: if the pool has too few free pages (``pages`` is left unchanged).
    """
    need = pool.pages_for(num_positions) - len(pages)
    if need > 0:
        pages.extend(pool.allocate(need))


@dataclass
class StepPlan:
    """A step's metadata on the host, row by row (see the module docstring).

    Attributes:
        positions, slots: per new token (T = sum of new tokens, padding rows included).
        seq_lens: per sequence (0 for a padding row).
        query_start_loc: B + 1 cumulative new-token counts.
        table: per sequence, its page ids padded to ``max_pages`` with a valid id.
        max_query_len: the largest new-token count.
    """

    positions: list[int]
    slots: list[int]
    seq_lens: list[int]
    query_start_loc: list[int]
    table: list[list[int]]
    max_query_len: int


def plan_step(seqs: Sequence[tuple[Sequence[int], int, int] | None], page_size: int,
              num_pad: int = 1, max_pages: int | None = None,
              with_table: bool = True) -> StepPlan:
    """Plan one step from host-side state.

    Args:
        seqs: per sequence ``(pages, num_cached, num_new)``: its page ids (enough for
            ``num_cached + num_new`` positions), the positions cached before the step, and the
            step's new tokens (>= 1); or None for a padding row of ``num_pad`` tokens.
        page_size: positions per page.
        num_pad: the new tokens of a padding row (the step's uniform ``n`` in a graph bucket).
        max_pages: width of the page-table rows (default: the longest ``pages``, at least 1).
        with_table: False leaves ``table`` empty (the graph runner keeps its page table on the
            device and copies only new pages).

    Raises:
        ValueError: if a sequence has too few pages for its new length or no new token.
    """
    width = max_pages or max([1] + [len(s[0]) for s in seqs if s is not None])
    plan = StepPlan([], [], [], [0], [], 0)
    for seq in seqs:
        if seq is None:
            plan.positions.extend([0] * num_pad)
            plan.slots.extend([PAD_SLOT] * num_pad)
            plan.seq_lens.append(0)
            plan.query_start_loc.append(plan.query_start_loc[-1] + num_pad)
            if with_table:
                plan.table.append([0] * width)
            plan.max_query_len = max(plan.max_query_len, num_pad)
            continue
        pages, cached, new = seq
        if new < 1:
            raise ValueError("every sequence in a step needs at least one new token")
        total = cached + new
        if len(pages) * page_size < total:
            raise ValueError(f"{len(pages)} pages hold {len(pages) * page_size} positions, "
                             f"need {total}")
        for p in range(cached, total):
            plan.positions.append(p)
            plan.slots.append(slot(pages, p, page_size))
        plan.seq_lens.append(total)
        plan.query_start_loc.append(plan.query_start_loc[-1] + new)
        if with_table:
            plan.table.append(list(pages) + [pages[0] if pages else 0] * (width - len(pages)))
        plan.max_query_len = max(plan.max_query_len, new)
    return plan


def plan_slabs(rows: Sequence[tuple[Sequence[int], int] | None], bucket: int,
               slab_tokens: int, block_n: int) -> list[int]:
    """``AttnMeta.slab_rows`` of a one-token-per-row step (the graph runner's).

    Args:
        rows: per row, ``(pages, position)`` (the pages list identifies the sequence) or None
            (padding); rows past ``len(rows)`` up to ``bucket`` are padding.
        bucket: the step's rows.
        slab_tokens: the most rows one slab holds (the backend's ``slab_tokens``).
        block_n: the decode tiles' key block (``slab_block_n``).

    Returns:
        Per row: the rows of the slab it starts (itself and the rows right after it that hold
        the same pages list at the next positions, at most ``slab_tokens``, all inside one
        ``block_n`` block of positions, so that each row's attention is its one-row result), 0
        for a row an earlier slab covers, 1 for every other row (padding too).
    """
    out = [1] * bucket
    lead = 0  # the row the current slab starts at
    for r in range(1, len(rows)):
        prev, cur, first = rows[r - 1], rows[r], rows[lead]
        if prev is not None and cur is not None and cur[0] is prev[0] and \
                cur[1] == prev[1] + 1 and r - lead < slab_tokens and \
                cur[1] // block_n == first[1] // block_n:
            out[lead] += 1
            out[r] = 0
        else:
            lead = r
    return out


def host_tensor(values: Sequence[int], dtype: torch.dtype, pin: bool) -> torch.Tensor:
    """``values`` as a ``dtype`` tensor on the host, in pinned memory with ``pin`` (a CUDA
    target): a copy from it with ``non_blocking=True`` goes in stream order, where a copy from
    pageable memory first waits for every kernel enqueued before it. The pinned block is not
    reused before such a copy has read it (torch's caching host allocator records the copy's
    stream)."""
    t = torch.tensor(values, dtype=dtype)
    return t.pin_memory() if pin else t


def to_device(values: Sequence[int], dtype: torch.dtype, device: torch.device | str
              ) -> torch.Tensor:
    """``values`` as a ``dtype`` tensor on ``device``, copied without making the host wait
    (``host_tensor``): a prefill chunk can be enqueued while the one before still runs."""
    cuda = torch.device(device).type == "cuda"
    return host_tensor(values, dtype, cuda).to(device, non_blocking=cuda)


def build_meta(
    seqs: list[tuple[list[int], int, int]], page_size: int, device: torch.device | str
) -> AttnMeta:
    """``plan_step`` as device tensors: the ``AttnMeta`` of one step (prefill chunks, tests).

    Args:
        seqs, page_size: as ``plan_step`` (no padding rows).
        device: where the metadata tensors go.

    Raises:
        ValueError: as ``plan_step``.
    """
    plan = plan_step(seqs, page_size)
    return AttnMeta(
        positions=to_device(plan.positions, torch.int64, device),
        slot_mapping=to_device(plan.slots, torch.int64, device),
        seq_lens=to_device(plan.seq_lens, torch.int32, device),
        query_start_loc=to_device(plan.query_start_loc, torch.int32, device),
        page_table=to_device(plan.table, torch.int32, device),
        max_query_len=plan.max_query_len,
        max_seq_len=max(plan.seq_lens),
    )
