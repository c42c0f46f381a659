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

Design after FlashInfer's plan()/run() split and vLLM's attention metadata: the host plans, the
kernels read only tensors (no Python objects).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


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
    """

    positions: torch.Tensor
    slot_mapping: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: torch.Tensor
    page_table: torch.Tensor
    max_query_len: int
    max_seq_len: int

    @property
    def num_seqs(self) -> int:
        return self.seq_lens.shape[0]

    @property
    def num_tokens(self) -> int:
        return self.positions.shape[0]


def build_meta(
    seqs: list[tuple[list[int], int, int]], page_size: int, device: torch.device | str
) -> AttnMeta:
    """Plan one step from host-side state.

    Args:
        seqs: per sequence ``(pages, num_cached, num_new)``: the sequence's page ids (enough pages
            for ``num_cached + num_new`` positions), the positions cached before the step, and the
            new tokens of this step (>= 1).
        page_size: positions per page.
        device: where the metadata tensors go.

    Returns:
        The step's ``AttnMeta``.

    Raises:
        ValueError: if a sequence has too few pages for its new length or no new token.
    """
    positions: list[int] = []
    slots: list[int] = []
    seq_lens: list[int] = []
    qsl = [0]
    max_pages = max(1, max(len(p) for p, _, _ in seqs))
    table = []
    for pages, cached, new in seqs:
        if new < 1:
            raise ValueError("every sequence in a step needs at least one new token")
        total = cached + new
        if len(pages) * page_size < total:
            raise ValueError(f"{len(pages)} pages hold {len(pages) * page_size} positions, "
                             f"need {total}")
        for p in range(cached, total):
            positions.append(p)
            slots.append(pages[p // page_size] * page_size + p % page_size)
        seq_lens.append(total)
        qsl.append(qsl[-1] + new)
        table.append(list(pages) + [pages[0] if pages else 0] * (max_pages - len(pages)))
    return AttnMeta(
        positions=torch.tensor(positions, dtype=torch.int64, device=device),
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        query_start_loc=torch.tensor(qsl, dtype=torch.int32, device=device),
        page_table=torch.tensor(table, dtype=torch.int32, device=device),
        max_query_len=max(n for _, _, n in seqs),
        max_seq_len=max(seq_lens),
    )
