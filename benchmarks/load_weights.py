"""Weight loading speed: checkpoint files (page cache warm) to the GPU, against its ceilings.

Prints one JSON line per measurement (GB = 1e9 bytes of safetensors data per second):

- ``read``: the host ceiling: every file read into pinned buffers by the loader's reader threads,
  nothing copied on (``models.weight_stream``'s reads alone);
- ``h2d``: the bus ceiling: one pinned buffer copied to the device again and again;
- ``load``: ``models.loader.load_model`` through the staged copy (the CUDA default; meta
  model, allocation, header checks, finiteness checks included), median of ``--reps``;
- ``load_plain``: the peer, the loader's one-tensor-at-a-time path (``safe_open`` +
  ``copy_``; ``INFER_STAGED_LOAD=0``, and the CPU's path). One untimed load first (the caching
  allocator then holds the model's memory for every timed load alike: the first load of a
  process also pays ``cudaMalloc``), then the two alternate, so that neither gains from going
  second;
- ``load_file``: the second peer, safetensors' own ``load_file(path, device=...)`` per file
  (the tensors alone, no model);
- with ``--sweep``, ``load`` again for each staging size x buffer count.

    python3 -m models.random_checkpoint --size 8b --out /tmp/qwen3-8b-random
    PYTHONPATH=. python3 benchmarks/load_weights.py --ckpt /tmp/qwen3-8b-random

Runs on the CPU too (a smoke test: no pinned memory, no ``h2d``; the staged path is forced).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from models import loader, weight_stream
from models.checkpoint_folder import checkpoint_files
from models.loader import load_model


def emit(rec: dict) -> None:
    print(json.dumps(rec), flush=True)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def warm_page_cache(files: list[Path]) -> float:
    """Read every file once (so the timings below are page-cache reads); returns seconds."""
    t0 = time.perf_counter()
    buf = bytearray(64 << 20)
    for path in files:
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass
    return time.perf_counter() - t0


def read_ceiling(files: list[Path], pin: bool) -> float:
    """GB/s of reading every file into ``BUFFERS`` staging buffers with as many threads."""
    n, chunk = weight_stream.BUFFERS, weight_stream.CHUNK_BYTES
    bufs = [weight_stream._host_buffer(chunk, pin=pin) for _ in range(n)]
    jobs = [(p, off, min(chunk, p.stat().st_size - off)) for p in files
            for off in range(0, p.stat().st_size, chunk)]

    def read(k: int) -> None:
        path, off, size = jobs[k]
        batch = weight_stream._Batch(path, off, size)
        weight_stream._read(batch, bufs[k % n])

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=n) as pool:  # slot k % n: one job per slot at a time
        for start in range(0, len(jobs), n):
            list(pool.map(read, range(start, min(len(jobs), start + n))))
    s = time.perf_counter() - t0
    return sum(p.stat().st_size for p in files) / s / 1e9


def h2d_ceiling(device: torch.device, nbytes: int = 256 << 20, reps: int = 20) -> float:
    src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst.copy_(src, non_blocking=True)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        dst.copy_(src, non_blocking=True)
    _sync(device)
    return nbytes * reps / (time.perf_counter() - t0) / 1e9


def time_load(folder: Path, device: torch.device, dtype: torch.dtype, reps: int) -> list[float]:
    """Seconds of each of ``reps`` ``load_model`` calls (the model freed in between)."""
    times = []
    for _ in range(reps):
        _sync(device)
        t0 = time.perf_counter()
        model = load_model(folder, device=device, dtype=dtype)
        _sync(device)
        times.append(time.perf_counter() - t0)
        del model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return times


def time_load_file(files: list[Path], device: torch.device, reps: int) -> list[float]:
    from safetensors.torch import load_file

    times = []
    for _ in range(reps):
        _sync(device)
        t0 = time.perf_counter()
        tensors = [load_file(p, device=str(device)) for p in files]
        _sync(device)
        times.append(time.perf_counter() - t0)
        del tensors
        gc.collect()
    return times


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", required=True, help="checkpoint folder (models.random_checkpoint)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-peers", action="store_true", help="skip load_plain and load_file")
    ap.add_argument("--sweep", action="store_true",
                    help="also time load for staging sizes 8-128 MiB x 2-16 buffers")
    args = ap.parse_args(argv)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    folder = Path(args.ckpt)
    files = checkpoint_files(folder)
    nbytes = sum(p.stat().st_size for p in files)
    cuda = device.type == "cuda"
    if cuda:
        torch.zeros(1, device=device)  # the CUDA context, outside the timings
    staged = loader._staged
    if not cuda:
        loader._staged = lambda d: True  # the staged path on the CPU too (smoke test)
    try:
        _measure(args, folder, files, nbytes, device, dtype)
    finally:
        loader._staged = staged


def _measure(args, folder: Path, files: list[Path], nbytes: int, device: torch.device,
             dtype: torch.dtype) -> None:
    cuda = device.type == "cuda"
    emit({"what": "device", "device": torch.cuda.get_device_name(device) if cuda else "cpu",
          "torch": torch.__version__, "commit": os.environ.get("INFER_COMMIT", "unknown"),
          "ckpt": str(folder), "files": len(files), "gb": round(nbytes / 1e9, 3),
          "cpus": os.cpu_count(), "buffers": weight_stream.BUFFERS,
          "chunk_mib": weight_stream.CHUNK_BYTES >> 20})
    emit({"what": "warm_page_cache", "s": round(warm_page_cache(files), 3)})
    emit({"what": "read", "gb_per_s": round(read_ceiling(files, pin=cuda), 2)})
    if cuda:
        emit({"what": "h2d", "gb_per_s": round(h2d_ceiling(device), 2)})

    def report(what: str, times: list[float], **extra) -> None:
        s = statistics.median(times)
        emit({"what": what, **extra, "s": round(s, 3), "gb_per_s": round(nbytes / s / 1e9, 2),
              "runs_s": [round(t, 3) for t in times]})

    time_load(folder, device, dtype, 1)  # untimed: the allocator's first cudaMalloc
    staged = loader._staged
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        for _ in range(args.reps):
            for path in ((True,) if args.no_peers else (True, False)):
                loader._staged = lambda d, path=path: path
                times[path] += time_load(folder, device, dtype, 1)
    finally:
        loader._staged = staged
    report("load", times[True])
    if not args.no_peers:
        report("load_plain", times[False])
        report("load_file", time_load_file(files, device, max(1, args.reps - 1)))
    if args.sweep:
        default = (weight_stream.CHUNK_BYTES, weight_stream.BUFFERS)
        try:
            for chunk_mib in (8, 16, 32, 64, 128):
                for buffers in (2, 4, 8, 16):
                    weight_stream.CHUNK_BYTES, weight_stream.BUFFERS = chunk_mib << 20, buffers
                    report("load", time_load(folder, device, dtype, 2), chunk_mib=chunk_mib,
                           buffers=buffers)
        finally:
            weight_stream.CHUNK_BYTES, weight_stream.BUFFERS = default


if __name__ == "__main__":
    main()
