"""Does a loading warp that streams weights across a grid barrier hide a GEMV launch's fixed cost?
An experiment in Gluon for issue 16's decision, not a kernel the engine runs.

A decode GEMV costs its bytes at the read bandwidth plus ~3 us a launch (``benchmarks/
gemv_fit.py``; BENCHMARKS.md, "a decode GEMV is its bytes at the read bandwidth plus ~3 us a
launch"). A persistent decode layer would replace launches by grid barriers; it pays only if
the weights of the phase after a barrier are already streaming while the programs wait at it.
Triton cannot express that (no warp specialization on sm_90); Gluon can. This is the smallest
case: a chain of ``phases`` dependent one-row GEMVs, ``x[p + 1] = W_p @ x[p]``, with the square
weights ``W_p`` ``[n, n]`` stacked in ``w`` ``[phases * n, n]`` (bfloat16) and ``x`` float32
``[phases + 1, n]``, row 0 the input.

``chain_persistent``: one launch of ``n / BLOCK_N`` programs (at most one an SM), each
owning ``BLOCK_N`` rows of every phase. In a program,

- a loading warp (``_weight_loader``) walks its rows' weight tiles of phase 0, 1, ... through a
  ring of ``STAGES`` shared-memory buffers with TMA, waiting only for a free buffer: it never
  waits for ``x``, so it runs up to ``STAGES`` tiles into the next phase while the compute warps
  wait at the barrier;
- four compute warps (``_compute``) wait until every program has stored phase ``p - 1`` (a grid
  barrier: one thread's release add to an int32 counter after a CTA barrier, an acquire spin,
  the scheme of ``kernels/grid_barrier.py``), then multiply each ready tile by ``x[p]``'s
  columns (float32 FMAs, the row-sum once a phase), free the buffer, store their rows of
  ``x[p + 1]`` and arrive.

``chain_launches`` is the baseline: one ``kernels.gemv`` launch a phase (bfloat16 rows, the
engine's tiles and PDL chain), as a decode step runs its GEMVs; ``cross=False`` the control:
the same kernel with its loading warp waiting at each barrier too, so that what the stream
across the barriers gains is told apart from what the barrier costs. ``main`` times the three
in CUDA graphs from a cold L2 and prints per phase: microseconds, the weight's bytes over the
run's read bandwidth, and the difference (the fixed cost a phase). Prediction (before
any run): the launches ~3 us a phase over the bytes (33.6 MB: 7.7 us at 4.38 TB/s); the persistent
chain under 1.5 us if the loading warp keeps the buffers full across the barrier (the barrier
~1.2 us, BENCHMARKS.md's grid-barrier table, overlapped by the stream). A result near 3 us would
say the stream does not overlap the barrier and the persistent layer is not worth its Gluon.

GPU only (Hopper, sm_90+). ``tests/test_persistent_chain.py`` compiles it for sm_90 on a CPU and
checks it against ``chain_reference`` on a GPU.

    python3 benchmarks/persistent_chain.py [--n 4096] [--phases 36] [--tiles 64x16,128x8]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@gluon.jit
def _weight_loader(w_desc, w_bufs, ready, empty, counter_ptr, phases, n,
                   CROSS: gl.constexpr):
    """The loading warp: this program's weight tiles of every phase, in order, into the ring;
    without ``CROSS`` it first waits at each phase's grid barrier too (the control: no tile of
    a phase is read before every program has finished the phase before, as with launches)."""
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = w_desc.block_type.shape[1]
    STAGES: gl.constexpr = w_bufs.type.shape[0]
    row0 = gl.program_id(0) * BLOCK_N
    programs = gl.num_programs(0)
    k_tiles = n // BLOCK_K
    i = 0
    for p in range(phases):
        if not CROSS and p > 0:
            seen = gl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
            while seen < p * programs:
                seen = gl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
        for t in range(k_tiles):
            s = i % STAGES
            mbarrier.wait(empty.index(s), (i // STAGES & 1) ^ 1)  # free (a new ring starts free)
            fence_async_shared()  # the compute warps' reads of the buffer, before this TMA write
            mbarrier.expect(ready.index(s), w_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(w_desc, [p * n + row0, t * BLOCK_K], ready.index(s),
                                            w_bufs.index(s))
            i += 1


@gluon.jit
def _compute(x_ptr, counter_ptr, w_bufs, ready, empty, phases, n, layout: gl.constexpr):
    """The compute warps: per phase, the grid barrier, then ``x[p + 1][rows] = W_p[rows] @
    x[p]``."""
    BLOCK_N: gl.constexpr = w_bufs.type.shape[1]
    BLOCK_K: gl.constexpr = w_bufs.type.shape[2]
    STAGES: gl.constexpr = w_bufs.type.shape[0]
    programs = gl.num_programs(0)
    rows = gl.program_id(0) * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, layout))
    k_tiles = n // BLOCK_K
    i = 0
    for p in range(phases):
        if p > 0:  # every program's rows of x[p] are stored (acquire spin, then a CTA barrier)
            seen = gl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
            while seen < p * programs:
                seen = gl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
            gl.thread_barrier()
        x_row = x_ptr + p * n
        acc = gl.zeros([BLOCK_N, BLOCK_K], gl.float32, layout)
        x_next = gl.load(x_row + cols, cache_modifier=".cg")
        for t in range(k_tiles):
            s = i % STAGES
            mbarrier.wait(ready.index(s), i // STAGES & 1)
            w = w_bufs.index(s).load(layout)
            mbarrier.arrive(empty.index(s), count=1)  # (the loader fences before reusing it)
            x_t = x_next  # the next tile's columns are loaded one tile ahead (an L2 round trip)
            # (past the last tile: row p + 1's first columns, loaded and never used)
            x_next = gl.load(x_row + (t + 1) * BLOCK_K + cols, cache_modifier=".cg")
            acc += w.to(gl.float32) * gl.expand_dims(x_t, 0)
            i += 1
        gl.store(x_ptr + (p + 1) * n + rows, gl.sum(acc, axis=1))
        gl.thread_barrier()  # the four warps' stores, then one release arrival
        gl.atomic_add(counter_ptr, 1, sem="release", scope="gpu")


@gluon.jit
def _chain_kernel(w_desc, x_ptr, counter_ptr, phases, n, STAGES: gl.constexpr,
                  CROSS: gl.constexpr = True):
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = w_desc.block_type.shape[1]
    # [16, 64] per CTA of 4 warps: 8 contiguous bfloat16 (16 bytes) a thread from shared memory
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1], [1, 0])
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BLOCK_N, BLOCK_K], w_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    gl.warp_specialize([
        (_compute, (x_ptr, counter_ptr, w_bufs, ready, empty, phases, n, layout)),
        (_weight_loader, (w_desc, w_bufs, ready, empty, counter_ptr, phases, n, CROSS)),
    ], [1], [24])


def weight_layout(block_n: int, block_k: int):
    """The TMA tile's shared-memory layout for bfloat16 ``[block_n, block_k]`` weight tiles."""
    return gl.NVMMASharedLayout.get_default_for([block_n, block_k], gl.bfloat16)


