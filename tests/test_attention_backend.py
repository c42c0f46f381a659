"""The Triton attention backend equals the reference backend, step by step and end to end.

CPU: kernels under the Triton interpreter in float32 on a tiny shape. GPU (``-m gpu``): bfloat16.
"""

from __future__ import annotations

import pytest
import torch

from infer.attention import MAX_DECODE_QUERIES, ReferenceAttention, TritonAttention
from infer.config import EngineConfig
from infer.engine import Engine
from infer.kv_pool import KVPool
from infer.meta import build_meta
from infer.sampling_params import SamplingParams


def _pools(kv_cache, dtype, device, kv_heads=2, head_dim=32, page_size=16, num_pages=12):
    return [KVPool(1, kv_heads, head_dim, num_pages, page_size, kv_cache, dtype, device)
            for _ in range(2)]


def _run_steps(kv_cache, dtype, device, steps, hq=8, kv_heads=2, head_dim=32, page_size=16):
    """Feed the same steps (lists of new-token counts per sequence) to both backends."""
    ref_pool, tri_pool = _pools(kv_cache, dtype, device, kv_heads, head_dim, page_size)
    ref = ReferenceAttention(ref_pool)
    tri = TritonAttention(tri_pool, max_batch=2, group=hq // kv_heads)
    # Scrambled page order: sequence b owns every other page, from the top.
    pages = [list(range(11 - b, -1, -2)) for b in range(2)]
    cached = [0, 0]
    for news in steps:
        seqs = [(pages[b], cached[b], n) for b, n in enumerate(news)]
        meta = build_meta(seqs, page_size, device)
        t = meta.num_tokens
        q = torch.randn(t, hq, head_dim, device=device, dtype=dtype)
        k = torch.randn(t, kv_heads, head_dim, device=device, dtype=dtype)
        v = torch.randn(t, kv_heads, head_dim, device=device, dtype=dtype)
        want = ref(0, q, k, v, meta)
        got = tri(0, q, k, v, meta)
        tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4,
                                                                                atol=1e-4)
        torch.testing.assert_close(got.float(), want.float(), **tol)
        cached = [c + n for c, n in zip(cached, news, strict=True)]


@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_triton_backend_matches_reference_cpu(kv_cache):
    # Prefill chunks of unequal lengths (prefill kernel), then uniform steps of 1 and 3 new
    # tokens (decode kernel), crossing page boundaries.
    _run_steps(kv_cache, torch.float32, "cpu", [[17, 5], [1, 1], [3, 3], [1, 1]])


def test_decode_threshold_routes_long_uniform_steps_to_prefill():
    # A uniform step longer than MAX_DECODE_QUERIES must still be right (prefill kernel).
    _run_steps("bf16", torch.float32, "cpu", [[MAX_DECODE_QUERIES + 1, MAX_DECODE_QUERIES + 1]])


def test_engine_greedy_triton_equals_reference_cpu(tiny_ckpt):
    prompt = list(range(100, 140))
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    outs = []
    for attention in ("reference", "triton"):
        eng = Engine(EngineConfig(tiny_ckpt, ctx=128, page_size=16, prefill_chunk=24,
                                  device="cpu", attention=attention))
        outs.append(list(eng.new_session().generate(prompt, greedy)))
    assert len(outs[0]) == 6
    assert outs[0] == outs[1]


@pytest.mark.gpu
@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_triton_backend_matches_reference_gpu(kv_cache):
    _run_steps(kv_cache, torch.bfloat16, "cuda", [[200, 77], [1, 1], [4, 4], [1, 1]],
               hq=32, kv_heads=8, head_dim=128, page_size=64)
