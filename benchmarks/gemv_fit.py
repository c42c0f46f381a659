"""Split a decode GEMV's time into a streaming rate and a fixed cost per launch.

Reads ``benchmarks/gemv.py``'s JSON lines and fits, per ``impl`` (the default tile, cuBLAS, each
swept tile), the line ``us = bytes / B + F`` through the projections of one layer (least
squares over qkv_proj, o_proj, gate_up_proj and down_proj: 34 to 201 MB on the 8B):

- ``B`` (``stream_GB/s``): the rate at which a launch streams its weight once it runs, and
  ``stream_frac_bw``, that rate over the run's read bandwidth (its ``bandwidth`` line);
- ``F`` (``fixed_us``): what every launch costs whatever its size (start, the first bytes'
  latency, the pipeline's fill and drain, the last program's tail);
- ``step_fixed_us``: ``F`` x the 4 GEMV launches of a layer x the run's layers, the part of a
  decode step that no tile or streaming rate removes, only fewer launches or launches that
  overlap;
- ``max_resid_us``: the largest miss of the line, to see whether the model holds.

A tile sweep moves ``B`` or ``F``; which of the two is short says what to change. The lm_head is
left out by default (``--lm-head`` puts it in): one matrix streamed in many waves of programs,
it is a different regime from the single-wave layer projections.

    python3 benchmarks/gemv_fit.py out/gemv.jsonl [--lm-head] [--gemvs-per-layer 4]

Prints one JSON line per ``impl`` (``what: gemv_fit``); an ``impl`` with fewer than two distinct
weight sizes gets an ``error`` instead. CPU only, no GPU needed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable

LAYER_PROJECTIONS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``y = a * x + b`` through ``(x, y)`` points; returns ``(a, b)``.

    Raises:
        ValueError: fewer than two distinct ``x``.
    """
    if len({x for x, _ in points}) < 2:
        raise ValueError("needs two or more distinct weight sizes")
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    a = sxy / sxx
    return a, my - a * mx


def read_records(lines: Iterable[str]) -> tuple[float | None, dict[str, list[dict]]]:
    """The run's read bandwidth (GB/s; None without its line) and ``impl -> gemv records`` with a
    time (failed tiles and other lines skipped)."""
    bandwidth, by_impl = None, {}
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        if rec.get("what") == "bandwidth":
            bandwidth = float(rec["GB/s"])
        elif rec.get("what") == "gemv" and "us" in rec:
            by_impl.setdefault(rec["impl"], []).append(rec)
    return bandwidth, by_impl


def fit_impl(records: list[dict], bandwidth: float | None, *, lm_head: bool = False,
             gemvs_per_layer: int = 4, elem_bytes: int = 2) -> dict:
    """One ``gemv_fit`` record for one ``impl``'s records (fields: the module's docstring)."""
    names = LAYER_PROJECTIONS + (("lm_head",) if lm_head else ())
    used = [r for r in records if r["proj"] in names]
    points = [(r["n"] * r["k"] * elem_bytes, float(r["us"])) for r in used]
    out = {"what": "gemv_fit", "impl": records[0]["impl"] if records else None,
           "projections": [r["proj"] for r in used]}
    try:
        slope, fixed = fit_line(points)
    except ValueError as e:
        return out | {"error": str(e)}
    if slope <= 0:
        return out | {"error": "time does not grow with the weight's size"}
    stream = 1e-3 / slope  # bytes per us -> GB/s
    layers = max((int(r.get("layers", 1)) for r in used if r["proj"] != "lm_head"), default=1)
    out |= {"stream_GB/s": stream, "fixed_us": fixed,
            "max_resid_us": max(abs(y - (slope * x + fixed)) for x, y in points),
            "step_fixed_us": fixed * gemvs_per_layer * layers, "layers": layers}
    if bandwidth:
        out["stream_frac_bw"] = stream / bandwidth
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsonl", help="benchmarks/gemv.py's output")
    ap.add_argument("--lm-head", action="store_true", help="fit the lm_head too")
    ap.add_argument("--gemvs-per-layer", type=int, default=4,
                    help="GEMV launches a decode layer runs (qkv, o, gate/up, down)")
    args = ap.parse_args(argv)
    try:
        with open(args.jsonl, encoding="utf-8") as f:
            bandwidth, by_impl = read_records(f)
    except (OSError, ValueError) as e:
        print(f"gemv_fit: cannot read {args.jsonl}: {e}", file=sys.stderr)
        return 2
    if not by_impl:
        print(f"gemv_fit: no timed gemv lines in {args.jsonl}", file=sys.stderr)
        return 2
    for records in by_impl.values():
        rec = fit_impl(records, bandwidth, lm_head=args.lm_head,
                       gemvs_per_layer=args.gemvs_per_layer)
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in rec.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
