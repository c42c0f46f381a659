"""The decode runner's captured steps: recording one into a CUDA graph without waiting for the
device, and keeping the recent ones (``GraphRunner``'s capture side).

``capture_step(run, ...)`` warms ``run`` up twice on a side stream (the first call compiles and
loads the Triton kernels, and the caching allocator sees every buffer the step needs), then
records a third call into a ``torch.cuda.CUDAGraph`` with ``capture_begin``/``capture_end`` on
that stream. It does not use the ``torch.cuda.graph`` context manager, which synchronizes the
device first: the runner captures while a prefill may still run on the current stream
(``GraphRunner.prepare``), so that the capture's host work overlaps it. The side stream waits for
the current one before the warm-up, and the current one for the side stream after the capture.

``StepGraphs`` holds a runner's captured steps, one per ``GraphKey`` (bucket, sampling mode,
verify), at most ``MAX_GRAPHS`` (the least recently used is dropped). It captures each over
padding rows only (seq_len 0, slot -1: no cache read or write, so a capture may run while a
prefill writes the cache). All graphs share one memory pool (NOTE: only the graph just replayed
has valid ``hidden``/``logits``).

Randomness: a sampling step that draws from the runner's generator registers it with the graph
(``CUDAGraph.register_generator_state``: each replay draws from the generator's current Philox
state and advances it). The warm-up calls draw from it eagerly, so its state is saved before and
restored after: a seeded reply is the same whether or not a capture happened in the middle of
it. A keyed draw (``infer.noise_keys.uses_keys``) reads its noise keys from the step's inputs and
is captured without a generator.

After torch's "CUDA Graphs" notes (whole-network capture, warm-up on a side stream) and vLLM's
``CUDAGraphRunner``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch

from infer.sampling_params import SamplingParams
from infer.step_buffers import StaticBuffers, graph_key

MAX_GRAPHS = 8  # captured (bucket, sampling mode) graphs kept; the least recently used is dropped

GraphKey = tuple[int, SamplingParams, bool]  # (bucket, graph_key's params, verify)


def step_key(bucket: int, params: SamplingParams, verify: bool) -> GraphKey:
    """The key of the captured step of ``bucket`` rows for ``params`` (``graph_key``)."""
    return (bucket, *graph_key(params, verify))


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


class StepGraphs:
    """A runner's captured decode steps, keyed by ``GraphKey``, in one shared memory pool; past
    ``MAX_GRAPHS`` the least recently used is dropped. CUDA only.

    Args:
        bufs: the runner's static buffers (every row is made padding before a capture).
        device: the CUDA device the steps run on.
    """

    def __init__(self, bufs: StaticBuffers, device: torch.device):
        self.bufs, self.device = bufs, device
        self._pool = torch.cuda.graph_pool_handle()
        self._stream: torch.cuda.Stream | None = None  # warm-up side stream
        self._graphs: OrderedDict[GraphKey, Captured] = OrderedDict()

    def __len__(self) -> int:
        return len(self._graphs)

    def __contains__(self, key: GraphKey) -> bool:
        return key in self._graphs

    def get(self, key: GraphKey) -> Captured:
        """The held step of ``key``, now the most recently used (``KeyError`` if not held)."""
        self._graphs.move_to_end(key)
        return self._graphs[key]

    def capture(self, key: GraphKey,
                run: Callable[[int, SamplingParams, torch.Generator | None, bool],
                              tuple[torch.Tensor, torch.Tensor]],
                generator: torch.Generator | None) -> float:
        """Capture ``run(bucket, params, gen, verify)`` (``key``'s values; ``gen`` is
        ``generator``, or None for a greedy step; the runner passes None for a keyed draw, which
        needs none) over padding rows and hold it, dropping the
        least recently used step first when ``MAX_GRAPHS`` are held; the static buffers it leaves
        behind are reset by the runner's ``begin`` and ``step``.

        Returns:
            The host seconds the capture took (the warm-up calls, which compile the kernels on a
            first run, and recording; the device is not waited for).
        """
        if len(self._graphs) >= MAX_GRAPHS:
            self._graphs.popitem(last=False)
        t0 = time.perf_counter()
        bucket, params, verify = key
        gen = None if params.greedy else generator
        with torch.cuda.device(self.device), torch.inference_mode():
            self.bufs.pad_all()
            if self._stream is None:
                self._stream = torch.cuda.Stream()
            self._graphs[key] = capture_step(lambda: run(bucket, params, gen, verify),
                                             stream=self._stream, pool=self._pool, generator=gen)
        return time.perf_counter() - t0
