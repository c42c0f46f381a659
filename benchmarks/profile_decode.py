"""Where one decode step's time goes: per-kernel time, GPU busy time, the gaps, the ceiling.

Issue 16's first step ("profile first, then fuse"). For a checkpoint (``--ckpt``, e.g. written by
``python3 -m models.random_checkpoint``), each cache dtype (``--kv``) and each context length
(``--ctx``): prefill a random prompt of that length, then run the decode step as infer does (the
engine's ``GraphRunner``: captured CUDA graphs on CUDA, the same step eagerly elsewhere), time
``--steps`` steps with CUDA events, and profile as many more with ``torch.profiler``. JSON lines:

- ``kernel``: per kernel name, its mean time per step (us), calls per step, share of busy time;
- ``gap`` (CUDA): the largest idle intervals a step has, by the kernels on either side
  (``benchmarks/kernel_gaps.py``);
- ``step``: ``step_wall_us`` (steps back to back, events around them, no profiler),
  ``gpu_busy_us`` (union of the kernels' intervals per step), ``gap_us`` = wall - busy (the
  drain and ramp-up between kernels, plus launch gaps), ``kernels_per_step``,
  ``kernels_per_layer``, ``per_layer_kernels`` (the kernels whose calls per step are a multiple
  of the layer count, counted once per layer) and ``other_kernels`` (embedding, final norm,
  lm_head, sampling, copies); and the ceiling: ``bytes_per_step`` (weights without the
  embedding, plus the K/V and scales read), ``ceiling_us_per_step`` from
  ``Engine.ceiling_tokens_per_s`` and ``fraction_of_ceiling``;
- ``--rows R``: the step of a speculative verify step, R rows of the sequence at consecutive
  positions; ``tokens_per_s`` and ``fraction_of_ceiling`` then count R tokens a step (every
  draft accepted) against the single-token ceiling (above 1: faster than plain decode can be),
  and ``sync_wall_us`` is the step with the host reading its tokens before the next (as a
  verify step must; ``step_wall_us`` runs them back to back).
- ``--temperature T`` (with ``--top-k``, ``--top-p``): the steps sample (seed 0) instead of
  picking greedily, as a real model's ``generation_config.json`` makes ``infer`` do (Qwen3:
  0.6, top-k 20, top-p 0.95); the sampling's kernels are among the ``other_kernels``.

Kernel names come from the CUDA kernel events that the profiler (CUPTI) records inside graph
replays. If a graph replay shows fewer than one kernel per layer (copies only), the eager step
is profiled instead (``mode: eager``, with a ``note``): the same kernels, so their times and
``gpu_busy_us`` still hold, and ``step_wall_us`` stays the graph's (``gpu_span_us`` then
includes Python's launch overhead).
On the CPU (the CI smoke test) only CPU activities exist: the "kernels" are aten ops by self time,
``activity: cpu``, and no ceiling.

    PYTHONPATH=. python3 benchmarks/profile_decode.py --ckpt /tmp/qwen3-8b-random \\
        --ctx 4096,32768 --kv bf16,int8
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from dataclasses import replace
from types import SimpleNamespace

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.kernel_gaps import idle_gaps
from infer import Engine, EngineConfig, SamplingParams
from infer.meta import grow_pages
from kernels import pdl_chain
from models.checkpoint_folder import read_config
from models.context import plan_context
from models.loader import load_model

VOCAB_LIMIT = 151669  # Qwen3: ids above are padding, never sampled
GREEDY = SamplingParams(temperature=0.0)  # the steps' default sampling
GRAPH_NOTE = ("no kernel events under CUDA graph replay: the kernels are the eager step's "
              "(the same kernels, launched from Python); step_wall_us is the graph's")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class DecodeSteps:
    """Decode steps of one sequence through the engine's runner, fed back their own tokens.
    ``session`` holds the prefilled prompt; each step grows its pages as ``infer/decode_loop.py``
    does (its ids are not recorded: reset the session after).

    With ``rows`` > 1 a step is a speculative verify step's layout (``infer/verify_step.py``):
    ``rows`` one-query rows of the sequence at consecutive positions, fed the previous step's
    ``rows`` tokens, and the next step starts ``rows`` positions on (every draft accepted).
    With ``sync`` the host reads each step's tokens before it enqueues the next, as a verify
    step must (the drafts continue them); without, steps run back to back."""

    def __init__(self, eng: Engine, session, first_token: int, rows: int = 1,
                 sync: bool = False, sampling: SamplingParams | None = None):
        self.eng, self.session, self.rows, self.sync = eng, session, rows, sync
        self.runner = eng.graph_runner()
        self.ticket, _, _ = self.runner.begin(sampling or GREEDY, [session._pages])
        self.pos = session.num_cached
        self.tok = torch.full((rows,), first_token, dtype=torch.int64, device=eng.device)

    def run(self, n: int) -> None:
        pages = self.session._pages
        for _ in range(n):
            grow_pages(self.eng.pool, pages, self.pos + self.rows)
            rows = [(pages, self.pos + r) for r in range(self.rows)]
            if self.sync:
                self.runner.io.tokens_to_host(self.runner.step(self.ticket, self.tok, rows))
                self.tok = self.runner.io.host_tokens(self.rows)
            else:
                self.tok = self.runner.step(self.ticket, self.tok, rows)
            self.pos += self.rows


def step_wall_us(steps: DecodeSteps, n: int) -> float:
    """Mean microseconds per step over ``n`` back-to-back steps (CUDA events; host clock on the
    CPU)."""
    dev = steps.eng.device
    if dev.type != "cuda":
        t0 = time.perf_counter()
        steps.run(n)
        return (time.perf_counter() - t0) * 1e6 / n
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    _sync(dev)
    start.record()
    steps.run(n)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / n


def profiled_events(steps: DecodeSteps, n: int, cuda: bool) -> list:
    """The profiler's kernel events (CUDA) or op events (CPU) of ``n`` steps."""
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        steps.run(n)
        _sync(steps.eng.device)
    want = torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU
    return [e for e in prof.events() if e.device_type == want]


