"""Where a fresh process's first token goes: the first reply's time to first token against a
second one's in the same process, and the prefill alone (issue 16's summarize TTFT target: the
prefill plus at most 0.1 s).

For each ``--capture-ahead`` value (``infer.session.CAPTURE_AHEAD_TOKENS``: the prompt tokens
enqueued before the decode step's capture) a fresh Python process loads the checkpoint and
replies three times to the same prompt of ``--tokens`` pseudo-random ids, on fresh sessions,
greedy, ``--new`` tokens each:

- ``first``: what ``infer summarize`` pays: every kernel's first launch in the process (module
  loading, cuBLAS's handle), and the decode step's capture, overlapping the prefill as far as it
  can;
- ``second``: the kernels loaded and the step captured: the prefill and the first token;
- ``third``: the same again (the spread between ``second`` and ``third`` is the noise).

One JSON line per process: ``load_s``, each reply's ``ttft_s``, ``capture_s`` (the engine's
capture seconds, all in the first reply), ``first_minus_second_s`` (the first prompt's extra
cost). With ``--timeline``, ``first_timeline``/``second_timeline`` per reply: each prefill
chunk's host enqueue start and end and its completion on the device, and the capture's host
start and end, all in seconds since the reply began (``chunk_timeline``): where the device
waited for the host. With ``--profile N``, ``first_profile``: the first reply's N functions of
most own time under ``cProfile`` (it slows the host, so its TTFT is not the figure). Runs on the
CPU too (a smoke test: no capture; the device column is the host's).

    PYTHONPATH=. python3 benchmarks/ttft_first.py --ckpt /tmp/qwen3-8b-random --tokens 28506 \\
        --capture-ahead 16384,32768 [--timeline] [--profile 25]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def one_process(args) -> dict:
    """The three replies in this process (the child side)."""
    sys.path.insert(0, str(HERE.parent))
    import torch

    import infer.session
    from benchmarks.run_info import commit
    from infer import Engine, EngineConfig, SamplingParams

    infer.session.CAPTURE_AHEAD_TOKENS = args.capture_ahead
    t0 = time.perf_counter()
    eng = Engine(EngineConfig(args.ckpt, ctx=args.ctx, kv_cache=args.kv, device=args.device))
    load_s = time.perf_counter() - t0
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, 100_000, (args.tokens,), generator=gen).tolist()
    sp = SamplingParams(temperature=0.0, max_new_tokens=args.new, ignore_eos=True)
    ttft, timelines, profile = [], [], None
    for i in range(3):
        s = eng.new_session()
        prof = cProfile.Profile() if args.profile and i == 0 else None
        with chunk_timeline(eng.device) as timeline:
            if prof is not None:
                prof.enable()
            list(s.generate(prompt, sp))
            if prof is not None:
                prof.disable()
                profile = top_functions(prof, args.profile)
        ttft.append(s.stats.ttft_s)
        timelines.append(timeline)
        s.reset()
    extra = {}
    if args.timeline:
        extra = {"first_timeline": timelines[0], "second_timeline": timelines[1]}
    if profile is not None:
        extra["first_profile"] = profile
    return {"bench": "ttft_first", "commit": commit(), "device": str(eng.device),
            "tokens": args.tokens, "kv": args.kv, "capture_ahead": args.capture_ahead,
            "load_s": round(load_s, 3), "first_ttft_s": round(ttft[0], 3),
            "second_ttft_s": round(ttft[1], 3), "third_ttft_s": round(ttft[2], 3),
            "capture_s": round(eng.graph_capture_s, 3),
            "first_minus_second_s": round(ttft[0] - ttft[1], 3), **extra}


@contextlib.contextmanager
def chunk_timeline(device):
    """Record one reply's prefill timeline into the dict it yields (filled when the block ends):
    ``chunks``: ``[host enqueue start, host enqueue end, device done]`` per prefill chunk and
    ``capture``: ``[host start, host end]`` of each ``GraphRunner.prepare``, in seconds since the
    block began (on the CPU the device column is the enqueue end). Patches ``Session._forward``
    and ``GraphRunner.prepare`` inside the block only."""
    import time

    import torch

    from infer.graphs import GraphRunner
    from infer.session import Session

    cuda = device.type == "cuda"
    t0 = time.perf_counter()
    start = torch.cuda.Event(enable_timing=True) if cuda else None
    if cuda:
        start.record()
    rows, captures = [], []
    forward, prepare = Session._forward, GraphRunner.prepare

    def timed_forward(self, ids):
        a = time.perf_counter() - t0
        out = forward(self, ids)
        b = time.perf_counter() - t0
        ev = None
        if cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
        rows.append((a, b, ev))
        return out

    def timed_prepare(self, *a, **k):
        c = time.perf_counter() - t0
        prepare(self, *a, **k)
        captures.append([round(c, 4), round(time.perf_counter() - t0, 4)])

    out: dict = {}
    Session._forward, GraphRunner.prepare = timed_forward, timed_prepare
    try:
        yield out
    finally:
        Session._forward, GraphRunner.prepare = forward, prepare
        if cuda:
            torch.cuda.synchronize(device)
        out["chunks"] = [[round(a, 4), round(b, 4),
                          round(start.elapsed_time(ev) / 1e3 if ev is not None else b, 4)]
                         for a, b, ev in rows]
        out["capture"] = captures


def top_functions(prof: cProfile.Profile, n: int) -> list[str]:
    """The ``n`` functions of most own time in ``prof``, one ``pstats`` line each."""
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(n)
    lines = [ln.strip() for ln in buf.getvalue().splitlines() if ln.strip()]
    head = next(i for i, ln in enumerate(lines) if ln.startswith("ncalls"))
    return lines[head:head + n + 1]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--tokens", type=int, default=28506, help="prompt tokens")
    ap.add_argument("--new", type=int, default=8, help="tokens per reply")
    ap.add_argument("--ctx", default="32k")
    ap.add_argument("--kv", default="bf16", choices=("bf16", "int8"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--capture-ahead", default="16384",
                    help="CAPTURE_AHEAD_TOKENS values, comma-separated (one process each)")
    ap.add_argument("--timeline", action="store_true",
                    help="add the first two replies' prefill chunk timelines")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="profile the first reply; report its N functions of most own time")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        from infer.config import parse_ctx

        args.ctx = parse_ctx(args.ctx)
        args.capture_ahead = int(args.capture_ahead)
        print(json.dumps(one_process(args)), flush=True)
        return
    for value in args.capture_ahead.split(","):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--ckpt", args.ckpt,
               "--tokens", str(args.tokens), "--new", str(args.new), "--ctx", args.ctx,
               "--kv", args.kv, "--device", args.device, "--capture-ahead", value.strip(),
               "--profile", str(args.profile), *(["--timeline"] if args.timeline else [])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(  # the repo, installed or not
            [str(HERE.parent), *filter(None, [os.environ.get("PYTHONPATH")])])}
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE.parent, env=env)
        if out.returncode:
            raise SystemExit(f"the run with --capture-ahead {value} failed: "
                             f"{out.stderr.strip().splitlines()[-1:]}")
        print(out.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
