"""Timing helpers shared by the benchmark scripts (GPU only).

Every figure is the median over repetitions of one call timed with CUDA events, each repetition
preceded by a cold-L2 step that READS a 512 MiB buffer. (``triton.testing.do_bench`` flushes L2
by WRITING zeros: the 60 MB of dirty lines it leaves are written back to HBM while the timed
kernel runs, which on an H200 adds ~8-15 us to every timing. In a decode step the previous
kernels mostly read weights, so a read flush is the faithful cold start.)

``bench_eager`` times a Python callable as launched (host launch overhead included when it
exceeds the GPU time); ``bench_graph`` captures the callable once in a CUDA graph and times its
replays, which is how the engine's decode step runs: it measures the GPU time of the kernels (plus
one graph launch). ``bench_graph_many`` captures several callables, in order, in ONE graph and
times its replays (one flush before each replay, not before each callable), e.g. the same kernel
for every layer of a decode step: divided by the number of callables, that is the per-call time
with the graph launch amortized and the gaps between kernels inside the graph included.
"""

from __future__ import annotations

import statistics

import torch

from infer.bandwidth import measure_read_bandwidth

_FLUSH: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}


def _flush_l2() -> None:
    dev = torch.device("cuda", torch.cuda.current_device())
    if dev not in _FLUSH:
        _FLUSH[dev] = (torch.ones(256 << 20, dtype=torch.float16, device=dev),
                       torch.empty(1, dtype=torch.float16, device=dev))
    buf, out = _FLUSH[dev]
    torch.sum(buf.view(1, -1), dim=1, out=out)


def bench_cold(fn, reps: int = 100, warmup: int = 10) -> float:
    """Median milliseconds of one ``fn()`` after a cold-L2 read flush, over ``reps`` runs."""
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends, strict=True):
        _flush_l2()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))


def bench_eager(fn, rep_ms: int = 200) -> float:
    """Median milliseconds per call of ``fn`` as launched from Python."""
    return bench_cold(fn, reps=max(20, rep_ms // 2))


def capture_graph(fns) -> torch.cuda.CUDAGraph:
    """One CUDA graph that runs each callable of ``fns`` once, in order.

    Each callable must be capturable: no allocation it depends on across calls, no host sync.
    Three warm-up rounds run first on a side stream (Triton compiles, allocator), as PyTorch's
    CUDA-graph notes recommend before a capture.
    """
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # warm-up: compile, allocator
            for fn in fns:
                fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in fns:
            fn()
    torch.cuda.synchronize()
    return graph


def bench_graph(fn, rep_ms: int = 200) -> float:
    """Median milliseconds per replay of ``fn`` captured in a CUDA graph.

    ``fn`` must be capturable: no allocation it depends on across calls, no host sync.
    """
    return bench_graph_many([fn], rep_ms)


def bench_graph_many(fns, rep_ms: int = 200) -> float:
    """Median milliseconds per replay of one CUDA graph running each of ``fns`` in order.

    One cold-L2 read flush precedes each replay (not each callable). Divide by ``len(fns)`` for
    the time per callable, graph launch amortized and in-graph gaps between kernels included.
    """
    graph = capture_graph(list(fns))
    ms = bench_cold(graph.replay, reps=max(20, rep_ms // 2))
    del graph  # its private memory pool goes back to the allocator
    return ms


READ_BANDWIDTH_BYTES = 2 << 30  # the engine's probe: infer.bandwidth.measure_read_bandwidth


def read_bandwidth(reps: int = 100) -> float:
    """The card's read bandwidth in GB/s, measured as the engine measures it for its decode
    ceiling (``infer.bandwidth.measure_read_bandwidth``: a float32 sum over 2 GiB, median of
    ``reps`` runs), so every benchmark's ``frac_bw`` and the engine's fractions share one
    reference (BENCHMARKS.md, "Bandwidth")."""
    return measure_read_bandwidth(torch.device("cuda", torch.cuda.current_device()),
                                  READ_BANDWIDTH_BYTES, iters=reps) / 1e9


def read_bandwidth_bf16_sum(reps: int = 100) -> float:
    """The benchmarks' former probe in GB/s: ``x.sum()`` over a 4 GiB bfloat16 tensor, median of
    ``reps`` cold-L2 runs; kept to compare the two probes on a card."""
    x = torch.randn(2 << 30, dtype=torch.bfloat16, device="cuda")
    return x.numel() * x.element_size() / bench_cold(x.sum, reps) / 1e6
