"""The host side of keyed top-k draws: whether a decode runner's step draws its noise from per-row
keys (``uses_keys``), and the keys themselves (``row_keys``), which the runner writes with each
step's inputs (``infer/graphs.py``); ``kernels/topk_sample.py`` draws the noise from them with
Triton's counter-based Philox (``kernels/keyed_noise.py``), so a captured sampling step needs no
torch generator. Per-request seeded noise in the sampling kernel, as vLLM's sampler does.
"""

from __future__ import annotations

import torch

import infer.sampling as sampling
from infer.config import MAX_BATCH
from infer.sampling_params import SamplingParams

# Whether the decode runner's fused top-k draws take their noise from per-row keys that the host
# writes with each step (``row_keys``; the kernel draws it with Triton's Philox) instead of a
# torch generator: a captured sampling step then registers no generator, whose registration
# slows every graph replayed after the capture by ~40 us a step on an H100, and its replays lose
# the noise launch and torch's two seed/offset fills (BENCHMARKS.md: a sampled 0.6B step at 4k
# +4 %). False: every draw uses the runner's generator (``benchmarks/graph_order.py`` without
# ``--keyed-noise``). NOTE: read when a runner captures a step and begins a batch: set it before
# making an engine.
KEYED_NOISE = True
_M64 = (1 << 64) - 1


def uses_keys(params: SamplingParams, vocab_size: int, device: torch.device | str) -> bool:
    """Whether a runner's step with ``params`` draws from ``row_keys`` (``KEYED_NOISE``): a
    draw that takes ``kernels.topk_sample`` (``infer.sampling.fused_topk_takes``: top-k
    1..``MAX_TOP_K`` below the vocabulary, no presence penalty, CUDA). The runner passes the
    presence mask exactly when ``params`` has a penalty."""
    return KEYED_NOISE and sampling.fused_topk_takes(
        params, vocab_size, torch.device(device).type == "cuda", bool(params.presence_penalty))


def row_keys(seed: int, step: int, rows: int) -> list[int]:
    """The keys of one step's ``rows`` rows (int64 values) for a reply seeded with ``seed``
    (``resolve_seed``'s), at the reply's ``step``-th step (0, 1, ...): SplitMix64 (Steele et
    al. 2014) of ``seed``, plus ``step * MAX_BATCH + row``, mixed again (a bijection), so that
    every (step, row) of a seed names its own Philox stream.

    Raises:
        ValueError: ``rows`` outside 0..``MAX_BATCH`` (16), or a negative ``step``.
    """
    if not 0 <= rows <= MAX_BATCH or step < 0:
        raise ValueError(f"row_keys: rows must be in 0..{MAX_BATCH} and step >= 0, got {rows} "
                         f"rows at step {step}")
    base = _splitmix64(seed & _M64)
    keys = [_splitmix64((base + step * MAX_BATCH + r) & _M64) for r in range(rows)]
    return [k - (1 << 64) if k >> 63 else k for k in keys]


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)
