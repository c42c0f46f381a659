"""Planning for split-KV decode: the float32 workspace and the split count.

Kept apart from the kernel (``kernels/decode_split.py``) because the engine sizes and owns the
workspace once at start-up (CUDA graphs need it preallocated) and picks the split count before
any step runs: neither may depend on the context length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kernels.device import sm_count
from kernels.tiles import decode_tiles


@dataclass
class DecodeWorkspace:
    """Preallocated float32 scratch for split-KV decode, reused across steps and layers.

    Attributes:
        o_part: float32 [max_batch, kv_heads, max_splits, max_rows, head_dim].
        lse: float32 [max_batch, kv_heads, max_splits, max_rows].

    A call with ``B <= max_batch``, ``num_splits <= max_splits`` and ``n * group <= max_rows``
    uses the slice ``[:B, :, :num_splits, :n * group]`` (a view: no allocation, so a CUDA graph
    can capture it). For an engine: ``max_rows = 16 * group`` covers every step of 1..16 tokens
    and ``max_splits = default_num_splits(1, kv_heads, device, kv_dtype)`` the largest default
    split count (it shrinks as the batch grows).
    """

    o_part: torch.Tensor
    lse: torch.Tensor

    @classmethod
    def allocate(cls, max_batch: int, kv_heads: int, max_rows: int, max_splits: int,
                 head_dim: int, device: torch.device | str) -> DecodeWorkspace:
        """Scratch for up to ``max_batch`` sequences x ``max_rows`` (= n * group) tile rows."""
        shape = (max_batch, kv_heads, max_splits, max_rows)
        return cls(torch.empty(*shape, head_dim, dtype=torch.float32, device=device),
                   torch.empty(shape, dtype=torch.float32, device=device))

    def views(self, batch: int, kv_heads: int, num_splits: int, rows: int,
              head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``[batch, kv_heads, num_splits, rows(, head_dim)]`` scratch of one call.

        A call within ``max_batch`` and ``max_rows`` gets the slice of the allocated shape; one
        with more sequences of fewer rows each (a speculative verify step runs each query as a
        one-row sequence: 16 x ``group`` rows where a step was sized for one sequence of
        ``16 * group``) gets a contiguous view of the same storage, as long as its elements fit.

        Raises:
            ValueError: the call's scratch does not fit.
        """
        mb, h, ms, mr, d = self.o_part.shape
        if kv_heads == h and num_splits <= ms and head_dim == d:
            if batch <= mb and rows <= mr:
                return (self.o_part[:batch, :, :num_splits, :rows],
                        self.lse[:batch, :, :num_splits, :rows])
            if batch * rows <= mb * mr:
                shape = (batch, kv_heads, num_splits, rows)
                n = batch * kv_heads * num_splits * rows
                return (self.o_part.view(-1)[:n * d].view(*shape, d),
                        self.lse.view(-1)[:n].view(shape))
        raise ValueError(
            f"decode workspace {tuple(self.o_part.shape)} cannot hold batch {batch}, "
            f"{kv_heads} KV heads, {num_splits} splits, {rows} rows, head_dim {head_dim}: "
            "allocate it with DecodeWorkspace.allocate for the largest step")


_MAX_SPLITS = 512


def default_num_splits(batch: int, kv_heads: int, device: torch.device | str,
                       kv_dtype: torch.dtype | None = None) -> int:
    """Splits per (sequence, KV head): ``programs_per_sm`` of the default ``DecodeTiles``
    (``kernels.tiles.decode_tiles``) times the SM count over ``batch * kv_heads``, in 1..512.

    ``kv_dtype`` is the cache dtype (int8 or the model dtype); None takes the 16-bit default. On a
    CPU (the interpreter) it returns 2: enough to exercise the combine. Never a function of the
    context length: the grid is fixed when a CUDA graph is captured.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return 2
    per_sm = decode_tiles(device, kv_dtype).programs_per_sm
    return max(1, min(_MAX_SPLITS, math.ceil(per_sm * sm_count(device) / max(1, batch * kv_heads))))
