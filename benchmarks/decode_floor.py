"""What reading an INT8 decode cache costs with no attention at all: the floor under stage 1.

Qwen3-8B shape (8 KV heads, head_dim 128), batch 1, page size 64, pages in scrambled order, the
INT8 pool layout of ``infer/kv_pool.py`` (codes, transposed V pages, float32 scales). Every figure
is per layer of ONE CUDA graph over 36 distinct pools (``benchmarks/timing.bench_graph_many``, a
cold-L2 read flush before each replay), the method of ``benchmarks/attention.py --layers``.
Printed, one JSON line each (``what``, ``impl``, ``positions``, ``us`` per layer, ``frac_bw`` of
the measured read bandwidth, ``bytes`` counted as in ``benchmarks/attention.py``):

- ``stage1``: our decode stage 1 alone (``_decode_stage1``, default tile, no PDL, no combine).
- ``stream``: a kernel that reads exactly stage 1's bytes through the same page walk (same grid:
  one program per KV head and split, the default split count) and only xor-folds them: no dots, no
  softmax. ``contiguous`` gives each split a contiguous run of 64-key blocks, as stage 1 does, one
  warp; ``round_robin`` gives split ``s`` the blocks ``s, s + S, s + 2S, ...``, four warps.
- ``stream_tma``: the same bytes, K and transposed V tiles of one page each through TMA
  descriptors (``cp.async.bulk.tensor``), multi-buffered over ``tl.range(num_stages=3)``; 66 splits
  of one warp (4 programs per SM, 34 KB of shared memory each). The fastest stream found: at
  25075cd, 19.25 us per layer at 32k against 20.08 (``stream_contiguous_w1``) and 21.52
  (``stream_round_robin_w4``) in the same run; no other TMA tiling was faster in a sweep of
  splits 33-198, stages 2-6 and 1 or 4 warps at b3c7276.
- ``empty``: a kernel on stage 1's grid that only reads ``seq_lens``: the cost of one kernel
  launch inside a graph.
- ``timeline`` (``--timeline``): per program of the contiguous stream, ``%globaltimer`` (ns) at
  start and end over one cold replay; per layer, the quantiles of the end
  times after the layer's first start, medians over the 36 layers. A spread of end times is time
  in which fewer and fewer programs keep the memory busy.

Usage (GPU machine, repository root): ``python benchmarks/decode_floor.py [--lengths 4096,32768,
131072] [--timeline]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.attention_common import parse_lengths  # noqa: E402
from benchmarks.timing import (  # noqa: E402
    _flush_l2,
    bench_graph_many,
    capture_graph,
    read_bandwidth,
)

HKV, D, PAGE, LAYERS = 8, 128, 64, 36
BLOCK_N = 64


@triton.jit
def _globaltimer(x):
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [x], dtype=tl.int64,
                                     is_pure=False, pack=1)


@triton.jit
def _stream_kernel(k_ptr, v_ptr, ks_ptr, vs_ptr, seq_lens_ptr, page_table_ptr, out_ptr, rec_ptr,
                   NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
                   BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr, ROUND_ROBIN: tl.constexpr,
                   REC: tl.constexpr):
    """Reads one split's K codes, transposed V codes and scales (batch 1); writes one float."""
    h = tl.program_id(0)
    split = tl.program_id(1)
    pid = h * NUM_SPLITS + split
    if REC:
        t0 = _globaltimer(pid)
    seq_len = tl.load(seq_lens_ptr)
    n_blocks = tl.cdiv(seq_len, BLOCK_N)
    if ROUND_ROBIN:
        lo, hi = 0, tl.cdiv(tl.maximum(n_blocks - split, 0), NUM_SPLITS)
    else:
        lo, hi = split * n_blocks // NUM_SPLITS, (split + 1) * n_blocks // NUM_SPLITS
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    xk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.int8)
    xv = tl.zeros([HEAD_DIM, BLOCK_N], dtype=tl.int8)
    xs = tl.zeros([BLOCK_N], dtype=tl.float32)
    for it in range(lo, hi):
        blk = split + it * NUM_SPLITS if ROUND_ROBIN else it
        page = tl.load(page_table_ptr + (blk * BLOCK_N) // PAGE_SIZE).to(tl.int64)
        within = (blk * BLOCK_N + offs_n) % PAGE_SIZE
        base = (page * NUM_KV_HEADS + h) * (PAGE_SIZE * HEAD_DIM)
        xk ^= tl.load(k_ptr + (base + within * HEAD_DIM)[:, None] + offs_d[None, :])
        xv ^= tl.load(v_ptr + (base + within)[None, :] + offs_d[:, None] * PAGE_SIZE)
        s_off = (page * NUM_KV_HEADS + h) * PAGE_SIZE + within
        xs += tl.load(ks_ptr + s_off) + tl.load(vs_ptr + s_off)
    folded = tl.sum(tl.sum(xk.to(tl.int32), axis=1), axis=0) \
        + tl.sum(tl.sum(xv.to(tl.int32), axis=1), axis=0)
    tl.store(out_ptr + pid, folded.to(tl.float32) + tl.sum(xs, axis=0))
    if REC:
        tl.store(rec_ptr + pid * 2, t0)
        tl.store(rec_ptr + pid * 2 + 1, _globaltimer(pid))


@triton.jit
def _tma_stream_kernel(desc_k, desc_v, ks_ptr, vs_ptr, seq_lens_ptr, page_table_ptr, out_ptr,
                       NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
                       PAGE_SIZE: tl.constexpr, NUM_SPLITS: tl.constexpr, STAGES: tl.constexpr):
    """As ``_stream_kernel`` (contiguous runs, batch 1), with K and V pages loaded by TMA."""
    h = tl.program_id(0)
    split = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr)
    n_blocks = tl.cdiv(seq_len, PAGE_SIZE)
    lo, hi = split * n_blocks // NUM_SPLITS, (split + 1) * n_blocks // NUM_SPLITS
    offs_n = tl.arange(0, PAGE_SIZE)
    xk = tl.zeros([PAGE_SIZE, HEAD_DIM], dtype=tl.int8)
    xv = tl.zeros([HEAD_DIM, PAGE_SIZE], dtype=tl.int8)
    xs = tl.zeros([PAGE_SIZE], dtype=tl.float32)
    # tl.range(num_stages=...) multi-buffers the TMA loads behind the page-table load (a plain
    # range keeps one buffer at any num_stages)
    for blk in tl.range(lo, hi, num_stages=STAGES):
        ph = tl.load(page_table_ptr + blk) * NUM_KV_HEADS + h  # (page, KV head), < 2^31 / 128
        xk ^= desc_k.load([ph * PAGE_SIZE, 0])
        xv ^= desc_v.load([ph * HEAD_DIM, 0])
        s_off = ph.to(tl.int64) * PAGE_SIZE + offs_n
        xs += tl.load(ks_ptr + s_off) + tl.load(vs_ptr + s_off)
    folded = tl.sum(tl.sum(xk.to(tl.int32), axis=1), axis=0) \
        + tl.sum(tl.sum(xv.to(tl.int32), axis=1), axis=0)
    tl.store(out_ptr + h * NUM_SPLITS + split, folded.to(tl.float32) + tl.sum(xs, axis=0))


