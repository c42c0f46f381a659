"""Time ``benchmarks/prefill_fa3.py``'s Gluon FlashAttention-3-style prefill attention against our
Triton kernel (``kernels/prefill_attention.py``) and torch SDPA's cuDNN backend, on one
sequence's last chunk of queries (Qwen3-8B heads, BF16 pool, scrambled pages), in CUDA graphs
from a cold L2; one JSON line per implementation and length, with TFLOP/s (causal FLOPs,
``benchmarks/attention_prefill.causal_flops``) and the largest difference from our kernel's
output. GPU only (Hopper).

    python3 benchmarks/prefill_fa3_bench.py [--lengths 4096,32768] [--new 2048] [--stages 2,3,4]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.prefill_fa3 import HEAD_DIM, prefill_fa3  # noqa: E402


def _sdpa_cudnn(q, k, v, table, seq_len, n_new):
    """A callable: torch SDPA's cuDNN backend on the chunk over dense, head-expanded K/V with a
    bottom-right causal mask (the chunk's queries are the last ``n_new`` positions)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    def dense(c):  # [pages, Hkv, 64, D] -> [1, Hq, seq_len, D]
        x = c[table.long()].permute(1, 0, 2, 3).reshape(c.shape[1], -1, HEAD_DIM)[:, :seq_len]
        return x.repeat_interleave(q.shape[1] // c.shape[1], dim=0)[None].contiguous()

    q4, k4, v4 = q.transpose(0, 1)[None].contiguous(), dense(k), dense(v)
    mask = causal_lower_right(n_new, seq_len)

    def run():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = torch.nn.functional.scaled_dot_product_attention(q4, k4, v4, attn_mask=mask)
        return out[0].transpose(0, 1)
    return run


def bench_length(seq_len: int, n_new: int, stages: list[int], rep_ms: int):
    """Yields a record per implementation: the last ``n_new`` queries of a ``seq_len`` sequence
    (Qwen3-8B heads, scrambled pages), CUDA-graph replays from a cold L2 (``bench_graph``)."""
    from benchmarks.attention_common import HQ, make_pool
    from benchmarks.attention_prefill import causal_flops
    from benchmarks.timing import bench_graph
    from kernels.prefill_attention import prefill_attention

    k, v, _, _, table, seq_lens = make_pool(seq_len, "bf16")
    q = torch.randn(n_new, HQ, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    qsl = torch.tensor([0, n_new], dtype=torch.int32, device="cuda")
    ref = torch.empty_like(q)
    cases = [("triton", {}, lambda: prefill_attention(
        q, k, v, seq_lens, qsl, table, max_query_len=n_new, sm_scale=None, out=ref))]
    cases[0][2]()
    for st in stages:
        cases.append(("fa3_gluon", {"stages": st}, lambda out=torch.empty_like(q), st=st:
                      prefill_fa3(q, k, v, table[0], seq_len, n_new, out=out, stages=st)))
    cases.append(("sdpa_cudnn", {}, None))  # built in the try: cuDNN may refuse it
    for name, extra, fn in cases:
        rec = {"what": "prefill", "positions": seq_len, "new_tokens": n_new, "impl": name,
               **extra}
        try:
            fn = fn or _sdpa_cudnn(q, k, v, table[0], seq_len, n_new)
            got = fn()  # the same chunk: the outputs agree to bf16 rounding
            rec["max_abs_diff_vs_triton"] = (got.float() - ref.float()).abs().max().item()
            ms = bench_graph(fn, rep_ms)
            rec.update(us=round(ms * 1e3, 1),
                       **{"TFLOP/s": round(causal_flops(n_new, seq_len) / ms / 1e9, 1)})
        except Exception as e:  # noqa: BLE001 (e.g. cuDNN refusing the mask or the graph)
            rec["error"] = f"{type(e).__name__}: {e}"[:300]
        yield rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="4096,32768")
    ap.add_argument("--new", type=int, default=2048, help="queries of the chunk at the end")
    ap.add_argument("--stages", default="2,3,4", help="ring depths of the FA3 kernel to time")
    ap.add_argument("--rep-ms", type=int, default=200)
    args = ap.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        raise SystemExit("needs a Hopper GPU")
    print(json.dumps({"what": "device", "name": torch.cuda.get_device_name()}))
    stages = [int(x) for x in args.stages.split(",") if x]
    for seq_len in (int(x) for x in args.lengths.split(",") if x):
        for rec in bench_length(seq_len, min(args.new, seq_len), stages, args.rep_ms):
            print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
