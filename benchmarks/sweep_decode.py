"""Sweep tile configurations of the split-KV decode kernel on a GPU (one JSON line per config).

Qwen3-8B attention shape (32 query / 8 KV heads, head_dim 128), page 64, batch 1, one new token,
BF16 and INT8 pools on scrambled pages. Each config is timed as CUDA-graph replays after a
cold-L2 read flush (``benchmarks/timing.py``) over the whole ``decode_attention`` call (stage 1 +
combine), checked against a float32 reference, and reported as GB/s of cache read: K + V (+
the float32 scales for INT8) for ``seq_len`` positions x 8 KV heads x 128 dims. With
``--split-timing`` (on in ``--quick``) stage 1 alone (``stage1_us``) and the combine alone
(``combine_us``) are timed too.

    PYTHONPATH=. python benchmarks/sweep_decode.py --quick    # ~47 chosen configs, < 3 minutes
    PYTHONPATH=. python benchmarks/sweep_decode.py --seq-lens 32768 --block-n 64 --splits 66 132 \
        --stages 1 2 4 --magic 0 1 2 --split-timing

``--magic`` (INT8 only) is the code conversion: 0 cvt, 1 magic number with integer ops, 2 magic
number in packed inline PTX. ``--opts`` adds ``DecodeTiles`` fields (e.g. ``'{"pdl": false}'``). The
last line is the best config per (dtype, seq_len) as JSON. Each config is passed to the launcher as
a ``kernels.tiles.DecodeTiles`` (the default for the cache dtype with the swept fields replaced).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math

import torch

from benchmarks.timing import bench_graph
from kernels import reference
from kernels.combine import combine
from kernels.decode_attention import (
    DecodeWorkspace,
    _decode_stage1,
    decode_attention,
    default_num_splits,
)
from kernels.tiles import decode_tiles

KV_HEADS, GROUP, HEAD_DIM, PAGE = 8, 4, 128, 64


def make_pool(seq_len: int, int8: bool, device="cuda"):
    """One sequence of ``seq_len`` positions on scrambled pages; returns kwargs for the call."""
    num_pages = -(-seq_len // PAGE)
    shape = (num_pages, KV_HEADS, PAGE, HEAD_DIM)
    k = torch.randn(shape, device=device, dtype=torch.bfloat16)
    v = torch.randn(shape, device=device, dtype=torch.bfloat16)
    scales = {}
    if int8:
        kc, ks = reference.quantize_int8(k)
        vc, vs = reference.quantize_int8(v)
        k, v = kc, vc.transpose(2, 3).contiguous()  # INT8 pools: V pages transposed
        scales = dict(k_scale=ks.contiguous(), v_scale=vs.contiguous())
    table = torch.randperm(num_pages, device=device).to(torch.int32)[None]
    seq_lens = torch.tensor([seq_len], dtype=torch.int32, device=device)
    q = torch.randn(1, KV_HEADS * GROUP, HEAD_DIM, device=device, dtype=torch.bfloat16)
    return dict(q=q, k_cache=k, v_cache=v, seq_lens=seq_lens, page_table=table, **scales)


def reference_out(pool) -> torch.Tensor:
    """float32 attention over the (dequantized) pool, for the correctness column."""
    pages = pool["page_table"][0].long()
    seq_len = int(pool["seq_lens"][0])
    k, v = pool["k_cache"][pages], pool["v_cache"][pages]
    if "k_scale" in pool:
        k = reference.dequantize_int8(k, pool["k_scale"][pages])
        v = reference.dequantize_int8(v.transpose(2, 3), pool["v_scale"][pages])
    k = k.float().permute(0, 2, 1, 3).reshape(-1, KV_HEADS, HEAD_DIM)[:seq_len]
    v = v.float().permute(0, 2, 1, 3).reshape(-1, KV_HEADS, HEAD_DIM)[:seq_len]
    return reference.dense_causal_attention(pool["q"], k, v, q_offset=seq_len - 1)


def cache_bytes(seq_len: int, int8: bool) -> int:
    per_pos = KV_HEADS * HEAD_DIM * (1 if int8 else 2) + (KV_HEADS * 4 if int8 else 0)
    return 2 * seq_len * per_pos


def quick_configs() -> list[tuple]:
    """(dtype, seq_len, block_n, warps, stages, splits, magic): the most informative ~47."""
    cfgs = []
    for seq in (32768, 131072):
        # bf16: programs per SM (splits 33/66/132/264 = 2/4/8/16 per SM), stages, block_n 32
        for sp in (33, 66, 132, 264):
            cfgs.append(("bf16", seq, 64, 4, 2, sp, 0))
        if seq == 32768:
            cfgs += [("bf16", seq, 64, 4, st, 132, 0) for st in (1, 3, 4)]
            cfgs += [("bf16", seq, 32, 4, st, sp, 0) for st, sp in
                     ((2, 132), (2, 264), (3, 132), (4, 264))]
            cfgs += [("bf16", seq, 128, 4, 2, 132, 0), ("bf16", seq, 64, 8, 2, 132, 0)]
        # int8: the conversion first, then programs per SM and block_n with the packed PTX one
        cfgs += [("int8", seq, 128, 4, 2, 33, m) for m in (0, 1, 2)]
        cfgs += [("int8", seq, 128, 4, 2, 66, m) for m in (1, 2)]
        cfgs += [("int8", seq, 32, 1, 2, sp, 2) for sp in (132, 198)]
        cfgs += [("int8", seq, 128, 4, 2, 132, 2), ("int8", seq, 64, 4, 2, 132, 2),
                 ("int8", seq, 256, 8, 2, 66, 2)]
        if seq == 32768:
            cfgs += [("int8", seq, 64, 4, 2, 264, 2), ("int8", seq, 128, 4, 3, 132, 2),
                     ("int8", seq, 128, 8, 2, 132, 2), ("int8", seq, 64, 4, 2, 132, 1)]
    cfgs += [("bf16", 4096, 64, 4, 2, sp, 0) for sp in (33, 66, 132)]
    cfgs += [("int8", 4096, 128, 4, 2, sp, 2) for sp in (33, 66, 132)]
    return cfgs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="the chosen configs of quick_configs() (ignores the lists below)")
    ap.add_argument("--seq-lens", type=int, nargs="+", default=[32768, 131072])
    ap.add_argument("--dtypes", nargs="+", default=["bf16", "int8"], choices=["bf16", "int8"])
    ap.add_argument("--block-n", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--warps", type=int, nargs="+", default=[4])
    ap.add_argument("--stages", type=int, nargs="+", default=[2])
    ap.add_argument("--splits", type=int, nargs="+", default=[0, 66, 132],
                    help="0 = the launcher default for the cache dtype")
    ap.add_argument("--magic", type=int, nargs="+", default=[1, 2], choices=[0, 1, 2],
                    help="INT8 conversion (bf16 runs ignore it)")
    ap.add_argument("--opts", nargs="+", default=["{}"],
                    help="JSON dicts of extra DecodeTiles fields, each crossed with every "
                         "config (e.g. '{}' '{\"pdl\": false}')")
    ap.add_argument("--split-timing", action="store_true",
                    help="also time stage 1 alone and the combine alone")
    ap.add_argument("--rep-ms", type=int, default=200)
    ap.add_argument("--peak-gbs", type=float, default=4164.0,
                    help="measured read bandwidth to report a percentage against")
    args = ap.parse_args()

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    print(json.dumps({"device": props.name, "sms": props.multi_processor_count,
                      "default_splits": {name: default_num_splits(1, KV_HEADS, dev, dt) for
                                         name, dt in (("bf16", None), ("int8", torch.int8))}}),
          flush=True)
    if args.quick:
        configs, split_timing, rep = quick_configs(), True, min(args.rep_ms, 100)
    else:
        configs = [(d, s, bn, w, st, sp, m if d == "int8" else 0)
                   for d, s, bn, w, st, sp, m in itertools.product(
                       args.dtypes, args.seq_lens, args.block_n, args.warps, args.stages,
                       args.splits, args.magic)
                   if d == "int8" or m == args.magic[0]]
        split_timing, rep = args.split_timing, args.rep_ms
    pools: dict[tuple, tuple] = {}
    best: dict[str, dict] = {}
    extras = [json.loads(o) for o in args.opts]
    configs = [(*c, ex) for c in configs for ex in extras]
    for dtype, seq_len, block_n, warps, stages, splits, magic, extra in configs:
        int8 = dtype == "int8"
        if (dtype, seq_len) not in pools:
            pools.clear()  # one pool at a time (128k bf16 is 512 MiB)
            pool = make_pool(seq_len, int8)
            pools[(dtype, seq_len)] = (pool, reference_out(pool))
        pool, ref = pools[(dtype, seq_len)]
        nbytes = cache_bytes(seq_len, int8)
        splits = splits or default_num_splits(1, KV_HEADS, dev, torch.int8 if int8 else None)
        ws = DecodeWorkspace.allocate(1, KV_HEADS, GROUP, splits, HEAD_DIM, dev)
        out = torch.empty_like(pool["q"])
        tiles = dataclasses.replace(
            decode_tiles(dev, torch.int8 if int8 else torch.bfloat16, page_size=PAGE, rows=GROUP),
            block_n=block_n, num_warps=warps, num_stages=stages, int8_magic=magic, **extra)
        cfg = dict(num_splits=splits, workspace=ws, tiles=tiles)
        cfg.update(pool)
        fn = lambda cfg=cfg, out=out: decode_attention(**cfg, out=out)
        row = dict(dtype=dtype, seq_len=seq_len, block_n=block_n, num_warps=warps,
                   num_stages=stages, num_splits=splits, magic=magic if int8 else None,
                   **extra)
        try:
            out.fill_(float("nan"))
            fn()
            err = (out.float() - ref).abs().max().item()
            us = bench_graph(fn, rep) * 1e3
            if split_timing:
                parts = _decode_stage1(**cfg)
                stage1 = lambda cfg=cfg: _decode_stage1(**cfg)
                merge = lambda parts=parts, out=out: combine(*parts, out)
                row["stage1_us"] = round(bench_graph(stage1, rep) * 1e3, 2)
                row["combine_us"] = round(bench_graph(merge, rep) * 1e3, 2)
        except Exception as e:  # a config that fails to compile (e.g. out of shared memory)
            print(json.dumps({**row, "error": repr(e)[:300]}), flush=True)
            continue
        gbs = nbytes / (us * 1e-6) / 1e9
        pct = 100 * gbs / args.peak_gbs
        row.update(us=round(us, 2), gbs=round(gbs, 1), pct_peak=round(pct, 1),
                   max_err=float(f"{err:.3e}"), ok=bool(math.isfinite(err) and err < 2e-2))
        print(json.dumps(row), flush=True)
        key = f"{dtype}@{seq_len}"
        if row["ok"] and (key not in best or row["us"] < best[key]["us"]):
            best[key] = row
    print(json.dumps({"best": best}), flush=True)


if __name__ == "__main__":
    main()
