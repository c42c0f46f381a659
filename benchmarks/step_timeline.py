"""Two kinds of decode step side by side, kernel by kernel: where one falls behind the other.

Issue 16: a sampled step (Qwen3's temperature 0.6, top-k 20, top-p 0.95) ran ~60 us longer than a
greedy one on the 0.6B at 4k, in separate processes, though only the last two kernels differ.
This runs both on one engine in one process, alternating (``--rounds``; both graphs are
captured before the first round, as a capture that samples slows every replay after it), times
each (``step_wall_us``, CUDA events, no profiler), profiles as many steps again, cuts each profile
into steps (every step launches the same kernels in the same order) and lines the two up by
kernel name (``difflib``'s matching runs). For each position: the mean start after the step's
first kernel, the duration, and the idle time before it (after every earlier kernel of the step
has ended).

JSON lines (``what``):

- ``mode``: a mode's round: ``step_wall_us``, ``period_us`` (the mean start-to-start of steps
  in the profile), ``kernels_per_step``, ``kernel_sum_us`` (the kernels' durations added up:
  kernels that overlap on the PDL chain count twice);
- ``drift``: the positions where the second mode's start, relative to the first's, grows the
  most (``grow_us``), with the kernel there and the duration/idle differences that make it;
- ``by_kernel``: the growth summed per kernel name, and the duration difference per name;
- ``summary``: how many positions line up, the kernels of one mode only, the drift at the last
  matched kernel and each step's span.

    PYTHONPATH=. python3 benchmarks/step_timeline.py --ckpt /tmp/q0.6b --ctx 4096 --kv bf16
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import random
from types import SimpleNamespace

import torch

from benchmarks.profile_decode import VOCAB_LIMIT, DecodeSteps, profiled_events, step_wall_us
from infer import Engine, EngineConfig, SamplingParams
from models.checkpoint_folder import read_config
from models.loader import load_model

QWEN3_SAMPLED = dict(temperature=0.6, top_k=20, top_p=0.95)


def step_positions(events: list, steps: int) -> list[dict]:
    """Per position of a step: ``name``, mean ``start``, ``dur`` and ``idle`` (us).

    Args:
        events: profiler events of ``steps`` consecutive steps, each with ``name`` and
            ``time_range.start`` / ``.end`` (us), in any order.
        steps: how many steps they cover (>= 1).

    Raises:
        ValueError: the events do not split into ``steps`` steps of the same kernel sequence.
    """
    spans = sorted((e.time_range.start, e.time_range.end, e.name) for e in events)
    if steps < 1 or not spans or len(spans) % steps:
        raise ValueError(f"{len(spans)} events do not split into {steps} equal steps")
    per = len(spans) // steps
    cut = [spans[s * per:(s + 1) * per] for s in range(steps)]
    names = [n for _, _, n in cut[0]]
    if any([n for _, _, n in c] != names for c in cut[1:]):
        raise ValueError("the steps launch different kernel sequences")
    out = [{"name": n, "start": 0.0, "dur": 0.0, "idle": 0.0} for n in names]
    for c in cut:
        t0, reach = c[0][0], c[0][0]
        for rec, (s, e, _) in zip(out, c, strict=True):
            rec["start"] += (s - t0) / steps
            rec["dur"] += (e - s) / steps
            rec["idle"] += max(0.0, s - reach) / steps
            reach = max(reach, e)
    return out


def compare(a: list[dict], b: list[dict], top: int = 12) -> dict:
    """Line up two steps' positions (``step_positions``) by kernel name (the longest matching
    runs, ``difflib``): ``drift`` (the ``top`` matched positions where b's start minus a's
    grows most), ``by_kernel`` (that growth and the duration difference summed per name),
    ``matched`` (how many positions line up), ``only_a`` / ``only_b`` (the unmatched kernels:
    name, start, duration), ``drift_us`` (b's lag at the end of the last matched kernel)."""
    pairs = [(blk.a + k, blk.b + k) for blk in
             difflib.SequenceMatcher(None, [p["name"] for p in a], [p["name"] for p in b],
                                     autojunk=False).get_matching_blocks()
             for k in range(blk.size)]
    rows, by_name, lag, prev = [], {}, 0.0, None
    for i, j in pairs:
        d = b[j]["start"] - a[i]["start"]
        grow, lag = d - lag, d
        rows.append({"pos_a": i, "pos_b": j, "name": a[i]["name"], "after": prev,
                     "grow_us": round(grow, 2),
                     "idle_diff_us": round(b[j]["idle"] - a[i]["idle"], 2),
                     "dur_diff_us": round(b[j]["dur"] - a[i]["dur"], 2)})
        prev = a[i]["name"]
        k = by_name.setdefault(a[i]["name"], {"grow_us": 0.0, "dur_diff_us": 0.0, "count": 0})
        k["grow_us"] += grow
        k["dur_diff_us"] += b[j]["dur"] - a[i]["dur"]
        k["count"] += 1
    matched_a = {i for i, _ in pairs}
    matched_b = {j for _, j in pairs}

    def only(x, matched):
        return [{"pos": n, "name": p["name"], "start": round(p["start"], 2),
                 "dur": round(p["dur"], 2)} for n, p in enumerate(x) if n not in matched]

    end_a = max((a[i]["start"] + a[i]["dur"] for i, _ in pairs), default=0.0)
    end_b = max((b[j]["start"] + b[j]["dur"] for _, j in pairs), default=0.0)
    return {"matched": len(pairs), "drift_us": round(end_b - end_a, 2),
            "only_a": only(a, matched_a), "only_b": only(b, matched_b),
            "drift": sorted(rows, key=lambda r: -abs(r["grow_us"]))[:top],
            "by_kernel": sorted(({"name": n, **{k: round(v, 2) if isinstance(v, float) else v
                                                for k, v in r.items()}}
                                 for n, r in by_name.items()), key=lambda r: -abs(r["grow_us"]))}


def prefilled(ckpt: str, ctx: int, kv: str, device: torch.device, room: int):
    """``(engine, session, first token)``: the checkpoint loaded on ``device`` (Triton attention
    and CUDA graphs on CUDA, the reference attention eagerly elsewhere), a context of ``ctx`` +
    ``room`` positions, and a session holding a random ``ctx``-token prompt (seed 0), prefilled
    and its first token picked greedily."""
    cuda = device.type == "cuda"
    cfg = EngineConfig(ckpt, ctx=ctx + room, device=str(device), kv_cache=kv,
                       attention="triton" if cuda else "reference", cuda_graphs=cuda)
    mc = read_config(ckpt)
    model = load_model(ckpt, device=device, dtype=cfg.torch_dtype, config=mc)
    limit = min(VOCAB_LIMIT, mc.vocab_size)
    eng = Engine(cfg, model=model, tokenizer=SimpleNamespace(stop_ids=set(), vocab_limit=limit))
    rng = random.Random(0)
    session = eng.new_session()
    first = list(session.generate([rng.randrange(limit) for _ in range(ctx)],
                                  SamplingParams(temperature=0.0, max_new_tokens=1)))[0]
    return eng, session, first


def _period(events: list, steps: int) -> float:
    starts = sorted(e.time_range.start for e in events)
    per = len(starts) // steps
    firsts = [starts[s * per] for s in range(steps)]
    return (firsts[-1] - firsts[0]) / max(1, steps - 1)


def main(argv: list[str] | None = None) -> list[dict]:
    """Run both modes, alternating; print and return the JSON records."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", required=True, help="checkpoint folder")
    ap.add_argument("--ctx", type=int, default=4096, help="prompt length")
    ap.add_argument("--kv", default="bf16", choices=["bf16", "int8"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dump", help="also write every position of every mode and round here "
                    "(JSON)")
    args = ap.parse_args(argv)
    if min(args.steps, args.warmup, args.rounds) < 1:
        ap.error("--steps, --warmup and --rounds must be >= 1")
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    room = 2 * args.rounds * (args.steps * 2 + 2 * args.warmup) + 128
    eng, session, first = prefilled(args.ckpt, args.ctx, args.kv, dev, room)
    modes = {"greedy": SamplingParams(temperature=0.0),
             "sampled": SamplingParams(seed=0, **QWEN3_SAMPLED)}
    records = [{"what": "device", "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
                "commit": os.environ.get("INFER_COMMIT", "unknown"), "ckpt": args.ckpt,
                "ctx": args.ctx, "kv_cache": args.kv, "steps": args.steps}]
    pos: dict[str, list] = {}
    for sp in modes.values():  # both graphs first: a capture that samples slows every later
        DecodeSteps(eng, session, first, sampling=sp).run(args.warmup)  # replay (BENCHMARKS.md)
    for r in range(args.rounds):
        for mode, sp in modes.items():
            run = DecodeSteps(eng, session, first, sampling=sp)
            run.run(args.warmup)
            wall = step_wall_us(run, args.steps)
            events = profiled_events(run, args.steps, cuda)
            try:
                p = step_positions(events, args.steps)
            except ValueError as e:
                print(json.dumps({"what": "error", "mode": mode, "round": r, "error": str(e)}))
                return records
            pos.setdefault(mode, []).append(p)
            records.append({"what": "mode", "mode": mode, "round": r,
                            "step_wall_us": round(wall, 2),
                            "period_us": round(_period(events, args.steps), 2),
                            "kernels_per_step": len(p),
                            "kernel_sum_us": round(sum(q["dur"] for q in p), 2)})
    for r in range(args.rounds):
        c = compare(pos["greedy"][r], pos["sampled"][r])
        g_end = max(q["start"] + q["dur"] for q in pos["greedy"][r])
        s_end = max(q["start"] + q["dur"] for q in pos["sampled"][r])
        records += [{"what": "drift", "round": r, **d} for d in c["drift"]]
        records += [{"what": "by_kernel", "round": r, **k} for k in c["by_kernel"][:16]]
        records.append({"what": "summary", "round": r, "matched": c["matched"],
                        "only_greedy": c["only_a"], "only_sampled": c["only_b"],
                        "drift_us": c["drift_us"], "span_greedy_us": round(g_end, 2),
                        "span_sampled_us": round(s_end, 2)})
    if args.dump:
        with open(args.dump, "w") as f:
            json.dump(pos, f)
    for rec in records:
        print(json.dumps(rec), flush=True)
    return records


if __name__ == "__main__":
    main()