def _has_step_kernels(events: list, n: int, layers: int) -> bool:
    """Whether the events hold the step's kernels (at least one per layer per step), not only
    the copies around a graph replay."""
    kernels = [e for e in events if not e.name.startswith(("Memcpy", "Memset"))]
    return len(kernels) >= n * layers


def summarize(events: list, n: int, layers: int, cuda: bool) -> tuple[list[dict], dict]:
    """Per-name records and the step totals (us per step) from the profiled events."""
    by_name: dict[str, list[float]] = {}
    for e in events:
        dur = e.time_range.elapsed_us() if cuda else e.self_cpu_time_total
        by_name.setdefault(e.name, []).append(dur)
    if cuda:  # union of the intervals: kernels that overlap count once
        spans = sorted((e.time_range.start, e.time_range.end) for e in events)
        busy, cur_s, cur_e = 0.0, None, None
        for s, t in spans:
            if cur_e is None or s > cur_e:
                busy += 0.0 if cur_e is None else cur_e - cur_s
                cur_s, cur_e = s, t
            else:
                cur_e = max(cur_e, t)
        busy += 0.0 if cur_e is None else cur_e - cur_s
        span = (spans[-1][1] - spans[0][0]) / n if spans else 0.0
    else:  # self times of ops do not overlap
        busy = sum(sum(v) for v in by_name.values())
        span = None
    busy /= n
    kernels = []
    for name, durs in sorted(by_name.items(), key=lambda kv: -sum(kv[1])):
        us = sum(durs) / n
        kernels.append({"name": name, "us_per_step": round(us, 2),
                        "calls_per_step": round(len(durs) / n, 2),
                        "share_of_busy": round(us / busy, 4) if busy else None})
    calls = {k["name"]: len(by_name[k["name"]]) // n for k in kernels}
    per_layer = sum(c // layers for c in calls.values() if c >= layers and c % layers == 0)
    total = len(events) / n
    return kernels, {"gpu_busy_us": round(busy, 2),
                     "kernel_sum_us": round(sum(sum(v) for v in by_name.values()) / n, 2),
                     "gpu_span_us": None if span is None else round(span, 2),
                     "kernels_per_step": round(total, 2),
                     "kernels_per_layer": round(total / layers, 2),
                     "per_layer_kernels": per_layer,
                     "other_kernels": round(total - per_layer * layers, 2)}


def profile_one(eng: Engine, ids: list[int], ctx: int, steps: int, warmup: int,
                rows: int = 1, sampling: SamplingParams | None = None) -> list[dict]:
    """The records of one (cache dtype, context, rows) point: kernels first, then the step line
    (``sync_wall_us``: the same steps with the host reading each one's tokens first).
    ``sampling``: the steps' sampling (None: greedy)."""
    cuda = eng.device.type == "cuda"
    mc = eng.model_config
    session = eng.new_session()
    first = list(session.generate(ids[:ctx], SamplingParams(temperature=0.0, max_new_tokens=1)))
    graphs = eng.cuda_graphs and cuda
    base = {"kv_cache": eng.config.kv_cache, "ctx": ctx, "rows": rows, "steps": steps,
            "activity": "cuda" if cuda else "cpu"}
    run = DecodeSteps(eng, session, first[0], rows, sync=True, sampling=sampling)
    run.run(warmup)  # compile, capture, allocate
    t0 = time.perf_counter()
    run.run(steps)
    sync_wall = (time.perf_counter() - t0) * 1e6 / steps
    run = DecodeSteps(eng, session, first[0], rows, sampling=sampling)
    mean_cached = run.pos + rows * steps // 2  # during the timed steps
    wall = step_wall_us(run, steps)
    events = profiled_events(run, steps, cuda)
    mode, note = ("graph" if graphs else "eager"), None
    if cuda and graphs and not _has_step_kernels(events, steps, mc.num_hidden_layers):
        eng.cuda_graphs = False
        try:
            run = DecodeSteps(eng, session, first[0], rows, sampling=sampling)
            run.run(warmup)
            events = profiled_events(run, steps, cuda)
        finally:
            eng.cuda_graphs = True
        mode, note = "eager", GRAPH_NOTE
    kernels, totals = summarize(events, steps, mc.num_hidden_layers, cuda)
    session.reset()
    dtype_bytes = torch.finfo(eng.dtype).bits // 8
    nbytes = mc.weight_bytes_per_token(dtype_bytes) + \
        rows * mean_cached * eng.pool.bytes_per_position  # each row reads its whole context
    ceiling = eng.ceiling_tokens_per_s(mean_cached)
    ceiling_us = None if ceiling is None else 1e6 / ceiling
    out = [{"what": "kernel", **base, "mode": mode, **k} for k in kernels]
    out += [{"what": "gap", **base, "mode": mode, **g} for g in
            (idle_gaps(events, steps) if cuda else [])]
    out.append({"what": "step", **base, "mode": mode, "timed_mode": "graph" if graphs else "eager",
                "kernel_names": bool(kernels), "note": note,
                "layers": mc.num_hidden_layers, "mean_cached": mean_cached,
                "step_wall_us": round(wall, 2), "sync_wall_us": round(sync_wall, 2), **totals,
                "gap_us": round(wall - totals["gpu_busy_us"], 2),
                "gap_fraction": round(1 - totals["gpu_busy_us"] / wall, 4),
                "tokens_per_s": round(rows * 1e6 / wall, 2), "bytes_per_step": nbytes,
                "ceiling_tokens_per_s": None if ceiling is None else round(ceiling, 2),
                "ceiling_us_per_step": None if ceiling_us is None else round(ceiling_us, 2),
                "fraction_of_ceiling": None if ceiling_us is None
                else round(rows * ceiling_us / wall, 4)})
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    """Run the profile; print and return its JSON records."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", required=True, help="checkpoint folder")
    ap.add_argument("--ctx", default="4096,32768", help="context lengths, comma-separated")
    ap.add_argument("--kv", default="bf16,int8", help="cache dtypes, comma-separated")
    ap.add_argument("--steps", type=int, default=20, help="steps timed, and steps profiled")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--rows", default="1", help="rows per step, comma-separated (1..16; > 1: "
                    "a verify step's layout, one sequence at consecutive positions)")
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="the steps' sampling temperature (0: greedy, the default)")
    ap.add_argument("--top-k", type=int, default=0, help="with --temperature: top-k (0: off)")
    ap.add_argument("--top-p", type=float, default=1.0, help="with --temperature: top-p")
    ap.add_argument("--pdl-chain", choices=("off", "on"), default=None,
                    help="the decode layer's kernels on the PDL chain (kernels/pdl_chain.py); "
                    "default: as shipped")
    args = ap.parse_args(argv)
    if args.pdl_chain is not None:
        pdl_chain.ENABLED = args.pdl_chain == "on"

    if args.steps < 1 or args.warmup < 1:
        ap.error("--steps and --warmup must be >= 1")
    try:
        sampling = SamplingParams(temperature=args.temperature, top_k=args.top_k,
                                  top_p=args.top_p, seed=0)
    except ValueError as e:  # OptionError: the flag and its range
        ap.error(str(e))
    try:
        row_counts = [int(x) for x in args.rows.split(",")]
    except ValueError:
        ap.error(f"--rows takes comma-separated integers, got {args.rows!r}")
    if not all(1 <= r <= 16 for r in row_counts):
        ap.error(f"--rows must be 1..16, got {args.rows}")
    lengths = sorted(int(x) for x in args.ctx.split(","))
    kvs = [x.strip() for x in args.kv.split(",")]
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    ctx = lengths[-1] + 3 * max(row_counts) * (args.steps + args.warmup) + args.page_size
    cfg0 = EngineConfig(args.ckpt, ctx=ctx, device=args.device, page_size=args.page_size,
                        attention="triton" if cuda else "reference", cuda_graphs=cuda)
    mc = plan_context(read_config(args.ckpt), ctx).config  # YaRN past the native length
    model = load_model(args.ckpt, device=dev, dtype=cfg0.torch_dtype, config=mc)
    limit = min(VOCAB_LIMIT, mc.vocab_size)
    tokenizer = SimpleNamespace(stop_ids=set(), vocab_limit=limit)  # never stops early
    rng = random.Random(0)
    ids = [rng.randrange(limit) for _ in range(lengths[-1])]
    records = [{"what": "device", "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
                "torch": torch.__version__, "commit": os.environ.get("INFER_COMMIT", "unknown"),
                "ckpt": args.ckpt, "layers": mc.num_hidden_layers, "hidden": mc.hidden_size,
                "pdl_chain": pdl_chain.ENABLED, "temperature": args.temperature,
                "top_k": args.top_k, "top_p": args.top_p}]
    print(json.dumps(records[0]), flush=True)
    for kv in kvs:
        eng = Engine(replace(cfg0, kv_cache=kv), model=model, tokenizer=tokenizer)
        for n, rows in ((n, r) for n in lengths for r in row_counts):
            for rec in profile_one(eng, ids, n, args.steps, args.warmup, rows, sampling):
                print(json.dumps(rec), flush=True)
                records.append(rec)
        del eng
        if cuda:
            torch.cuda.empty_cache()
    return records


if __name__ == "__main__":
    main()
