"""The decode runner's static buffers, its batch buckets and the key of a captured step.

``StaticBuffers`` are the device tensors whose addresses a captured decode step bakes in, and the
pinned host staging buffers that feed them; a graph of bucket ``b`` uses their first ``b`` rows (a
row is one sequence of a batch step, or one query of a speculative verify step). Sized once for
the runner's ``max_rows`` rows (Bmax)::

    host (pinned)            device (addresses baked into the graphs)
    host_step [7, Bmax] ---> step [7, Bmax] int64: positions | slots | seq_lens | slab rows |
                                                    fed ids (host tokens) | drafts (sampled
                                                    verify) | noise keys (keyed draws), per row
                             lens [2, Bmax] int32    (seq_lens | slab rows, from step[2:4])
    tokens fed -----------> input_ids [Bmax] int64  (a device tensor, or step[4])
                             page_table [Bmax, max_pages] int32 (new pages copied as they come)
                             presence [Bmax, vocab] bool (tokens generated in each reply)
                             next_token [Bmax] int64 ---> host_tokens [2, Bmax] (pinned)
                             verify_out [2, Bmax] int64 (tokens | accepted: sampled verify)

``PageTableRows`` copies into ``page_table`` only what changed; ``StaticBuffers.pad_all`` makes
every row padding (what a capture runs on). ``batch_buckets`` lists the batch sizes a runner
captures; ``graph_key`` is the part of the sampling parameters a captured step depends on (its
key in ``infer/graph_capture.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infer.meta import AttnMeta, host_tensor
from infer.sampling_params import SamplingParams


def batch_buckets(max_batch: int) -> tuple[int, ...]:
    """The batch sizes a runner captures: powers of two below ``max_batch``, then ``max_batch``."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return (*out, max_batch)


def graph_key(params: SamplingParams, verify: bool = False) -> tuple[SamplingParams, bool]:
    """The part of ``params`` a captured step depends on (seed, token budget and ``ignore_eos``,
    which the host applies, dropped; greedy steps ignore temperature, top-k, top-p and min-p), and
    whether the step samples by the speculative acceptance rule (``verify``: sampled steps only;
    a greedy verify step is a plain step whose argmaxes the host compares with the drafts)."""
    if params.greedy:
        return SamplingParams(temperature=0.0, presence_penalty=params.presence_penalty), False
    return SamplingParams(temperature=params.temperature, top_k=params.top_k,
                          top_p=params.top_p, min_p=params.min_p,
                          presence_penalty=params.presence_penalty), verify