@triton.jit
def _empty_kernel(seq_lens_ptr, out_ptr):
    if tl.load(seq_lens_ptr) < 0:  # never: keeps the load
        tl.store(out_ptr, 0.0)


def make_layer(seq_len: int, n_pages: int) -> dict:
    """An INT8 pool layer: random codes (V pages transposed) and positive float32 scales."""
    return dict(k=torch.randint(-127, 128, (n_pages, HKV, PAGE, D), dtype=torch.int8,
                                device="cuda"),
                v=torch.randint(-127, 128, (n_pages, HKV, D, PAGE), dtype=torch.int8,
                                device="cuda"),
                ks=torch.rand(n_pages, HKV, PAGE, device="cuda") + 0.5,
                vs=torch.rand(n_pages, HKV, PAGE, device="cuda") + 0.5,
                q=torch.randn(1, 4 * HKV, D, dtype=torch.bfloat16, device="cuda"))


def stream(layer, seq_lens, table, out, splits, round_robin, warps, rec=None):
    _stream_kernel[(HKV, splits)](
        layer["k"], layer["v"], layer["ks"], layer["vs"], seq_lens, table, out,
        rec if rec is not None else out, NUM_KV_HEADS=HKV, HEAD_DIM=D, PAGE_SIZE=PAGE,
        BLOCK_N=BLOCK_N, NUM_SPLITS=splits, ROUND_ROBIN=round_robin, REC=rec is not None,
        num_warps=warps, num_stages=2)


TMA_SPLITS, TMA_STAGES = 66, 3


