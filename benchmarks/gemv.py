"""Decode-step projections on one GPU: ``kernels/gemv.py`` side by side with cuBLAS (``F.linear``).

Shapes: a Qwen3 checkpoint's decode projections for one token (default Qwen3-8B: qkv_proj 6144 x
4096, o_proj 4096 x 4096, gate_up_proj 24576 x 4096, down_proj 4096 x 12288, lm_head 151936 x 4096),
bfloat16, random weights. Every figure is per layer inside ONE CUDA graph that runs the call for
``--layers`` distinct weight copies back to back (36 = Qwen3-8B's layers; the lm_head is one
matrix, timed alone), one cold-L2 read flush before each replay (``benchmarks/timing.py``), so every
weight comes from HBM, as in a decode step. ``GB/s`` counts the weight bytes; ``frac_bw`` is that
over the card's read bandwidth measured in the same run, as the engine measures it for its
decode ceiling (``benchmarks.timing.read_bandwidth``).

Printed, one JSON line each:

- ``bandwidth``: the read bandwidth.
- ``gemv``: one projection (``impl`` ``ours`` or ``cublas``), microseconds per layer.
- ``mlp``: the decode MLP after the norm, per layer: ours = ``gemv_swiglu`` (the gate/up GEMV
  with silu(gate) * up in its epilogue), then the down GEMV; cublas = ``F.linear``,
  ``kernels/silu_mul.py``, ``F.linear`` (the model's path for steps of more than 16 tokens).
- ``layer_gemvs``: all projections of a layer (qkv, o, the MLP as above) back to back for every
  layer: the projections' share of a decode step, per layer.

``--rows`` (default 1) is the number of rows of x, the tokens of the step (1 to 16).
``--split-k 2,4,8`` adds ``impl`` ``ours_split{s}`` lines for the plain projections: the default
tiles with ``split_k = s`` (``kernels/gemv.py``'s split-K, not picked by default yet). Expected
on the 0.6B's ``o_proj`` and ``down_proj`` (32 programs by default on 132 SMs): most of the way
from about a third of the bandwidth towards the ~85-90 % the wide weights reach.
``--tiles 16x128x3,32x256x5`` (``BLOCK_N x BLOCK_K x stages``, optionally ``x warps``) adds
``impl`` ``ours_{tile}`` lines: each projection with that tile (split-K as ``gemv_tiles`` would
pick it for that tile on this GPU), the gate/up projection through ``gemv_swiglu`` (its tile is
per half), as the model runs it. The tiles were chosen on the 8B's shapes; this is the sweep for
the small models' narrow ones (``--size 0.6b --layers 28``).

Run: ``python3 benchmarks/gemv.py [--size 8b] [--layers 36] [--rows 1]`` (GPU only; ~1 minute).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import torch
import torch.nn.functional as F
from triton.runtime.errors import OutOfResources

from benchmarks.timing import bench_graph_many, read_bandwidth, read_bandwidth_bf16_sum
from kernels import tiles as tiles_module
from kernels.device import sm_count
from kernels.gemv import gemv, gemv_swiglu
from kernels.silu_mul import silu_mul
from kernels.tiles import GemvTiles, gemv_split_k, gemv_tiles

SIZES = {  # hidden, intermediate, q heads, kv heads, head_dim, vocab
    "0.6b": (1024, 3072, 16, 8, 128, 151936), "1.7b": (2048, 6144, 16, 8, 128, 151936),
    "4b": (2560, 9728, 32, 8, 128, 151936),
    "8b": (4096, 12288, 32, 8, 128, 151936), "14b": (5120, 17408, 40, 8, 128, 151936)}


def emit(rec: dict) -> None:
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in rec.items()}),
          flush=True)


def parse_tiles(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """``16x128x3,32x256x5x8`` -> ``[(label, (block_n, block_k, stages[, warps])), ...]``.

    Raises:
        ValueError: an item that is not 3 or 4 positive integers joined by ``x``.
    """
    out = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        parts = item.split("x")
        if len(parts) not in (3, 4) or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"--tiles item {item!r}: want BLOCK_NxBLOCK_KxSTAGES[xWARPS]")
        out.append((item, tuple(int(p) for p in parts)))
    return out


def tiles_for(spec: tuple[int, ...], n: int, k: int, swiglu: bool, device) -> GemvTiles:
    """A ``GemvTiles`` of ``spec`` for an ``[n, k]`` weight (``n`` per half for SwiGLU), with
    the split-K ``gemv_tiles`` would pick for that tile and the chain flag it sets."""
    bn, bk, stages, *warps = spec
    split = 1
    if tiles_module.GEMV_SPLIT_K and not swiglu:
        split = gemv_split_k(-(-n // bn), -(-k // bk), sm_count(device))
    pdl = gemv_tiles(device, torch.bfloat16, n, k, swiglu).pdl
    return GemvTiles(bn, bk, stages, num_warps=warps[0] if warps else 4, split_k=split, pdl=pdl)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=list(SIZES), default="8b")
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--rep-ms", type=int, default=200)
    ap.add_argument("--rows", type=int, default=1, help="tokens of the step, 1 to 16")
    ap.add_argument("--split-k", default="", help="split_k values to try, e.g. 2,4,8")
    ap.add_argument("--tiles", default="", help="tiles to try, e.g. 16x128x3,32x256x5")
    args = ap.parse_args()
    splits = [int(v) for v in args.split_k.split(",") if v]
    try:
        sweep = parse_tiles(args.tiles)
    except ValueError as e:
        ap.error(str(e))
    if not 1 <= args.rows <= 16:
        ap.error("--rows must be 1 to 16")
    if args.layers < 1 or args.rep_ms < 1:
        ap.error("--layers and --rep-ms must be >= 1")
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    dev, dt = "cuda", torch.bfloat16
    bw = read_bandwidth(max(20, args.rep_ms // 2))
    emit({"what": "bandwidth", "GB/s": bw, "device": torch.cuda.get_device_name(),
          "bf16_sum_GB/s": read_bandwidth_bf16_sum(max(20, args.rep_ms // 2))})

    hidden, inter, hq, hkv, d, vocab = SIZES[args.size]
    shapes = {"qkv_proj": ((hq + 2 * hkv) * d, hidden), "o_proj": (hidden, hq * d),
              "gate_up_proj": (2 * inter, hidden), "down_proj": (hidden, inter),
              "lm_head": (vocab, hidden)}
    weights = {name: [torch.randn(n, k, dtype=dt, device=dev) * 0.02
                      for _ in range(1 if name == "lm_head" else args.layers)]
               for name, (n, k) in shapes.items()}
    m = args.rows
    xs = {name: torch.randn(m, k, dtype=dt, device=dev) for name, (n, k) in shapes.items()}
    ys = {name: torch.empty(m, n, dtype=dt, device=dev) for name, (n, k) in shapes.items()}

    def per_layer(fns, count):
        return bench_graph_many(fns, args.rep_ms) * 1e3 / count

    for name, (n, k) in shapes.items():
        ws, xi, y = weights[name], xs[name], ys[name]
        nbytes = n * k * 2
        impls = [("ours", lambda w, xi=xi: gemv(xi, w)),
                 ("cublas", lambda w, xi=xi, y=y: F.linear(xi, w, out=y))]
        for sk in splits if name != "gate_up_proj" else ():
            t = replace(gemv_tiles(dev, dt, n, k, False), split_k=sk)
            impls.append((f"ours_split{sk}", lambda w, xi=xi, t=t: gemv(xi, w, tiles=t)))
        for label, spec in sweep:
            swiglu = name == "gate_up_proj"
            t = tiles_for(spec, n // 2 if swiglu else n, k, swiglu, dev)
            fn = gemv_swiglu if swiglu else gemv
            impls.append((f"ours_{label}", lambda w, xi=xi, t=t, fn=fn: fn(xi, w, tiles=t)))
        for impl, fn in impls:
            try:
                us = per_layer([lambda w=w, fn=fn: fn(w) for w in ws], len(ws))
            except OutOfResources as e:  # a swept tile past the shared memory: report, go on
                emit({"what": "gemv", "proj": name, "impl": impl, "error": str(e)[:120]})
                torch.cuda.synchronize()
                continue
            emit({"what": "gemv", "proj": name, "impl": impl, "rows": m, "n": n, "k": k,
                  "layers": len(ws),
                  "us": us, "GB/s": nbytes / us / 1e3, "frac_bw": nbytes / us / 1e3 / bw})

    h = torch.randn(m, hidden, dtype=dt, device=dev)
    gu_out = torch.empty(m, 2 * inter, dtype=dt, device=dev)
    mlp_bytes = (shapes["gate_up_proj"][0] * hidden + hidden * inter) * 2

    def mlp(impl, i):
        wgu, wd = weights["gate_up_proj"][i], weights["down_proj"][i]
        if impl == "ours":
            return lambda: gemv(gemv_swiglu(h, wgu), wd)
        return lambda: F.linear(silu_mul(F.linear(h, wgu, out=gu_out)), wd)

    for impl in ("ours", "cublas"):
        us = per_layer([mlp(impl, i) for i in range(args.layers)], args.layers)
        emit({"what": "mlp", "impl": impl, "rows": m, "layers": args.layers, "us": us,
              "GB/s": mlp_bytes / us / 1e3, "frac_bw": mlp_bytes / us / 1e3 / bw})

    a = torch.randn(m, hq * d, dtype=dt, device=dev)
    layer_bytes = mlp_bytes + (shapes["qkv_proj"][0] + hidden) * hidden * 2

    def layer(impl, i):
        wqkv, wo = weights["qkv_proj"][i], weights["o_proj"][i]
        if impl == "ours":
            return [lambda: gemv(h, wqkv), lambda: gemv(a, wo), mlp(impl, i)]
        return [lambda: F.linear(h, wqkv), lambda: F.linear(a, wo), mlp(impl, i)]

    for impl in ("ours", "cublas"):
        us = per_layer([f for i in range(args.layers) for f in layer(impl, i)], args.layers)
        emit({"what": "layer_gemvs", "impl": impl, "rows": m, "layers": args.layers, "us": us,
              "GB/s": layer_bytes / us / 1e3, "frac_bw": layer_bytes / us / 1e3 / bw})


if __name__ == "__main__":
    main()