@dataclass
class StaticBuffers:
    """Device tensors a captured step reads and writes (the module docstring draws them).

    Attributes:
        input_ids: int64 [Bmax], the token fed to each row.
        step: int64 [7, Bmax], per row: position, slot, seq_len, slab rows, fed token (when the
            host gives it: a verify step), draft to check (sampled verify steps; -1 none), the
            draw's noise key (``infer.noise_keys.row_keys``: keyed top-k draws); one copy from
            ``host_step``.
        lens: int32 [2, Bmax], written inside the step from ``step[2:4]`` (one copy):
            ``seq_lens`` (row 0) and ``slab_rows`` (row 1: ``AttnMeta.slab_rows``).
        query_start_loc: int32 [Bmax + 1], always ``0, 1, ..., Bmax`` (one token per row).
        page_table: int32 [Bmax, max_pages], each row's page ids (entries past its length are
            stale but valid ids, never read).
        presence: bool [Bmax, vocab], tokens generated so far in each row's reply.
        next_token: int64 [Bmax], the sampled tokens.
        verify_out: int64 [2, Bmax], a sampled verify step's tokens and acceptance flags
            (``infer.sampling.verify_sample``).
        host_step: int64 [7, Bmax] on the host (pinned on CUDA), staging for ``step``.
        host_tokens: int64 [2, Bmax] on the host (pinned on CUDA), where
            ``StepIO.tokens_to_host`` copies (one row, or both of ``verify_out``).
    """

    input_ids: torch.Tensor
    step: torch.Tensor
    lens: torch.Tensor
    query_start_loc: torch.Tensor
    page_table: torch.Tensor
    presence: torch.Tensor
    next_token: torch.Tensor
    verify_out: torch.Tensor
    host_step: torch.Tensor
    host_tokens: torch.Tensor

    @classmethod
    def allocate(cls, max_batch: int, vocab_size: int, max_pages: int,
                 device: torch.device) -> StaticBuffers:
        i64 = dict(dtype=torch.int64, device=device)
        i32 = dict(dtype=torch.int32, device=device)
        pin = device.type == "cuda"
        return cls(
            input_ids=torch.zeros(max_batch, **i64), step=torch.zeros(7, max_batch, **i64),
            lens=torch.zeros(2, max_batch, **i32),
            query_start_loc=torch.arange(max_batch + 1, **i32),
            page_table=torch.zeros(max_batch, max_pages, **i32),
            presence=torch.zeros(max_batch, vocab_size, dtype=torch.bool, device=device),
            next_token=torch.zeros(max_batch, **i64),
            verify_out=torch.zeros(2, max_batch, **i64),
            host_step=torch.zeros(7, max_batch, dtype=torch.int64, pin_memory=pin),
            host_tokens=torch.zeros(2, max_batch, dtype=torch.int64, pin_memory=pin))

    def meta(self, bucket: int, page_size: int) -> AttnMeta:
        """The ``AttnMeta`` of a ``bucket``-row step over these buffers (views of the first rows;
        ``max_seq_len`` is the capacity bound, which the decode kernels never read)."""
        return AttnMeta(positions=self.step[0, :bucket], slot_mapping=self.step[1, :bucket],
                        seq_lens=self.seq_lens[:bucket],
                        query_start_loc=self.query_start_loc[:bucket + 1],
                        page_table=self.page_table[:bucket], max_query_len=1,
                        max_seq_len=self.page_table.shape[1] * page_size,
                        slab_rows=self.lens[1, :bucket])

    @property
    def seq_lens(self) -> torch.Tensor:
        """int32 [Bmax], the rows' seq_lens (``lens[0]``)."""
        return self.lens[0]

    def pad_all(self) -> None:
        """Make every row a padding row on the device (position 0, slot -1, seq_len 0, one slab
        row, no draft, fed id 0: no cache read or write), the inputs a capture runs on."""
        self.step[0].zero_()
        self.step[1].fill_(-1)
        self.step[2].zero_()
        self.step[3].fill_(1)
        self.step[5].fill_(-1)
        self.input_ids.zero_()


class PageTableRows:
    """The runner's device page table, row by row: which sequence's pages each row holds and how
    many of them are copied, so that a step copies only what changed.

    A row holds one sequence of a batch, or one query row of a verify step (several rows then
    hold the same sequence). A sequence is known by its pages list (``id``), which may only grow
    during a batch: a row keeps copying the pages appended since its last load, and a row that
    takes another sequence is reloaded whole.

    Args:
        table: int32 [rows, max_pages] device tensor (``StaticBuffers.page_table``).
    """

    def __init__(self, table: torch.Tensor):
        self.table = table
        self._owner: list[int | None] = [None] * table.shape[0]
        self._loaded = [0] * table.shape[0]

    def reset(self, pages: list[list[int]], bucket: int) -> None:
        """Load sequence ``i``'s pages into row ``i``; zero the rest of the first ``bucket``."""
        self.table[:bucket].zero_()
        self._owner = [None] * len(self._owner)
        self._loaded = [0] * len(self._loaded)
        for row, p in enumerate(pages):
            self.load(row, p)

    def load(self, row: int, pages: list[int]) -> None:
        """Make row ``row`` hold ``pages`` (host ints): copy the pages appended since it was
        loaded, or the whole list when the row held another sequence (from pinned memory, in
        stream order: the host does not wait for the steps already enqueued)."""
        if self._owner[row] != id(pages):
            src = host_tensor(pages, torch.int32, self.table.is_cuda)
            self.table[row, :len(pages)].copy_(src, non_blocking=True)
            self._owner[row], self._loaded[row] = id(pages), len(pages)
            return
        for i in range(self._loaded[row], len(pages)):  # a new page: at most one per step
            self.table[row, i].fill_(pages[i])
        self._loaded[row] = max(self._loaded[row], len(pages))