def stream_tma(layer, seq_lens, table, out):
    """The ``stream_tma`` case: descriptors over the K pool as [rows, head_dim] and the
    transposed V pool as [rows, page_size], one page per tile."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    k, v = layer["k"], layer["v"]
    if "desc" not in layer:
        layer["desc"] = (TensorDescriptor(k, [k.numel() // D, D], [D, 1], [PAGE, D]),
                         TensorDescriptor(v, [v.numel() // PAGE, PAGE], [PAGE, 1], [D, PAGE]))
    desc_k, desc_v = layer["desc"]
    _tma_stream_kernel[(HKV, TMA_SPLITS)](
        desc_k, desc_v, layer["ks"], layer["vs"], seq_lens, table, out, NUM_KV_HEADS=HKV,
        HEAD_DIM=D, PAGE_SIZE=PAGE, NUM_SPLITS=TMA_SPLITS, STAGES=TMA_STAGES, num_warps=1,
        num_stages=TMA_STAGES)


def timeline(layers, seq_lens, table, out, splits) -> dict:
    """End-time quantiles (us after each layer's first start), medians over the layers."""
    recs = torch.zeros(len(layers), HKV * splits, 2, dtype=torch.int64, device="cuda")
    fns = [lambda ly=ly, r=r: stream(ly, seq_lens, table, out, splits, False, 1, rec=r)
           for ly, r in zip(layers, recs, strict=True)]
    graph = capture_graph(fns)
    _flush_l2()
    graph.replay()
    torch.cuda.synchronize()
    qs = (0.1, 0.5, 0.9, 0.99, 1.0)
    per_layer = []
    for r in recs.cpu():
        r = (r - r[:, 0].min()).double() / 1e3  # subtract in int64: ns stamps are ~1e18
        per_layer.append([r[:, 1].quantile(q).item() for q in qs] + [r[:, 0].max().item()])
    med = [statistics.median(col) for col in zip(*per_layer, strict=True)]
    ends = {str(q): round(x, 2) for q, x in zip(qs, med[:-1], strict=True)}
    return {"end_us_quantiles": ends,
            "start_spread_us": round(med[-1], 2)}


def bench_length(seq_len: int, bw: float, with_timeline: bool) -> None:
    """Prints the ``floor`` records (and the ``timeline`` record) of one context length."""
    from kernels.decode_attention import DecodeWorkspace, _decode_stage1, default_num_splits
    from kernels.tiles import decode_tiles
    splits = default_num_splits(1, HKV, torch.device("cuda"), torch.int8)
    no_pdl = dataclasses.replace(decode_tiles("cuda", torch.int8, page_size=PAGE, rows=4),
                                 pdl=False)
    n_pages = math.ceil(seq_len / PAGE)
    table = torch.randperm(n_pages + 16, device="cuda")[:n_pages].to(torch.int32)[None, :]
    seq_lens = torch.tensor([seq_len], dtype=torch.int32, device="cuda")
    layers = [make_layer(seq_len, n_pages + 16) for _ in range(LAYERS)]
    out = torch.zeros(HKV * max(splits, TMA_SPLITS), device="cuda")
    ws = DecodeWorkspace.allocate(1, HKV, 4, splits, D, "cuda")
    nbytes = seq_len * HKV * (2 * D + 8)
    cases = {
        "stage1": lambda ly: _decode_stage1(ly["q"], ly["k"], ly["v"], seq_lens, table,
                                            k_scale=ly["ks"], v_scale=ly["vs"], workspace=ws,
                                            tiles=no_pdl),
        "stream_contiguous_w1": lambda ly: stream(ly, seq_lens, table, out, splits, False, 1),
        "stream_round_robin_w4": lambda ly: stream(ly, seq_lens, table, out, splits, True, 4),
        "stream_tma": lambda ly: stream_tma(ly, seq_lens, table, out),
        "empty": lambda ly: _empty_kernel[(HKV, splits)](seq_lens, out, num_warps=1),
    }
    for impl, fn in cases.items():
        ms = bench_graph_many([lambda ly=ly, fn=fn: fn(ly) for ly in layers], 200) / LAYERS
        n_splits = TMA_SPLITS if impl == "stream_tma" else splits
        print(json.dumps({"what": "floor", "kv": "int8", "positions": seq_len, "impl": impl,
                          "splits": n_splits, "bytes": nbytes, "us": round(ms * 1e3, 2),
                          "frac_bw": round(nbytes / (ms * 1e-3) / 1e9 / bw, 4)}), flush=True)
    if with_timeline:
        print(json.dumps({"what": "timeline", "impl": "stream_contiguous_w1",
                          "positions": seq_len,
                          **timeline(layers, seq_lens, table, out, splits)}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="4096,32768,131072", help="positions, comma-separated")
    ap.add_argument("--timeline", action="store_true", help="also record per-program times")
    args = ap.parse_args()
    lengths = parse_lengths(args.lengths)
    if not torch.cuda.is_available():
        sys.exit("benchmarks/decode_floor.py needs a CUDA GPU")
    bw = read_bandwidth()
    print(json.dumps({"what": "bandwidth", "GB/s": round(bw, 1)}), flush=True)
    for seq_len in lengths:
        bench_length(seq_len, bw, args.timeline)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
