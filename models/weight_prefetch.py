"""Which weights a decode step prefetches into L2, and when (``kernels/l2_prefetch.py``).

A decode step's chain of kernels (``models/qwen3_fused.py``) leaves the DRAM idle between the
projections: after a layer's qkv GEMV come q/k-norm + RoPE, the KV store and split-KV attention,
which at short contexts read a few MB in ~13 us (Qwen3-8B, 4k positions), then ``o_proj``. When
``ENABLED``, right after each layer's qkv GEMV the step forks a side stream that waits for that
GEMV and prefetches the weights that come next, in the order they are read (``layer_ranges``):
``o_proj``, gate/up (the gate and up halves alike, as each GEMV program reads both), ``down_proj``,
then the next layer's qkv (the last layer: the lm_head), up to ``budget_bytes()``. The main stream
goes on meanwhile; at the end of the step it waits for the side stream (a CUDA graph must
join its forks), by which time the prefetch kernels have long ended.

Results are bit for bit the same with or without it: the prefetch writes nothing. Only decode
steps (1 to 16 rows, the GEMV path) on sm_90+ prefetch.
"""

from __future__ import annotations

import functools
import math
import os

import torch

from kernels.device import supports_pdl
from kernels.l2_prefetch import l2_prefetch

# Off: measured slower than no prefetch at 32 MB (BENCHMARKS.md, "an L2 weight prefetch beside
# the decode chain"; the A/B: ``benchmarks/decode_e2e.py --variants default,default+l2_prefetch``).
ENABLED = False


@functools.cache
def budget_bytes() -> int:
    """Bytes prefetched after each layer's qkv GEMV: ``INFER_L2_PREFETCH_MB`` megabytes (10^6;
    default 32; the L2 of an H100/H200 is 50 MB), read when the first prefetcher is made (only
    with ``ENABLED``) and kept: not read again on each decode step.

    Raises:
        ValueError: the variable is not a finite number >= 0 (one line, naming it).
    """
    raw = os.environ.get("INFER_L2_PREFETCH_MB", "").strip() or "32"
    try:
        mb = float(raw)
    except ValueError:
        mb = math.nan
    if not (math.isfinite(mb) and mb >= 0):
        raise ValueError(f"INFER_L2_PREFETCH_MB must be a number of megabytes >= 0, got {raw!r}")
    return int(mb * 1e6)

Range = tuple[torch.Tensor, int, int]  # (tensor, first byte, bytes)


def _take(t: torch.Tensor, budget: int) -> tuple[list[Range], int]:
    n = min(t.nbytes, budget)
    return ([(t, 0, n)] if n > 0 else []), budget - n


def layer_ranges(model, layer_idx: int, budget_bytes: int) -> list[Range]:
    """The byte ranges to prefetch after layer ``layer_idx``'s qkv GEMV, at most
    ``budget_bytes`` in all: ``o_proj``, gate/up (``[I, H]`` rows of gate and of up, each
    program of the SwiGLU GEMV reads both, so each half gets the same leading share), ``down``,
    the next layer's ``qkv_proj`` (after the last layer: the lm_head). A range is
    ``(weight, first byte, bytes)``; the last one taken may be partial."""
    layers = model.model.layers
    layer = layers[layer_idx]
    out: list[Range] = []
    budget = budget_bytes
    got, budget = _take(layer.self_attn.o_proj.weight, budget)
    out += got
    gate_up = layer.mlp.gate_up_proj.weight
    half = gate_up.nbytes // 2
    each = min(half, budget // 2)
    if each > 0:
        out += [(gate_up, 0, each), (gate_up, half, each)]
        budget -= 2 * each
    nxt = (layers[layer_idx + 1].self_attn.qkv_proj.weight if layer_idx + 1 < len(layers)
           else model.lm_head.weight)
    for t in (layer.mlp.down_proj.weight, nxt):
        got, budget = _take(t, budget)
        out += got
    return out


class WeightPrefetcher:
    """The side stream of one decode step's prefetches (module notes). ``after_qkv(i)`` forks
    from the current stream after layer ``i``'s qkv GEMV was enqueued; ``join()`` makes the
    current stream wait for every prefetch of the step."""

    _streams: dict[int, torch.cuda.Stream] = {}

    def __init__(self, model, device: torch.device, budget_bytes: int):
        self.model, self.budget = model, budget_bytes
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index not in self._streams:
            self._streams[index] = torch.cuda.Stream(device=index)
        self.side = self._streams[index]
        self.forked = False

    def after_qkv(self, layer_idx: int) -> None:
        main = torch.cuda.current_stream()
        self.side.wait_stream(main)
        with torch.cuda.stream(self.side):
            for t, start, n in layer_ranges(self.model, layer_idx, self.budget):
                l2_prefetch(t, start, n)
        self.forked = True

    def join(self) -> None:
        if self.forked:
            torch.cuda.current_stream().wait_stream(self.side)
            self.forked = False


def prefetcher_for(model, x: torch.Tensor) -> WeightPrefetcher | None:
    """A ``WeightPrefetcher`` for a decode step (the caller decides which steps are; the GEMV
    path's 1 to 16 rows) whose embeddings are ``x`` [T, hidden] when it should prefetch
    (``ENABLED``, on CUDA, sm_90+); else None."""
    if not (ENABLED and x.is_cuda and supports_pdl(x.device)):
        return None
    budget = budget_bytes()
    return WeightPrefetcher(model, x.device, budget) if budget > 0 else None
