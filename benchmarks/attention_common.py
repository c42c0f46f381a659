"""Shared pieces of the attention benchmark (``benchmarks/attention.py``): the Qwen3-8B attention
shape, the scrambled paged pool both decode and prefill cases read, the eager timer, the one-line
error text of a failed case's record, and the ``--lengths`` parser (``benchmarks/decode_floor.py``
uses it too).
"""

from __future__ import annotations

import math
import sys

import torch

from kernels.reference import quantize_int8

HQ, HKV, D, PAGE = 32, 8, 128, 64
DEVICE = "cuda"


def bench(fn, rep_ms: int) -> float:
    """Median milliseconds of ``fn`` as launched (cold L2 before each run)."""
    from benchmarks.timing import bench_eager
    return bench_eager(fn, rep_ms)


def error_text(e: Exception) -> str:
    """One line for a record's ``error`` (keeps no reference to the traceback or its tensors)."""
    return f"{type(e).__name__}: {e}"[:300]


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
        v = v.transpose(2, 3).contiguous()  # INT8 pools store V pages transposed
    table = torch.randperm(num_pages, device=DEVICE)[:n_pages].to(torch.int32)[None, :]
    seq_lens = torch.tensor([seq_len], dtype=torch.int32, device=DEVICE)
    return k, v, ks, vs, table, seq_lens


def parse_lengths(text: str) -> list[int]:
    """``--lengths`` ("4096,32768") as positive ints; exits with a one-line message otherwise."""
    try:
        lengths = [int(x) for x in text.split(",") if x]
    except ValueError:
        sys.exit(f"--lengths must be comma-separated integers, got {text!r}")
    if not lengths or min(lengths) < 1:
        sys.exit(f"--lengths must be positive integers, got {text!r}")
    return lengths
