"""Planning for split-KV decode: the float32 workspace, the tile defaults and the split count.

Kept apart from the kernel (``kernels/decode_attention.py``) because the engine sizes and owns the
workspace once at start-up (CUDA graphs need it preallocated) and picks the split count before
any step runs: neither may depend on the context length.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch


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
        mb, h, ms, mr, d = self.o_part.shape
        if batch > mb or kv_heads != h or num_splits > ms or rows > mr or head_dim != d:
            raise ValueError(
                f"decode workspace {tuple(self.o_part.shape)} cannot hold batch {batch}, "
                f"{kv_heads} KV heads, {num_splits} splits, {rows} rows, head_dim {head_dim}: "
                "allocate it with DecodeWorkspace.allocate for the largest step")
        return (self.o_part[:batch, :, :num_splits, :rows],
                self.lse[:batch, :, :num_splits, :rows])


# Default tiles per KV-cache kind on a GPU, set from benchmarks/sweep_decode.py on an H200
# (Qwen3-8B shape, batch 1; see BENCHMARKS.md): bf16 block 128 x 33 splits was fastest at 32k and
# 128k (commit 4618394). programs_per_sm sets the default split count; it must not depend on the
# context length (the grid is fixed when a CUDA graph is captured). int8_magic: see
# kernels/decode_attention.py. pdl (programmatic dependent launch of stage 1 and the combine, used
# on sm_90+ only: ``supports_pdl``) cut the combine's in-graph cost from 3.3 to 1.0-1.2 us per
# layer (BF16, commits c0c0453 and 74e1889). INT8 tile: one warp per program (no cross-warp row
# max and sum, fewer barriers; commit 71b4200); since the V pages are transposed (dc6fc3c), 64-key
# blocks and 8 programs per SM (132 splits for 8 KV heads on 132 SMs, one wave at 254 registers):
# 24.2 / 71.4 us per layer at 32k / 128k against 28.0 / 78.5 with 32-key blocks and 198 splits
# (sweep at 94ef4f0, BENCHMARKS.md). lazy_rescale (FlashAttention-4's conditional rescaling) was
# faster for both caches at every length in the same sweep (BF16 32k: 36.5 against 37.4 us). INT8
# steps with more than 16 tile rows (n * group > 16) use 4 warps and 64-key blocks (one warp would
# hold a 64 x 128 float32 accumulator; not timed).
TILE_DEFAULTS = {
    "16bit": dict(block_n=128, num_warps=4, num_stages=2, programs_per_sm=2, int8_magic=0,
                  pdl=True, lazy_rescale=True),
    "int8": dict(block_n=64, num_warps=1, num_stages=2, programs_per_sm=8, int8_magic=2,
                 pdl=True, lazy_rescale=True),
}
_MAX_SPLITS = 512


def tile_defaults(kv_dtype: torch.dtype | None) -> dict:
    """The ``TILE_DEFAULTS`` entry for a cache of ``kv_dtype`` (None: the 16-bit entry)."""
    return TILE_DEFAULTS["int8" if kv_dtype == torch.int8 else "16bit"]


@functools.lru_cache(maxsize=8)
def _capability(device_index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device_index)


def supports_pdl(device: torch.device | str) -> bool:
    """Whether kernels on ``device`` may use programmatic dependent launch (``griddepcontrol``
    exists from sm_90, Hopper, on; older GPUs and the CPU interpreter: False)."""
    device = torch.device(device)
    if device.type != "cuda":
        return False
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _capability(index)[0] >= 9


@functools.lru_cache(maxsize=8)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def default_num_splits(batch: int, kv_heads: int, device: torch.device | str,
                       kv_dtype: torch.dtype | None = None) -> int:
    """Splits per (sequence, KV head): ``programs_per_sm`` of ``TILE_DEFAULTS`` (1..512).

    ``kv_dtype`` is the cache dtype (int8 or the model dtype); None takes the 16-bit entry. On a
    CPU (the interpreter) it returns 2: enough to exercise the combine.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return 2
    sms = _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    per_sm = tile_defaults(kv_dtype)["programs_per_sm"]
    return max(1, min(_MAX_SPLITS, math.ceil(per_sm * sms / max(1, batch * kv_heads))))
