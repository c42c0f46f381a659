"""Start-up work that would otherwise land on the first reply's time to first token.

A fresh process pays, on its first prompt, for work that a later prompt of the same process does
not (``benchmarks/ttft_first.py --timeline``; BENCHMARKS.md has the figures):

- Triton's key of its own installation (``triton.runtime.cache.triton_key``: a SHA-256 over its
  sources and the ~400 MB ``libtriton.so``), computed on the first kernel launch of the process;
- the first launch of every kernel specialization the prefill uses (loading the cached binary
  and its launcher) and cuBLAS's first matmuls (its handle, its kernels' modules);
- the decode step's CUDA graph capture. During a prefill the host is at most about a fifth of a
  second ahead of the device (the launch queue fills and blocks it), so a capture of 0.3-0.45 s
  in the middle of the prefill leaves the device idle for the rest.

So the weights load while a thread computes Triton's key (``start_triton_key``: the file reads
and the hashing of large buffers release the GIL), and the commands call ``warm_up`` once the
engine is loaded: one prefill chunk of placeholder tokens on pages freed right after, then the
decode step's capture for the replies' sampling parameters and batch. The first reply's prefill
then runs as a later one would, and its first token comes when the prefill ends (issue 16:
"capture off the first-token path"; the capture time is shown once, on the first stats line).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from infer.engine import Engine
    from infer.sampling_params import SamplingParams

# The placeholder token of the warm-up chunk (any id below every vocabulary's size).
WARM_UP_TOKEN = 0


def start_triton_key(device: torch.device) -> threading.Thread | None:
    """Compute Triton's installation key (``triton_key``, cached for the process) on a daemon
    thread, for a CUDA ``device`` under the compiler (not the interpreter). Returns the thread
    (join it before the first kernel launch, so the launch does not compute the key again), or
    None where there is nothing to do.

    Best effort: Triton versions without ``triton.runtime.cache.triton_key`` get None, and an
    error inside the thread is swallowed (the first launch then computes the key itself)."""
    import os

    if device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return None
    try:
        from triton.runtime.cache import triton_key
    except ImportError:
        return None

    def compute() -> None:
        try:
            triton_key()
        except Exception:  # noqa: BLE001  (an optimization only: the launch recomputes it)
            pass

    thread = threading.Thread(target=compute, name="triton-key", daemon=True)
    thread.start()
    return thread


def warm_up(engine: Engine, sampling: SamplingParams, *, batch: int = 1,
            prompt_tokens: int = 0) -> float:
    """Run, before the first reply, what its time to first token would otherwise pay (module
    docstring): a prefill chunk of ``min(prompt_tokens, engine.config.chunk)`` placeholder
    tokens on a scratch session (its pages go back to the pool; the cache of every other session
    is untouched), then the capture of the decode step of ``batch`` rows for ``sampling``
    (``GraphRunner.prepare``; nothing without CUDA graphs), then a wait for the device.

    Args:
        engine: a loaded engine with no reply running.
        sampling: the replies' sampling parameters (greedy and sampled steps are different
            graphs).
        batch: the sequences the first replies decode together (1..``engine.max_batch``).
        prompt_tokens: the first prompt's length when known (0: no prefill warm-up).

    Returns:
        The seconds it took (host wall time, the device's work included); they are added to
        ``engine.warm_up_s``.

    Raises:
        ValueError: ``batch`` outside 1..``engine.max_batch``, or ``prompt_tokens`` < 0.
    """
    if not 1 <= batch <= engine.max_batch:
        raise ValueError(f"warm-up batch {batch} is outside 1..{engine.max_batch}")
    if prompt_tokens < 0:
        raise ValueError(f"warm-up prompt_tokens must be >= 0, got {prompt_tokens}")
    t0 = time.perf_counter()
    n = min(prompt_tokens, engine.config.chunk, engine.ctx - 1)
    if n > 0:
        scratch = engine.new_session()
        try:
            scratch._prefill([WARM_UP_TOKEN] * n, None)
        finally:
            scratch.reset()
    engine.graph_runner().prepare(sampling, batch)
    if engine.device.type == "cuda":
        torch.cuda.synchronize(engine.device)
    seconds = time.perf_counter() - t0
    engine.warm_up_s += seconds
    return seconds
