"""The host side of the decode runner's step: a step's rows into the static buffers, and the sampled
tokens back (``GraphRunner.io``).

``StepIO.stage`` turns one step's rows into the per-row inputs of ``StaticBuffers.step``
(``infer/step_buffers.py``: positions, slots, seq_lens, slab rows, fed ids, drafts, noise keys),
written into the pinned ``host_step`` and copied to the device in one non-blocking transfer;
pages appended to a row's sequence go to the device page table as they come
(``PageTableRows``). NOTE: the pinned buffer is rewritten only once the previous copy has read it
(an event, on CUDA).

A row without a live sequence (a bucket's padding, or a reply that ended while others go on) is
a padding row: seq_len 0 and slot -1 (``infer/meta.py``), so it stores nothing and attends to
nothing. Consecutive rows of one sequence at consecutive positions inside one key block of the
decode tiles (a verify step's) form a slab that the decode kernel attends in one program
(``AttnMeta.slab_rows``, ``meta.plan_slabs``): its keys are read once, and each row's result is
still that of a one-row step, bit for bit.

``tokens_to_host`` starts copying a step's sampled tokens into the pinned ``host_tokens`` in
stream order; ``host_tokens`` waits for that copy: the only host sync per step.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from infer.meta import plan_slabs, plan_step
from infer.step_buffers import PageTableRows, StaticBuffers

Row = tuple[list[int], int] | None  # (page ids, position of the fed token), None = padding


class StepIO:
    """Stages steps into ``bufs`` and reads their sampled tokens back.

    Args:
        bufs: the runner's static buffers.
        page_size: positions per KV page.
        slab_tokens: the most rows one slab holds (the attention backend's ``slab_tokens``; 1: no
            slabs).
        slab_block: the decode tiles' key block (the backend's ``slab_block_n``).

    Attributes:
        rows: the device page table, row by row (``PageTableRows``).
    """

    def __init__(self, bufs: StaticBuffers, page_size: int, slab_tokens: int = 1,
                 slab_block: int = 1):
        self.bufs, self.page_size = bufs, page_size
        self.rows = PageTableRows(bufs.page_table)
        self._slab_tokens, self._slab_block = slab_tokens, slab_block
        self._host = bufs.host_step.numpy()  # fast writes into the pinned buffer
        cuda = bufs.step.is_cuda
        self._copied = torch.cuda.Event() if cuda else None
        self._tokens_copied = torch.cuda.Event() if cuda else None

    def stage(self, bucket: int, tokens: torch.Tensor | Sequence[int], rows: Sequence[Row],
              drafts: Sequence[int] | None = None, keys: Sequence[int] | None = None) -> None:
        """Write one step's inputs for ``bucket`` rows (``GraphRunner.step``'s arguments):
        ``bufs.step`` (one copy from ``host_step``), ``bufs.input_ids`` and the page-table rows.

        Args:
            bucket: the step's rows (rows past ``len(rows)`` are padding).
            tokens: an int64 device tensor (rows past it keep their input), or host ints.
            rows: per row, ``(pages, position)`` or None (padding).
            drafts: a sampled verify step's drafts, one per row (-1: none); None otherwise.
            keys: the rows' noise keys (int64 values, ``bucket`` of them) for a keyed draw;
                None otherwise.
        """
        b = self.bufs
        seqs = []
        for row, r in enumerate(rows):
            if r is None:
                seqs.append(None)
                continue
            pages, position = r
            self.rows.load(row, pages)
            seqs.append((pages, position, 1))
        seqs.extend([None] * (bucket - len(seqs)))
        plan = plan_step(seqs, self.page_size, with_table=False)
        if self._copied is not None:
            self._copied.synchronize()  # NOTE: the previous copy has read the pinned buffer
        self._host[0, :bucket] = plan.positions
        self._host[1, :bucket] = plan.slots
        self._host[2, :bucket] = plan.seq_lens
        self._host[3, :bucket] = plan_slabs(rows, bucket, self._slab_tokens, self._slab_block)
        host_ids = not isinstance(tokens, torch.Tensor)
        if host_ids:
            self._host[4, :bucket] = 0
            self._host[4, :len(tokens)] = tokens
        if drafts is not None:
            self._host[5, :bucket] = -1
            self._host[5, :len(drafts)] = drafts
        if keys is not None:
            self._host[6, :bucket] = keys
        b.step.copy_(b.host_step, non_blocking=True)
        if self._copied is not None:
            self._copied.record()
        if host_ids:
            b.input_ids[:bucket].copy_(b.step[4, :bucket])
        else:
            b.input_ids[:tokens.numel()].copy_(tokens.view(-1))

    def tokens_to_host(self, tokens: torch.Tensor) -> None:
        """Start copying ``tokens`` (device int64 [n], or [2, n] from a sampled verify step) to
        the host, in stream order: the copy reads them before any step enqueued later
        overwrites them."""
        dst = self.bufs.host_tokens
        if tokens.dim() == 2:
            dst[:, :tokens.shape[1]].copy_(tokens, non_blocking=True)
        else:
            dst[0, :tokens.numel()].copy_(tokens.view(-1), non_blocking=True)
        if self._tokens_copied is not None:
            self._tokens_copied.record()

    def host_tokens(self, n: int, flags: bool = False) -> list[int] | list[list[int]]:
        """The first ``n`` tokens of the latest ``tokens_to_host`` once copied (the host waits
        for the copy; steps enqueued after it keep running); with ``flags``, ``[tokens,
        acceptance flags]`` of a sampled verify step."""
        if self._tokens_copied is not None:
            self._tokens_copied.synchronize()
        if flags:
            return self.bufs.host_tokens[:, :n].tolist()
        return self.bufs.host_tokens[0, :n].tolist()
