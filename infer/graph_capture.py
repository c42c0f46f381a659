"""Recording one decode step into a CUDA graph, without waiting for the device.

``capture_step(run, ...)`` warms ``run`` up twice on a side stream (the first call compiles and
loads the Triton kernels, and the caching allocator sees every buffer the step needs), then
records a third call into a ``torch.cuda.CUDAGraph`` with ``capture_begin``/``capture_end`` on
that stream. It does not use the ``torch.cuda.graph`` context manager, which synchronizes the
device first: the runner captures while a prefill may still run on the current stream
(``GraphRunner.prepare``), so that the capture's host work overlaps it. The side stream waits for
the current one before the warm-up, and the current one for the side stream after the capture.

Randomness: a sampling step registers the generator with the graph
(``CUDAGraph.register_generator_state``: each replay draws from the generator's current Philox
state and advances it). The warm-up calls draw from it eagerly, so its state is saved before and
restored after: a seeded reply is the same whether or not a capture happened in the middle of
it.

After torch's "CUDA Graphs" notes (whole-network capture, warm-up on a side stream) and vLLM's
``CUDAGraphRunner``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass
class Captured:
    """One captured decode step and its output tensors (in the graph's memory pool)."""

    graph: torch.cuda.CUDAGraph
    hidden: torch.Tensor  # [bucket, hidden] model dtype
    logits: torch.Tensor  # float32 [bucket, vocab]


def capture_step(run: Callable[[], tuple[torch.Tensor, torch.Tensor]], *,
                 stream: torch.cuda.Stream, pool, generator: torch.Generator | None
                 ) -> Captured:
    """Warm up ``run`` twice on ``stream``, then capture a third call into a graph.

    Args:
        run: the step: returns ``(hidden, logits)``, reads and writes static buffers only.
        stream: the side stream to warm up and capture on.
        pool: the memory pool the runner's graphs share (``torch.cuda.graph_pool_handle()``).
        generator: the CUDA generator the step samples with (None: greedy).

    Returns:
        The ``Captured`` step.
    """
    state = generator.get_state() if generator is not None else None
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            run()
    graph = torch.cuda.CUDAGraph()
    if generator is not None:
        graph.register_generator_state(generator)
    with torch.cuda.stream(stream):
        graph.capture_begin(pool=pool)
        try:
            hidden, logits = run()
        finally:
            graph.capture_end()
    torch.cuda.current_stream().wait_stream(stream)
    if state is not None:
        generator.set_state(state)
    return Captured(graph, hidden, logits)
