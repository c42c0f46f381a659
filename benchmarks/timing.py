"""Timing helpers shared by the benchmark scripts (GPU only).

``bench_eager`` times a Python callable as launched (host launch overhead included when it exceeds
the GPU time); ``bench_graph`` captures the callable once in a CUDA graph and times its replays,
which is how the engine's decode step runs, so it measures the GPU time of the kernels alone.
Both are ``triton.testing.do_bench`` medians (warm-up first, L2 flushed before each run).
"""

from __future__ import annotations

import torch
from triton.testing import do_bench


def bench_eager(fn, rep_ms: int = 200) -> float:
    """Median milliseconds per call of ``fn``."""
    return do_bench(fn, warmup=25, rep=rep_ms, return_mode="median")


def bench_graph(fn, rep_ms: int = 200) -> float:
    """Median milliseconds per replay of ``fn`` captured in a CUDA graph.

    ``fn`` must be capturable: no allocation it depends on across calls, no host sync.
    """
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # warm-up: compile, autotune caches, allocator
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return do_bench(graph.replay, warmup=25, rep=rep_ms, return_mode="median")
