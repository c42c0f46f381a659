"""Attention kernel benchmark on one GPU: our paged kernels side by side with torch SDPA.

Shape: Qwen3-8B attention (32 query heads, 8 KV heads, head_dim 128), batch 1, page size 64, pages
in scrambled order, fresh random data (never zeros). Pools in BF16 or INT8 (codes + float32 scale
per position and KV head). Timings are medians of CUDA-event timed runs, each after a cold-L2 read
flush (``benchmarks/timing.py``), so the cache is read from HBM every time. Decode is timed three
ways (the ``timing`` field):

- ``graph``: one decode-attention call (ours: stage 1 + combine; or SDPA) captured alone in a CUDA
  graph, one flush before each replay. The figure includes one graph launch and the start-up of
  one isolated kernel pair, which a real decode step pays once per step, not per layer.
- ``eager``: the same call as launched from Python (host launch overhead included).
- ``graph_layers`` (``--layers L``, default 36 = Qwen3-8B's layer count; 0 or 1 turns it off): L
  distinct layers, each its own pool (random K/V, INT8 scales), q and preallocated output; one
  scrambled page table and one ``seq_lens`` for all L layers (as in the engine, where every layer's
  pool uses the sequence's page table) and one ``DecodeWorkspace`` shared by the L calls (they run
  in sequence, as in the engine). ONE CUDA graph runs the call for layer 0, 1, ..., L-1 in order;
  one cold-L2 read flush precedes each replay, and layer i's cache was last read one replay earlier
  (at least 512 MiB of flush ago), so every layer reads its cache from HBM. ``us = replay time /
  L``: per-layer kernel time plus the in-graph gaps between consecutive kernels, with one graph
  launch amortized over L layers. ``replay_us`` is the whole replay. In the model other kernels sit
  between two attention layers; here attention follows attention, so the gaps are those of two
  dependent kernels in one graph. ``impl=ours_stage1`` is the same graph with stage 1 alone
  (``_decode_stage1``, no combine): ``ours - ours_stage1`` is the combine's in-graph cost per
  layer. If L pools would exceed ``--layers-max-bytes`` (default 48e9 B) L is reduced for that
  case; the record's ``layers`` is the L used. Each case's pools are freed before the next.
  ``impl=read`` is the plain-read peer, timed the same way (its own graph of L reads):
  ``torch.sum`` over L distinct bf16 tensors holding the case's cache bytes (``bytes`` below),
  i.e. what merely reading those bytes costs per layer at this size, start-up and tail included.
  It is the peer for INT8, which SDPA cannot read.

Printed, one JSON line each (also written to ``--out``), then a short human table:

- ``bandwidth``: the card's measured read bandwidth, as the engine measures it for its ceiling
  (``benchmarks.timing.read_bandwidth``: a float32 sum over 2 GiB), bytes / median time. The
  ``frac_bw`` of every decode line is relative to this figure.
- ``decode`` (one new token at ``positions`` cached positions, i.e. one layer's attention of one
  decode step): ``impl=ours`` is ``kernels.decode_attention.decode_attention`` (split-KV + combine,
  preallocated workspace) on the paged pool; ``impl=sdpa`` is ``F.scaled_dot_product_attention``
  on a contiguous bf16 cache ``[1, 8, S, 128]`` with ``enable_gqa=True`` (default backend).
  ``bytes`` is what the kernel must read from the cache: keys + values (``S*8*128*2`` elements at
  2 B for BF16 or 1 B for INT8) plus, for INT8, the float32 key and value scales (``S*8*2*4`` B).
  ``GB/s = bytes / time``; queries, outputs and page-table reads are not counted. ``us`` is
  microseconds per call (per layer for ``graph_layers``); ``frac_bw = GB/s / bandwidth``.
  ``num_splits`` is the split count passed (``"default"``: the launcher's). ``opts`` (ours only)
  holds ``--decode-opts``, a JSON object of ``num_splits`` (it wins over the swept split counts)
  and ``kernels.tiles.DecodeTiles`` fields, which replace those of the default tiles passed to
  ``decode_attention`` and ``_decode_stage1``. SDPA writes into a
  preallocated output with ``copy_`` (SDPA has no ``out=``), so its figures include that copy.
  A case that fails is one record with ``error`` (the message) instead of the figures.
- ``prefill`` (whole-prompt causal prefill, chunk = all ``S`` positions): ``impl=ours`` is
  ``kernels.prefill_attention.prefill_attention`` on the paged pool; ``sdpa_flash`` and
  ``sdpa_cudnn`` are SDPA restricted to the FlashAttention-2 and cuDNN backends on contiguous bf16
  tensors (``enable_gqa=True``, or K/V expanded to 32 heads if the backend refuses GQA; the line
  says which). FLOPs count every attended (query, key) pair exactly once: query ``i`` attends
  ``i + 1`` keys, so pairs = S(S+1)/2 and FLOPs = 4 * pairs * head_dim * 32 (2 for Q.K^T and 2 for
  P.V per pair and head); the masked half of the square is not counted. Lengths above
  ``--prefill-max`` (default 32768) time one chunk of ``--chunk`` (4096) new tokens after
  ``S - chunk`` cached positions instead (ours only: SDPA's ``is_causal`` cannot offset queries),
  FLOPs = 4 * (chunk * (S - chunk) + chunk(chunk+1)/2) * head_dim * 32.

Usage (on the GPU machine, from the repository root)::

    python benchmarks/attention.py                       # 4k, 32k, 128k; bf16 and int8; both
    python benchmarks/attention.py --what prefill --sweep --out prefill.jsonl
    python benchmarks/attention.py --lengths 32768 --dtypes int8 --what decode
    python benchmarks/attention.py --what decode --layers 36 --decode-opts '{"int8_magic": 2}'

``--sweep`` adds prefill tile configurations (BLOCK_M 32/64/128, BLOCK_N, warps, stages, pointer
or TMA loads) and decode split counts (single call and layered), one line each, to pick the
launchers' defaults from. The prefill ``config`` field is ``[BLOCK_M, BLOCK_N, num_warps,
num_stages, tma]`` (fields of ``kernels.tiles.PrefillTiles``) or ``"default"`` (the launcher's
heuristic). ``--decode-opts`` holds ``num_splits`` and/or ``kernels.tiles.DecodeTiles`` fields;
``--prefill-opts`` ``kernels.tiles.PrefillTiles`` fields: the prefill cases then also time the
default tiles with those replaced (``config`` ``{"default+": {...}}``), e.g.
``--what prefill --prefill-opts '{"num_stages": 5}'``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.attention_common import (  # noqa: E402
    error_text,
    parse_lengths,
)
from benchmarks.attention_decode import (  # noqa: E402
    SWEEP_SPLITS,
    bench_decode,
    bench_decode_layers,
)
from benchmarks.attention_prefill import SWEEP_PREFILL, bench_prefill  # noqa: E402
from benchmarks.timing import READ_BANDWIDTH_BYTES, read_bandwidth  # noqa: E402


def emit(rec: dict, records: list, out) -> None:
    records.append(rec)
    line = json.dumps(rec)
    print(line, flush=True)
    if out is not None:
        out.write(line + "\n")
        out.flush()


def measure_bandwidth() -> dict:
    nbytes = READ_BANDWIDTH_BYTES  # the engine's probe (benchmarks.timing.read_bandwidth)
    gbps = read_bandwidth()
    return {"what": "bandwidth", "bytes": nbytes, "us": nbytes / gbps / 1e3, "GB/s": gbps}


def table(records: list) -> str:
    """The human summary: one row per record. Decode rows name their timing after the split
    count: ``graph``, ``eager`` or ``graph_layers xL`` (per-layer figures of an L-layer graph)."""
    rows = [f"{'what':9} {'impl':11} {'kv':5} {'positions':>9} {'new':>6} {'config':26} {'us':>10} "
            f"{'GB/s':>8} {'%bw':>6} {'TFLOP/s':>8}"]
    for r in records:
        if r["what"] == "bandwidth":
            rows.append(f"{'bandwidth':9} {'x.sum()':11} {'':5} {'':>9} {'':>6} {'':26} "
                        f"{r['us']:10.1f} {r['GB/s']:8.0f}")
            continue
        cfg = r.get("config", r.get("num_splits", r.get("gqa", "")))
        if isinstance(cfg, list):  # a swept prefill tile: [BLOCK_M, BLOCK_N, warps, stages, tma]
            bm, bn, nw, st, tma = cfg
            cfg = f"{bm}x{bn} w{nw} s{st}{' tma' if tma else ''}"
        elif isinstance(cfg, dict):  # --prefill-opts: {"default+": {field: value}}
            cfg = "default+" + ",".join(f"{k}={v}" for k, v in cfg["default+"].items())
        timing = r.get("timing", "")
        if timing == "graph_layers":
            timing += f" x{r.get('layers', '?')}"
        cfg = f"{cfg} {timing}".strip()
        if "error" in r:
            rows.append(f"{r['what']:9} {r['impl']:11} {r['kv']:5} {r['positions']:>9} "
                        f"{'':>6} {cfg:26.26} ERROR {r['error'][:60]}")
            continue
        gbs = f"{r['GB/s']:8.0f}" if "GB/s" in r else " " * 8
        frac = f"{100 * r['frac_bw']:6.1f}" if "frac_bw" in r else " " * 6
        tf = f"{r['TFLOP/s']:8.1f}" if "TFLOP/s" in r else ""
        rows.append(f"{r['what']:9} {r['impl']:11} {r['kv']:5} {r['positions']:>9} "
                    f"{r['new_tokens']:>6} {cfg:26.26} {r['us']:10.1f} {gbs} {frac} {tf}")
    if any(r.get("timing") == "graph_layers" for r in records):
        rows.append("graph_layers xL: us, GB/s, %bw per layer = one replay of an L-layer graph "
                    "/ L (cold L2 per replay)")
    opts = {json.dumps(r["opts"]) for r in records if r.get("opts")}
    if opts:
        rows.append(f"ours decode options (--decode-opts): {', '.join(sorted(opts))}")
    return "\n".join(rows)


def guarded(records, base: dict):
    """``records`` (a generator of records) with an exception that escapes it, e.g. out of memory
    while building a pool, turned into one last ``error`` record: the run goes on."""
    err = None
    try:
        yield from records
    except Exception as e:
        err = error_text(e)
    if err is not None:
        yield {**base, "impl": "all", "error": err}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="4096,32768,131072",
                    help="positions, comma-separated")
    ap.add_argument("--dtypes", default="bf16,int8", help="KV pool dtypes: bf16,int8")
    ap.add_argument("--what", default="decode,prefill", help="decode,prefill")
    ap.add_argument("--prefill-max", type=int, default=32768,
                    help="whole-prompt prefill up to this length; longer ones time one chunk")
    ap.add_argument("--chunk", type=int, default=4096,
                    help="new tokens of the chunk timed at lengths > --prefill-max (0: skip)")
    ap.add_argument("--sweep", action="store_true", help="also sweep tile configs / splits")
    ap.add_argument("--rep-ms", type=int, default=200, help="repetitions per figure = rep_ms / 2")
    ap.add_argument("--layers", type=int, default=36,
                    help="decode only: also time L distinct layers in one CUDA graph, per-layer "
                         "figures (timing graph_layers; default 36 = Qwen3-8B; 0 or 1: off)")
    ap.add_argument("--layers-max-bytes", type=float, default=48e9,
                    help="fewer layers for a case whose L pools (or SDPA caches) would exceed "
                         "this many bytes (default 48e9)")
    ap.add_argument("--decode-opts", default="{}",
                    help="JSON object: num_splits and/or DecodeTiles fields for our "
                         "decode_attention and _decode_stage1, e.g. '{\"int8_magic\": 2}' "
                         "(default {})")
    ap.add_argument("--prefill-opts", default="{}",
                    help="JSON object of PrefillTiles fields: prefill also runs the default "
                         "tiles with these replaced, e.g. '{\"num_stages\": 5}' (an A/B in "
                         "one run)")
    ap.add_argument("--out", default=None, help="also write the JSON lines to this file")
    args = ap.parse_args()
    parsed = []
    for flag, text in (("--decode-opts", args.decode_opts), ("--prefill-opts", args.prefill_opts)):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            sys.exit(f"{flag} is not valid JSON: {e}")
        if not isinstance(value, dict):
            sys.exit(f"{flag} must be a JSON object, got {text!r}")
        parsed.append(value)
    opts, prefill_opts = parsed
    if args.layers < 0 or args.layers_max_bytes <= 0:
        sys.exit("--layers must be >= 0 and --layers-max-bytes > 0")
    lengths = parse_lengths(args.lengths)
    if not torch.cuda.is_available():
        sys.exit("benchmarks/attention.py needs a CUDA GPU")
    dtypes = [x for x in args.dtypes.split(",") if x]
    what = set(args.what.split(","))
    if bad := [d for d in dtypes if d not in ("bf16", "int8")]:
        sys.exit(f"unknown --dtypes {bad}: use bf16 and/or int8")
    torch.manual_seed(0)
    out = open(args.out, "w") if args.out else None
    records: list = []
    import triton
    # INFER_COMMIT wins: a copied working tree (a remote GPU machine) may carry a stale .git
    commit = os.environ.get("INFER_COMMIT")
    try:
        commit = commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                          capture_output=True, text=True,
                                          cwd=Path(__file__).parent).stdout.strip() or None
    except OSError:
        commit = None
    emit({"what": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__,
          "triton": triton.__version__, "commit": commit,
          "sms": torch.cuda.get_device_properties(0).multi_processor_count,
          "layers": args.layers, "decode_opts": opts}, [], out)
    bw_rec = measure_bandwidth()
    emit(bw_rec, records, out)
    bw = bw_rec["GB/s"]
    for kv in dtypes:
        for s in lengths:
            if "decode" in what:
                # a num_splits in --decode-opts overrides every split count: time it once
                sweep = args.sweep and "num_splits" not in opts
                splits = [None] + (SWEEP_SPLITS if sweep else [])
                base = {"what": "decode", "kv": kv, "positions": s, "new_tokens": 1}
                for rec in guarded(bench_decode(s, kv, bw, splits, opts, args.rep_ms),
                                   {**base, "timing": "graph,eager"}):
                    emit(rec, records, out)
                torch.cuda.empty_cache()  # the single-call pool is gone with its generator
                if args.layers > 1:
                    for rec in guarded(bench_decode_layers(s, kv, bw, splits, opts, args.layers,
                                                           args.layers_max_bytes, args.rep_ms),
                                       {**base, "timing": "graph_layers"}):
                        emit(rec, records, out)
                    torch.cuda.empty_cache()
            if "prefill" in what:
                configs = [None] + ([prefill_opts] if prefill_opts else []) + \
                    (SWEEP_PREFILL if args.sweep else [])
                n_new = s if s <= args.prefill_max else min(s, args.chunk)
                if n_new > 0:
                    base = {"what": "prefill", "kv": kv, "positions": s, "new_tokens": n_new}
                    for rec in guarded(bench_prefill(s, n_new, kv, configs,
                                                     max(args.rep_ms, 100)), base):
                        emit(rec, records, out)
            torch.cuda.empty_cache()
    print()
    print(table(records))
    if out is not None:
        out.close()


if __name__ == "__main__":
    main()
