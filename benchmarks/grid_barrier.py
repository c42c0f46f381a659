"""What a grid barrier costs against a kernel boundary, on the GPU (issue 16's persistent-kernel
question): the chain of ``kernels/grid_barrier.py``, its phases run three ways inside one CUDA
graph each:

- ``persistent``: one launch, a grid barrier between phases (what a persistent decode layer
  would pay per phase);
- ``launches``: one launch per phase, in stream order (the decode step without PDL);
- ``launches_pdl``: one launch per phase with programmatic dependent launch (the decode step's
  PDL chain, ``kernels/pdl_chain.py``).

Each phase moves almost no bytes, so the time per phase is the synchronization itself. One JSON
line per way and program count: microseconds per phase (graph replay time over the phases,
median of replays), and whether the result equals the torch reference. Prediction (written
before any run): launches ~2.5-3.5 us, PDL ~1.5-2.5 us, a barrier ~0.7-1.5 us per phase (an L2
atomic round trip per program plus the spin's polling). If the barrier is not well below the PDL
hand-over, a persistent decode layer has little to win over the PDL chain.

    PYTHONPATH=. python3 benchmarks/grid_barrier.py [--phases 200] [--programs 132,66]

GPU only (a barrier over several programs cannot run in the interpreter).
"""

from __future__ import annotations

import argparse
import json

import torch

from benchmarks.timing import bench_graph
from kernels.device import sm_count
from kernels.grid_barrier import phase_chain, phase_chain_reference

WIDTH = 32


def measure(programs: int, phases: int, way: str, rep_ms: int) -> dict:
    """us per phase of one way (module notes) and whether its result is the reference's."""
    gen = torch.Generator(device="cuda").manual_seed(programs)
    buf = torch.zeros(phases + 1, programs, WIDTH, dtype=torch.int32, device="cuda")
    buf[0] = torch.randint(-1000, 1000, (programs, WIDTH), generator=gen, device="cuda",
                           dtype=torch.int32)
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    kw = {"persistent": way == "persistent", "pdl": way == "launches_pdl"}
    ms = bench_graph(lambda: phase_chain(buf, counter, **kw), rep_ms)
    buf[1:] = 0
    phase_chain(buf, counter, **kw)
    torch.cuda.synchronize()
    exact = bool(torch.equal(buf, phase_chain_reference(buf[0], phases)))
    return {"what": "grid_barrier", "way": way, "programs": programs, "phases": phases,
            "us_per_phase": round(ms * 1e3 / phases, 3), "exact": exact}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phases", type=int, default=200)
    ap.add_argument("--programs", default="", help="program counts (default: the SM count, "
                    "and half of it)")
    ap.add_argument("--rep-ms", type=int, default=200)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    sms = sm_count("cuda")
    try:
        counts = [int(x) for x in args.programs.split(",") if x.strip()] or [sms, sms // 2]
    except ValueError:
        ap.error(f"--programs must be comma-separated integers, got {args.programs!r}")
    if args.phases < 2 or any(not 1 <= c <= sms for c in counts):
        ap.error(f"--phases must be >= 2 and each --programs 1..{sms} (one program per SM)")
    print(json.dumps({"what": "device", "name": torch.cuda.get_device_name(), "sms": sms}),
          flush=True)
    for programs in counts:
        for way in ("persistent", "launches", "launches_pdl"):
            print(json.dumps(measure(programs, args.phases, way, args.rep_ms)), flush=True)


if __name__ == "__main__":
    main()
