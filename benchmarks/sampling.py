"""The pick of the next token on a GPU: greedy and top-k sampling through Triton kernels against
the torch ops, per decode step, inside a CUDA graph.

For ``--rows`` rows of float32 logits over Qwen3's 151936 columns (``compute_logits`` gives
float32; 151669 usable ids), each measurement captures ``--calls`` picks in one CUDA graph (as
in a decode step: graph launch amortized, the gaps between kernels included) and prints one JSON
line with the microseconds per pick:

- ``greedy``: ``infer.sampling.sample`` at temperature 0 (``kernels.greedy``, 2 kernels);
- ``torch``: Qwen3's sampling (temperature 0.6, top-k 20, top-p 0.95) through torch's ops
  (``FUSED_TOPK`` off);
- ``fused``: the same through ``kernels.topk_sample`` (the noise and 2 kernels), for each stage-1
  block of ``--blocks`` and stage-2 warp count of ``--warps`` (``GPU_BLOCK``, ``STAGE2_WARPS``);
- ``kernels``: the two kernels alone (the noise drawn once outside the graph);
- ``noise``: the Exp(1) draw alone (``torch.Tensor.exponential_``).

The ceiling is reading the logits once at the card's read bandwidth (``bytes`` / ``read_gbps``):
far below a kernel launch, so launches and the dependent reductions decide these figures.

    PYTHONPATH=. python benchmarks/sampling.py --rows 1 8
"""

from __future__ import annotations

import argparse
import json

import torch

import infer.sampling as sampling
import kernels.topk_sample as topk
from benchmarks.run_info import run_info
from benchmarks.timing import bench_graph_many, read_bandwidth
from infer.sampling_params import SamplingParams

VOCAB, LIMIT = 151936, 151669
DEVICE = "cuda"  # a smoke test may swap it
QWEN3 = SamplingParams(temperature=0.6, top_k=20, top_p=0.95)


def per_call_us(fn, calls: int) -> float:
    """Microseconds per call of ``fn``, ``calls`` of them in one graph."""
    return bench_graph_many([fn] * calls) * 1e3 / calls


def measure(rows: int, calls: int, blocks: list[int], warps: list[int], gbps: float) -> None:
    """Print the JSON lines (module notes) for ``rows`` rows."""
    x = torch.randn(rows, VOCAB, device=DEVICE) * 4
    floor_us = x.numel() * 4 / gbps / 1e3

    def line(what: str, us: float, **extra) -> None:
        print(json.dumps({"what": what, "rows": rows, "us_per_pick": round(us, 2),
                          "bytes": x.numel() * 4, "read_gbps": round(gbps),
                          "ceiling_us": round(floor_us, 2), **extra}), flush=True)

    def pick(params: SamplingParams) -> None:
        sampling.sample(x, params, vocab_limit=LIMIT)

    line("greedy", per_call_us(lambda: pick(SamplingParams(temperature=0.0)), calls))
    sampling.FUSED_TOPK = False
    line("torch", per_call_us(lambda: pick(QWEN3), calls))
    sampling.FUSED_TOPK = True
    noise = torch.empty((rows, QWEN3.top_k), device=DEVICE).exponential_()
    line("noise", per_call_us(lambda: torch.empty_like(noise).exponential_(), calls))
    block0, warps0 = topk.GPU_BLOCK, topk.STAGE2_WARPS
    for block in blocks:
        for w in warps:
            topk.GPU_BLOCK, topk.STAGE2_WARPS = block, w or None
            tag = {"block": block, "stage2_warps": w or "auto"}
            line("fused", per_call_us(lambda: pick(QWEN3), calls), **tag)
            line("kernels", per_call_us(lambda: topk.topk_sample(
                x, noise, 20, 0.6, 0.95, 0.0, LIMIT), calls), **tag)
    topk.GPU_BLOCK, topk.STAGE2_WARPS = block0, warps0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--calls", type=int, default=20, help="picks per graph")
    ap.add_argument("--blocks", type=int, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--warps", type=int, nargs="+", default=[0, 4, 16],
                    help="stage-2 warps (0: the launcher's choice)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    print(json.dumps(run_info("cuda")), flush=True)
    gbps = read_bandwidth()
    for rows in args.rows:
        measure(rows, args.calls, args.blocks, args.warps, gbps)


if __name__ == "__main__":
    main()
