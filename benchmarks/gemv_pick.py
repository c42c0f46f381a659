"""Pick GEMV tiles per weight class from a ``benchmarks/gemv.py --tiles`` sweep, for an in-step A/B.

Reads the sweep's JSON lines (``what: gemv``; ``impl`` ``ours`` is the default tile, ``ours_{tile}``
a swept one, ``BLOCK_N x BLOCK_K x STAGES[x WARPS]``) and prints one JSON object for
``benchmarks/decode_e2e.py --decode-tiles``: per weight class of ``kernels.tiles.gemv_tiles``, the
swept tile that costs least in a decode step, where it beats the default by more than
``--margin`` (default 1 %, the run-to-run spread of the isolated figures); ``{}`` when none does.

The cost of a class is what a decode step spends in it, from per-layer microseconds:

- ``gemv_wide``: ``layers`` x qkv_proj + lm_head (lm_head once a step; left out if the sweep
  stopped before it);
- ``gemv_narrow``: o_proj + down_proj;
- ``gemv_swiglu``: gate_up_proj (its swept tile runs through ``gemv_swiglu``, as the model runs it).

A class whose default or tiles lack a projection (a sweep cut short, a tile that failed to
compile: its line has ``error``, no ``us``) is judged only on what every candidate has.

    python3 benchmarks/gemv_pick.py out/gemv.jsonl [--layers 36] [--margin 0.01]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable

CLASSES = {"gemv_wide": ("qkv_proj", "lm_head"), "gemv_narrow": ("o_proj", "down_proj"),
           "gemv_swiglu": ("gate_up_proj",)}
# what a class cannot be judged without: all but the lm_head, which a cut sweep may lack
REQUIRED = {cls: tuple(p for p in projs if p != "lm_head") for cls, projs in CLASSES.items()}


def timings(lines: Iterable[str]) -> dict[str, dict[str, float]]:
    """``impl -> proj -> us`` from the sweep's JSON lines (other lines and failed tiles skipped)."""
    out: dict[str, dict[str, float]] = {}
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        if rec.get("what") == "gemv" and "us" in rec:
            out.setdefault(rec["impl"], {})[rec["proj"]] = float(rec["us"])
    return out


def tile_fields(impl: str) -> dict[str, int]:
    """``ours_16x256x8x8`` -> ``GemvTiles`` fields (warps 4 when not given).

    Raises:
        ValueError: not ``ours_`` followed by 3 or 4 integers joined by ``x``.
    """
    parts = impl.removeprefix("ours_").split("x") if impl.startswith("ours_") else []
    if len(parts) not in (3, 4) or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a swept tile: {impl!r}")
    bn, bk, stages, *warps = map(int, parts)
    return {"block_n": bn, "block_k": bk, "num_stages": stages,
            "num_warps": warps[0] if warps else 4}


def class_cost(us: dict[str, float], projs: tuple[str, ...], layers: int) -> float:
    """Microseconds a step spends in ``projs`` (lm_head once, the others once a layer)."""
    return sum(us[p] * (1 if p == "lm_head" else layers) for p in projs)


def pick(times: dict[str, dict[str, float]], layers: int = 36, margin: float = 0.01
         ) -> tuple[dict[str, dict[str, int]], list[dict]]:
    """The tiles to try per class, and one record per class of what was compared.

    Returns ``(overrides, records)``: ``overrides`` maps a class to ``GemvTiles`` fields (only
    classes whose best tile beats the default by more than ``margin``); each record names the
    class, the default's and the best tile's step cost in us, and the tile.
    """
    default = times.get("ours", {})
    swept = {impl: us for impl, us in times.items()
             if impl.startswith("ours_") and "split" not in impl}
    overrides, records = {}, []
    for cls, projs in CLASSES.items():
        if not all(p in default for p in REQUIRED[cls]):
            continue
        ready = {impl: us for impl, us in swept.items() if all(p in us for p in REQUIRED[cls])}
        have = tuple(p for p in projs
                     if p in default and all(p in us for us in ready.values()))
        cands = sorted((class_cost(us, have, layers), impl) for impl, us in ready.items())
        base = class_cost(default, have, layers)
        rec = {"class": cls, "projections": list(have), "default_us": round(base, 2)}
        if cands:
            best_us, best = cands[0]
            rec |= {"best": best, "best_us": round(best_us, 2),
                    "change": round(best_us / base - 1, 4)}
            if best_us < (1 - margin) * base:
                overrides[cls] = tile_fields(best)
        records.append(rec)
    return overrides, records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep", help="benchmarks/gemv.py's JSON lines (a file)")
    ap.add_argument("--layers", type=int, default=36, help="decoder layers (the 8B: 36)")
    ap.add_argument("--margin", type=float, default=0.01, help="least gain over the default")
    args = ap.parse_args()
    if args.layers < 1 or not 0 <= args.margin < 1:
        ap.error("--layers must be >= 1 and --margin in [0, 1)")
    try:
        with open(args.sweep, encoding="utf-8") as f:
            overrides, records = pick(timings(f), args.layers, args.margin)
    except (OSError, ValueError) as e:
        sys.exit(f"gemv_pick: {e}")
    for rec in records:
        print(json.dumps(rec), file=sys.stderr)
    print(json.dumps(overrides))


if __name__ == "__main__":
    main()
