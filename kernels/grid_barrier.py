"""A grid-wide barrier inside one kernel, the synchronization a persistent decode kernel would
use between its phases (issue 16: a "megakernel" layer instead of ~10 launches), and a test
kernel of phases that each read what another program wrote in the phase before.

``grid_barrier(counter_ptr, target)``: every program adds 1 to an int32 counter (release, GPU
scope) and spins until it reads ``target`` arrivals (acquire); around it a CTA barrier, so that
each program's threads' earlier stores are ordered before its arrival and its later loads after
the wait. The counter only grows: the ``k``-th barrier of a launch waits for ``k * programs``,
and the counter is zeroed before each launch (``torch.Tensor.zero_``, a memset node in a CUDA
graph). The scheme of CUDA's cooperative groups ``grid.sync()`` (``__syncthreads``, one thread's
fenced ``atomicAdd`` and spin, ``__syncthreads``). Triton executes a scalar atomic once per
program.

NOTE: every program of the grid must be resident at once, or the spin never ends: at most one
program per SM (``kernels.device.sm_count``), and nothing else holding SMs that the kernel
waits on. Under the interpreter programs run one after another, so only a one-program grid can
pass a barrier there (the CPU tests); the phases run as separate launches instead
(``phase_chain`` with ``persistent=False``), which is also the unfused oracle.

``_phase_kernel`` is the measuring instrument of ``benchmarks/grid_barrier.py``: phases ``lo``
to ``hi`` of a chain in which program ``p`` of phase ``k`` writes ``buf[k, p] = buf[k - 1, (p +
1) % P] + p + k``. A missing or late barrier reads a stale neighbour and gives another sum.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.device import supports_pdl


@triton.jit
def grid_barrier(counter_ptr, target):
    """Wait until the grid's programs have made ``target`` arrivals at ``counter_ptr`` (int32),
    this program's included (module notes)."""
    tl.debug_barrier()
    seen = tl.atomic_add(counter_ptr, 1, sem="release", scope="gpu") + 1
    while seen < target:
        seen = tl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()


@triton.jit
def _phase_kernel(buf_ptr, counter_ptr, lo, hi, PROGRAMS: tl.constexpr, WIDTH: tl.constexpr,
                  USE_PDL: tl.constexpr):
    """Phases ``lo .. hi - 1`` of the chain (module notes); ``buf``: int32 [phases + 1,
    PROGRAMS, WIDTH], row 0 the input. More than one phase: a grid barrier between them."""
    p = tl.program_id(0)
    cols = tl.arange(0, WIDTH)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    for k in range(lo, hi):
        if k > lo:
            grid_barrier(counter_ptr, (k - lo) * PROGRAMS)
        prev = tl.load(buf_ptr + (k * PROGRAMS + (p + 1) % PROGRAMS) * WIDTH + cols)
        tl.store(buf_ptr + ((k + 1) * PROGRAMS + p) * WIDTH + cols, prev + p + k)


def phase_chain(buf: torch.Tensor, counter: torch.Tensor, *, persistent: bool,
                pdl: bool = False) -> None:
    """Run every phase of ``buf``'s chain: one launch with grid barriers (``persistent``), or
    one launch per phase (each waiting for the previous: stream order, or with ``pdl`` on sm_90+
    programmatic dependent launch).

    Args:
        buf: int32 [phases + 1, P, W] on one device, contiguous; row 0 the input, rows 1.. are
            written. P programs (P <= the SM count on a GPU for ``persistent``, 1 on the CPU);
            W a power of two.
        counter: int32 [1] on the same device; zeroed here (persistent only).

    Raises:
        ValueError: on a shape, dtype or program count the chain cannot run.
    """
    if buf.dim() != 3 or buf.dtype != torch.int32 or not buf.is_contiguous() \
            or counter.dtype != torch.int32 or counter.numel() != 1:
        raise ValueError("phase_chain: buf must be a contiguous int32 [phases + 1, P, W] and "
                         "counter an int32 [1]")
    phases, programs, width = buf.shape[0] - 1, buf.shape[1], buf.shape[2]
    if phases < 1 or width & (width - 1):
        raise ValueError(f"phase_chain: need >= 1 phase and a power-of-two width, got "
                         f"{tuple(buf.shape)}")
    if persistent and buf.device.type != "cuda" and programs > 1:
        raise ValueError("phase_chain: a grid barrier over several programs needs a GPU (the "
                         "interpreter runs programs one after another)")
    use_pdl = pdl and not persistent and supports_pdl(buf.device)
    extra = {"launch_pdl": True} if use_pdl else {}
    if persistent:
        counter.zero_()
        _phase_kernel[(programs,)](buf, counter, 0, phases, PROGRAMS=programs, WIDTH=width,
                                   USE_PDL=False, num_warps=4)
        return
    for k in range(phases):
        _phase_kernel[(programs,)](buf, counter, k, k + 1, PROGRAMS=programs, WIDTH=width,
                                   USE_PDL=use_pdl, num_warps=4, **extra)


def phase_chain_reference(first: torch.Tensor, phases: int) -> torch.Tensor:
    """int32 [phases + 1, P, W]: the chain computed in torch from row 0 ``first`` [P, W]."""
    rows = [first]
    p = torch.arange(first.shape[0], dtype=torch.int32, device=first.device)[:, None]
    for k in range(phases):
        rows.append(torch.roll(rows[-1], -1, dims=0) + p + k)
    return torch.stack(rows)
