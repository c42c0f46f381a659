"""Attention kernel benchmark on one GPU: our paged kernels side by side with torch SDPA.

Shape: Qwen3-8B attention (32 query heads, 8 KV heads, head_dim 128), batch 1, page size 64, pages
in scrambled order, fresh random data (never zeros). Pools in BF16 or INT8 (codes + float32 scale
per position and KV head). Timings are medians of CUDA-event timed runs, each after a cold-L2 read
flush (``benchmarks/timing.py``), so the cache is read from HBM every time. Decode is timed twice:
as CUDA-graph replays (``graph``: the kernels' GPU time, as the engine runs them) and as launched
from Python (``eager``: host launch overhead included).

Printed, one JSON line each (also written to ``--out``), then a short human table:

- ``bandwidth``: the card's measured read bandwidth: ``x.sum()`` over a 4 GiB bf16 tensor,
  bytes / median time. The ``frac_bw`` of every decode line is relative to this figure.
- ``decode`` (one new token at ``positions`` cached positions, i.e. one layer's attention of one
  decode step): ``impl=ours`` is ``kernels.decode_attention.decode_attention`` (split-KV + combine,
  preallocated workspace) on the paged pool; ``impl=sdpa`` is ``F.scaled_dot_product_attention``
  on a contiguous bf16 cache ``[1, 8, S, 128]`` with ``enable_gqa=True`` (default backend).
  ``bytes`` is what the kernel must read from the cache: keys + values (``S*8*128*2`` elements at
  2 B for BF16 or 1 B for INT8) plus, for INT8, the float32 key and value scales (``S*8*2*4`` B).
  ``GB/s = bytes / time``; queries, outputs and page-table reads are not counted.
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

``--sweep`` adds prefill tile configurations (BLOCK_M 32/64/128, BLOCK_N, warps, stages, pointer
or TMA loads) and decode split counts, one line each, to pick the launchers'
defaults from. The prefill ``config`` field is ``[BLOCK_M, BLOCK_N, num_warps, num_stages, tma,
warp_specialize]`` or ``"default"`` (the launcher's heuristic). ``--warp-specialize`` adds two
warp-specialized TMA configs (last, since Triton 3.6 documents warp specialization for Blackwell).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.reference import quantize_int8  # noqa: E402

HQ, HKV, D, PAGE = 32, 8, 128, 64
DEVICE = "cuda"
# Prefill tile sweep: (BLOCK_M, BLOCK_N, num_warps, num_stages, TMA loads, warp-specialized loop).
SWEEP_PREFILL = [(128, 64, 8, 3, False, False), (128, 128, 8, 3, False, False),
                 (128, 64, 8, 4, False, False), (128, 64, 4, 3, False, False),
                 (64, 64, 4, 3, False, False), (64, 128, 4, 3, False, False),
                 (64, 64, 4, 4, False, False), (32, 64, 4, 3, False, False),
                 (32, 32, 4, 4, False, False),
                 (128, 64, 8, 3, True, False), (128, 64, 8, 4, True, False),
                 (64, 64, 4, 3, True, False), (128, 64, 4, 3, True, False)]
# Warp-specialized key loop: opt-in (--warp-specialize), a compiler crash would end the run.
SWEEP_WS = [(128, 64, 8, 3, True, True), (128, 64, 4, 3, True, True)]
SWEEP_SPLITS = [8, 16, 33, 64]


def emit(rec: dict, records: list, out) -> None:
    records.append(rec)
    line = json.dumps(rec)
    print(line, flush=True)
    if out is not None:
        out.write(line + "\n")
        out.flush()


def bench(fn, rep_ms: int) -> float:
    """Median milliseconds of ``fn`` as launched (cold L2 before each run)."""
    from benchmarks.timing import bench_eager
    return bench_eager(fn, rep_ms)


def bench_graph(fn, rep_ms: int) -> float:
    """Median milliseconds of ``fn`` replayed from a CUDA graph (no host launch overhead)."""
    from benchmarks.timing import bench_graph as _bench_graph
    return _bench_graph(fn, rep_ms)


def measure_bandwidth() -> dict:
    x = torch.randn(2 << 30, dtype=torch.bfloat16, device=DEVICE)  # 4 GiB
    ms = bench(lambda: x.sum(), 200)
    nbytes = x.numel() * x.element_size()
    return {"what": "bandwidth", "bytes": nbytes, "us": ms * 1e3, "GB/s": nbytes / ms / 1e6}


def make_pool(seq_len: int, kv: str):
    """A paged pool holding ``seq_len`` random positions of one sequence, pages scrambled."""
    n_pages = math.ceil(seq_len / PAGE)
    num_pages = n_pages + 16
    shape = (num_pages, HKV, PAGE, D)
    k = torch.randn(shape, dtype=torch.bfloat16, device=DEVICE)
    v = torch.randn(shape, dtype=torch.bfloat16, device=DEVICE)
    ks = vs = None
    if kv == "int8":
        (k, ks), (v, vs) = quantize_int8(k), quantize_int8(v)
    table = torch.randperm(num_pages, device=DEVICE)[:n_pages].to(torch.int32)[None, :]
    seq_lens = torch.tensor([seq_len], dtype=torch.int32, device=DEVICE)
    return k, v, ks, vs, table, seq_lens


def cache_bytes(seq_len: int, kv: str) -> int:
    elt = 1 if kv == "int8" else 2
    return seq_len * HKV * D * 2 * elt + (seq_len * HKV * 2 * 4 if kv == "int8" else 0)


def bench_decode(seq_len: int, kv: str, bw: float, splits: list, rep_ms: int):
    """Yields decode records (ours at each split count; SDPA for bf16)."""
    base = {"what": "decode", "kv": kv, "positions": seq_len, "new_tokens": 1}
    k, v, ks, vs, table, seq_lens = make_pool(seq_len, kv)
    q = torch.randn(1, HQ, D, dtype=torch.bfloat16, device=DEVICE)
    nbytes = cache_bytes(seq_len, kv)
    try:
        from kernels import decode_attention as dec
        for ns in splits:
            ws = None
            if hasattr(dec, "DecodeWorkspace"):
                n_split = ns or dec.default_num_splits(1, HKV, q.device, k.dtype)
                ws = dec.DecodeWorkspace.allocate(1, HKV, HQ // HKV, n_split, D, q.device)
            out = torch.empty_like(q)
            fn = lambda ns=ns, ws=ws, out=out: dec.decode_attention(  # noqa: E731
                q, k, v, seq_lens, table, num_queries=1, sm_scale=D ** -0.5, k_scale=ks,
                v_scale=vs, num_splits=ns or None, workspace=ws, out=out)
            fn()
            for timing, timer in (("graph", bench_graph), ("eager", bench)):
                ms = timer(fn, rep_ms)
                yield {**base, "impl": "ours", "timing": timing, "num_splits": ns or "default",
                       "bytes": nbytes, "us": ms * 1e3, "GB/s": nbytes / ms / 1e6,
                       "frac_bw": nbytes / ms / 1e6 / bw}
    except Exception as e:  # the decode kernel is optional here: report, keep benchmarking
        yield {**base, "impl": "ours", "error": f"{type(e).__name__}: {e}"[:300]}
    if kv == "bf16":
        kc = torch.randn(1, HKV, seq_len, D, dtype=torch.bfloat16, device=DEVICE)
        vc = torch.randn_like(kc)
        q4 = q.view(1, HQ, 1, D)
        o4 = torch.empty_like(q4)
        fn = lambda: o4.copy_(  # noqa: E731
            F.scaled_dot_product_attention(q4, kc, vc, enable_gqa=True))
        nb = cache_bytes(seq_len, "bf16")
        for timing, timer in (("graph", bench_graph), ("eager", bench)):
            ms = timer(fn, rep_ms)
            yield {**base, "impl": "sdpa", "timing": timing, "bytes": nb, "us": ms * 1e3,
                   "GB/s": nb / ms / 1e6, "frac_bw": nb / ms / 1e6 / bw}


def causal_flops(n_new: int, seq_len: int) -> float:
    """4 * head_dim * Hq FLOPs per attended (query, key) pair; query t of the chunk attends
    ``seq_len - n_new + t + 1`` keys."""
    ctx = seq_len - n_new
    return 4.0 * (n_new * ctx + n_new * (n_new + 1) / 2) * D * HQ


def bench_prefill(seq_len: int, n_new: int, kv: str, configs: list, rep_ms: int):
    """Yields prefill records: ours per tile config for the last ``n_new`` positions of a
    ``seq_len`` sequence; SDPA flash and cuDNN for bf16 whole-prompt prefill (n_new = seq_len)."""
    from kernels.prefill_attention import prefill_attention
    base = {"what": "prefill", "kv": kv, "positions": seq_len, "new_tokens": n_new}
    flops = causal_flops(n_new, seq_len)
    k, v, ks, vs, table, seq_lens = make_pool(seq_len, kv)
    q = torch.randn(n_new, HQ, D, dtype=torch.bfloat16, device=DEVICE)
    qsl = torch.tensor([0, n_new], dtype=torch.int32, device=DEVICE)
    out = torch.empty_like(q)
    for cfg in configs:
        bm, bn, nw, st, tma, ws = cfg or (None, None, None, None, None, False)
        try:
            fn = lambda bm=bm, bn=bn, nw=nw, st=st, tma=tma, ws=ws: prefill_attention(  # noqa: E731
                q, k, v, seq_lens, qsl, table, max_query_len=n_new, sm_scale=D ** -0.5,
                k_scale=ks, v_scale=vs, out=out, block_m=bm, block_n=bn, num_warps=nw,
                num_stages=st, use_tma=tma, warp_specialize=ws)
            fn()
            ms = bench(fn, rep_ms)
            yield {**base, "impl": "ours", "config": list(cfg) if cfg else "default",
                   "us": ms * 1e3, "TFLOP/s": flops / ms / 1e9}
        except Exception as e:  # e.g. out of shared memory for a large tile
            yield {**base, "impl": "ours", "config": list(cfg) if cfg else "default",
                   "error": f"{type(e).__name__}: {e}"[:300]}
    if kv != "bf16" or n_new != seq_len:  # SDPA's is_causal has no cached-prefix offset
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q4 = q.view(1, seq_len, HQ, D).transpose(1, 2)  # [1, Hq, S, D]
    kc = torch.randn(1, HKV, seq_len, D, dtype=torch.bfloat16, device=DEVICE)
    vc = torch.randn_like(kc)
    for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION),
                          ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
        rec = {**base, "impl": name}
        for gqa in ("enable_gqa", "expanded"):
            try:
                if gqa == "enable_gqa":
                    kk, vv, kw = kc, vc, {"enable_gqa": True}
                else:
                    kk = kc.repeat_interleave(HQ // HKV, dim=1)
                    vv = vc.repeat_interleave(HQ // HKV, dim=1)
                    kw = {}

                def fn(kk=kk, vv=vv, kw=kw, backend=backend):
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(q4, kk, vv, is_causal=True, **kw)
                fn()
                ms = bench(fn, rep_ms)
                rec.update(gqa=gqa, us=ms * 1e3, **{"TFLOP/s": flops / ms / 1e9})
                rec.pop("error", None)
                break
            except Exception as e:  # backend unavailable for this shape/build
                rec["error"] = f"{type(e).__name__}: {e}"[:300]
        yield rec


def table(records: list) -> str:
    rows = [f"{'what':9} {'impl':11} {'kv':5} {'positions':>9} {'new':>6} {'config':22} {'us':>10} "
            f"{'GB/s':>8} {'%bw':>6} {'TFLOP/s':>8}"]
    for r in records:
        if r["what"] == "bandwidth":
            rows.append(f"{'bandwidth':9} {'x.sum()':11} {'':5} {'':>9} {'':>6} {'':22} "
                        f"{r['us']:10.1f} {r['GB/s']:8.0f}")
            continue
        cfg = r.get("config", r.get("num_splits", r.get("gqa", "")))
        if isinstance(cfg, list):
            bm, bn, nw, st, tma, ws = cfg
            cfg = f"{bm}x{bn} w{nw} s{st}{' tma' if tma else ''}{' ws' if ws else ''}"
        cfg = str(cfg) + (f" {r['timing']}" if "timing" in r else "")
        if "error" in r:
            rows.append(f"{r['what']:9} {r['impl']:11} {r['kv']:5} {r['positions']:>9} "
                        f"ERROR {r['error'][:60]}")
            continue
        gbs = f"{r['GB/s']:8.0f}" if "GB/s" in r else " " * 8
        frac = f"{100 * r['frac_bw']:6.1f}" if "frac_bw" in r else " " * 6
        tf = f"{r['TFLOP/s']:8.1f}" if "TFLOP/s" in r else ""
        rows.append(f"{r['what']:9} {r['impl']:11} {r['kv']:5} {r['positions']:>9} "
                    f"{r['new_tokens']:>6} {cfg:22.22} {r['us']:10.1f} {gbs} {frac} {tf}")
    return "\n".join(rows)


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
    ap.add_argument("--warp-specialize", action="store_true",
                    help="also time warp-specialized prefill configs (TMA loads)")
    ap.add_argument("--rep-ms", type=int, default=200, help="repetitions per figure = rep_ms / 2")
    ap.add_argument("--out", default=None, help="also write the JSON lines to this file")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/attention.py needs a CUDA GPU")
    lengths = [int(x) for x in args.lengths.split(",") if x]
    dtypes = [x for x in args.dtypes.split(",") if x]
    what = set(args.what.split(","))
    if bad := [d for d in dtypes if d not in ("bf16", "int8")]:
        sys.exit(f"unknown --dtypes {bad}: use bf16 and/or int8")
    torch.manual_seed(0)
    out = open(args.out, "w") if args.out else None
    records: list = []
    import triton
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=Path(__file__).parent).stdout.strip() or None
    except OSError:
        commit = None
    emit({"what": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__,
          "triton": triton.__version__, "commit": commit,
          "sms": torch.cuda.get_device_properties(0).multi_processor_count}, [], out)
    bw_rec = measure_bandwidth()
    emit(bw_rec, records, out)
    bw = bw_rec["GB/s"]
    for kv in dtypes:
        for s in lengths:
            if "decode" in what:
                splits = [None] + (SWEEP_SPLITS if args.sweep else [])
                for rec in bench_decode(s, kv, bw, splits, args.rep_ms):
                    emit(rec, records, out)
            if "prefill" in what:
                configs = [None] + (SWEEP_PREFILL if args.sweep else []) \
                    + (SWEEP_WS if args.warp_specialize else [])
                n_new = s if s <= args.prefill_max else min(s, args.chunk)
                if n_new > 0:
                    for rec in bench_prefill(s, n_new, kv, configs, max(args.rep_ms, 300)):
                        emit(rec, records, out)
            torch.cuda.empty_cache()
    print()
    print(table(records))
    if out is not None:
        out.close()


if __name__ == "__main__":
    main()