def _check(w: torch.Tensor, x: torch.Tensor) -> tuple[int, int]:
    phases, n = x.shape[0] - 1, x.shape[1]
    if (w.dtype != torch.bfloat16 or x.dtype != torch.float32 or phases < 1
            or w.shape != (phases * n, n) or not (w.is_contiguous() and x.is_contiguous())):
        raise ValueError(f"persistent_chain: w must be bfloat16 [phases * n, n] and x float32 "
                         f"[phases + 1, n], contiguous; got {tuple(w.shape)} {w.dtype} and "
                         f"{tuple(x.shape)} {x.dtype}")
    return phases, n


def chain_reference(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The chain in float32 with torch: rows ``1..phases`` of a copy of ``x`` (module notes)."""
    phases, n = _check(w, x)
    out = x.clone()
    for p in range(phases):
        out[p + 1] = w[p * n:(p + 1) * n].float() @ out[p]
    return out


def chain_persistent(w: torch.Tensor, x: torch.Tensor, counter: torch.Tensor, *,
                     block_n: int = 32, block_k: int = 64, stages: int = 16,
                     cross: bool = True) -> None:
    """Run the chain in one launch (module notes), writing ``x[1:]``.

    Args:
        w: bfloat16 [phases * n, n], contiguous; n a multiple of ``block_k`` and of
            ``block_n``.
        x: float32 [phases + 1, n], contiguous; row 0 the input.
        counter: int32 [1], zeroed here (the grid barrier's arrivals).
        block_n, block_k, stages: the weight tile and the ring's depth.
        cross: the loading warp streams across the barriers (the design); False: it waits at
            them too (the control).

    Raises:
        ValueError: wrong shapes or dtypes, a GPU older than Hopper, or more programs than the
            GPU has SMs (the barrier needs every program resident at once).
    """
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    phases, n = _check(w, x)
    if (counter.dtype != torch.int32 or counter.numel() != 1 or counter.device != x.device
            or w.device != x.device):
        raise ValueError("persistent_chain: w, x and an int32 [1] counter must share a device")
    if not (16 <= block_n <= 256 and 64 <= block_k <= 256):
        raise ValueError(f"persistent_chain: block_n must be 16 to 256 and block_k 64 to 256 (the "
                         f"layout's [16, 64] and a TMA box), got {block_n} and {block_k}")
    if n % block_k or n % block_n:
        raise ValueError(f"persistent_chain: n = {n} must be a multiple of block_k = {block_k} "
                         f"and block_n = {block_n}")
    if torch.cuda.get_device_capability(x.device)[0] < 9:
        raise ValueError("persistent_chain: needs a Hopper GPU or newer (TMA, warp specialization)")
    programs = n // block_n
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    if programs > sms:
        raise ValueError(f"persistent_chain: {programs} programs for {sms} SMs; raise block_n")
    desc = TensorDescriptor.from_tensor(w, [block_n, block_k], weight_layout(block_n, block_k))
    counter.zero_()
    _chain_kernel[(programs,)](desc, x, counter, phases, n, STAGES=stages, CROSS=cross,
                               num_warps=4)


def chain_launches(w: torch.Tensor, xb: torch.Tensor) -> None:
    """The baseline: one ``kernels.gemv`` launch a phase on bfloat16 rows ``xb`` [phases + 1, n]
    (the engine's tiles and PDL chain)."""
    from kernels.gemv import launch_unsplit
    from kernels.tiles import gemv_tiles

    n = xb.shape[1]
    tiles = gemv_tiles(xb.device, xb.dtype, n, n, False)
    for p in range(xb.shape[0] - 1):
        launch_unsplit(xb[p:p + 1], w[p * n:(p + 1) * n], xb[p + 1:p + 2], n, n, False, tiles)


def main() -> None:
    from benchmarks.timing import bench_graph_many, read_bandwidth

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--phases", type=int, default=36)
    ap.add_argument("--block-n", type=int, default=32)
    ap.add_argument("--tiles", default="64x16,128x8",
                    help="BLOCK_K x STAGES of the ring to time (64 KB each by default)")
    ap.add_argument("--rep-ms", type=int, default=200)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU (Hopper)")
    n, phases = args.n, args.phases
    bw = read_bandwidth(50)
    w = (torch.randn(phases * n, n, device="cuda") / n ** 0.5).to(torch.bfloat16)
    x = torch.zeros(phases + 1, n, device="cuda")
    x[0] = torch.randn(n, device="cuda")
    ref = chain_reference(w, x)
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    bytes_phase = n * n * 2
    print(json.dumps({"what": "bandwidth", "GB/s": round(bw, 1),
                      "device": torch.cuda.get_device_name()}))
    variants = [(t, cross) for t in args.tiles.split(",") if t for cross in (True, False)]
    for tile, cross in variants:  # each ring: streaming across the barriers, and the control
        block_k, stages = map(int, tile.split("x"))
        run = lambda bk=block_k, st=stages, c=cross: chain_persistent(  # noqa: E731
            w, x, counter, block_n=args.block_n, block_k=bk, stages=st, cross=c)
        run()
        torch.cuda.synchronize()
        err = ((x - ref).abs().max() / ref.abs().max()).item()
        us = bench_graph_many([run], args.rep_ms) * 1e3 / phases
        if not err < 1e-3:  # a wrong result is no measurement (NaN included)
            raise SystemExit(f"persistent_chain: {tile} (cross={cross}) is off by {err:.3g} of "
                             "the largest value against torch")
        label = f"persistent_{args.block_n}x{tile}" + ("" if cross else "_loader_waits")
        print(json.dumps({"what": "chain", "impl": label, "n": n,
                          "phases": phases, "us_per_phase": round(us, 3),
                          "bytes_us": round(bytes_phase / bw / 1e3, 3),
                          "fixed_us": round(us - bytes_phase / bw / 1e3, 3),
                          "max_rel_err": err}))
    xb = x.to(torch.bfloat16)
    chain_launches(w, xb)
    us = bench_graph_many([lambda: chain_launches(w, xb)], args.rep_ms) * 1e3 / phases
    print(json.dumps({"what": "chain", "impl": "launches", "n": n, "phases": phases,
                      "us_per_phase": round(us, 3), "bytes_us": round(bytes_phase / bw / 1e3, 3),
                      "fixed_us": round(us - bytes_phase / bw / 1e3, 3)}))


if __name__ == "__main__":
    main()
