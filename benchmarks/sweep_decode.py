"""Sweep tile configurations of the split-KV decode kernel on a GPU (one JSON line per config).

Qwen3-8B attention shape (32 query / 8 KV heads, head_dim 128), page 64, batch 1, one new token,
BF16 and INT8 pools on scrambled pages. Each config is timed with ``triton.testing.do_bench`` (L2
flushed between runs) over the whole ``decode_attention`` call (stage 1 + combine), checked
against a float32 reference, and reported as GB/s of cache read: K + V (+ the float32 scales for
INT8) for ``seq_len`` positions x 8 KV heads x 128 dims.

    PYTHONPATH=. python benchmarks/sweep_decode.py          # full sweep, 32k and 128k
    PYTHONPATH=. python benchmarks/sweep_decode.py --seq-lens 32768 --block-n 128 --stages 2 3

The last line is the best config per (dtype, seq_len) as JSON.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math

import torch

from benchmarks.timing import bench_graph
from kernels import reference
from kernels.decode_attention import DecodeWorkspace, decode_attention, default_num_splits

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
        k, v = kc, vc
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
        v = reference.dequantize_int8(v, pool["v_scale"][pages])
    k = k.float().permute(0, 2, 1, 3).reshape(-1, KV_HEADS, HEAD_DIM)[:seq_len]
    v = v.float().permute(0, 2, 1, 3).reshape(-1, KV_HEADS, HEAD_DIM)[:seq_len]
    return reference.dense_causal_attention(pool["q"], k, v, q_offset=seq_len - 1)


def cache_bytes(seq_len: int, int8: bool) -> int:
    per_pos = KV_HEADS * HEAD_DIM * (1 if int8 else 2) + (KV_HEADS * 4 if int8 else 0)
    return 2 * seq_len * per_pos


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq-lens", type=int, nargs="+", default=[32768, 131072])
    ap.add_argument("--dtypes", nargs="+", default=["bf16", "int8"], choices=["bf16", "int8"])
    ap.add_argument("--block-n", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--warps", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--stages", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--splits", type=int, nargs="+", default=[0, 16, 66],
                    help="0 = the launcher default (about two programs per SM)")
    ap.add_argument("--peak-gbs", type=float, default=4250.0,
                    help="measured read bandwidth to report a percentage against")
    args = ap.parse_args()

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    print(json.dumps({"device": props.name, "sms": props.multi_processor_count,
                      "default_splits": default_num_splits(1, KV_HEADS, dev)}), flush=True)
    best: dict[str, dict] = {}
    for dtype, seq_len in itertools.product(args.dtypes, args.seq_lens):
        int8 = dtype == "int8"
        pool = make_pool(seq_len, int8)
        ref = reference_out(pool)
        nbytes = cache_bytes(seq_len, int8)
        for block_n, warps, stages, splits in itertools.product(
                args.block_n, args.warps, args.stages, args.splits):
            splits = splits or default_num_splits(1, KV_HEADS, dev)
            ws = DecodeWorkspace.allocate(1, KV_HEADS, GROUP, splits, HEAD_DIM, dev)
            out = torch.empty_like(pool["q"])
            cfg = dict(num_splits=splits, workspace=ws, out=out, block_n=block_n,
                       num_warps=warps, num_stages=stages)
            cfg.update(pool)
            fn = lambda cfg=cfg: decode_attention(**cfg)
            row = dict(dtype=dtype, seq_len=seq_len, block_n=block_n, num_warps=warps,
                       num_stages=stages, num_splits=splits)
            try:
                fn()
                err = (out.float() - ref).abs().max().item()
                us = bench_graph(fn) * 1e3
            except Exception as e:  # a config that fails to compile (e.g. out of shared memory)
                print(json.dumps({**row, "error": repr(e)[:200]}), flush=True)
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
