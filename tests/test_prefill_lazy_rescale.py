"""Conditional rescaling in paged prefill attention (``PrefillTiles.lazy_rescale``,
``kernels/prefill_blocks.py``'s ``LAZY``; FlashAttention-4), on the CPU (Triton interpreter):
against ``kernels.reference.paged_attention`` with float16/float32 pools, whole prompts and chunks
after a cached prefix, with keys whose scores stay within 2^8 of the first blocks' (no rescale
after the first block) and keys of a later page scaled up (the running max moves mid-walk);
an INT8 pool with the int8 query halves (a row scale); and the picker's flag. The GPU case
(``-m gpu``): bfloat16 at 32 / 8 heads, head_dim 128, against the default tiles.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import nmse
from prefill_case import INT8_NMSE_BOUND, check, make_step, run_kernel

from kernels import tiles as tiles_module
from kernels.tiles import prefill_tiles


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("spec", [[(0, 80)], [(40, 37)], [(37, 21), (0, 50)]])
def test_lazy_rescale_matches_reference(dtype, spec):
    q, cache, meta, _ = make_step(spec, hkv=2, group=2, dtype=dtype)
    check(q, cache, meta, lazy_rescale=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_lazy_rescale_when_a_later_block_raises_the_max(dtype):
    # the keys of the sequence's third page (positions 32-47) are 8x larger: their scores pass
    # the earlier max by far more than 2^8 (log2 units) for most rows, so the tile must rescale
    # mid-walk; later pages then fall back under the new max
    q, cache, meta, kvs = make_step([(0, 96)], dtype=dtype)
    page = int(meta.page_table[0, 2])
    cache.k[page] *= 8
    k = kvs[0][0].clone()
    k[32:48] *= 8
    log2_scores = (q.float()[:, 0] @ k[:, 0].T) * q.shape[2] ** -0.5 * 1.4426950408889634
    late_rows = log2_scores[48:]  # rows that see both the first pages and the scaled one
    grew = late_rows[:, 32:48].max(1).values - late_rows[:, :32].max(1).values > 8
    assert grew.float().mean() > 0.5  # the case exercises the rescale
    check(q, cache, meta, lazy_rescale=True)


@pytest.mark.parametrize("qk_int8", [True, False], ids=["qk_int8", "convert"])
def test_lazy_rescale_int8_pool(qk_int8):
    q, cache, meta, _ = make_step([(29, 40), (0, 18)], hkv=2, group=2, kv="int8")
    lazy = check(q, cache, meta, qk_int8=qk_int8, lazy_rescale=True)
    eager = run_kernel(q, cache, meta, qk_int8=qk_int8)
    assert nmse(lazy, eager) < INT8_NMSE_BOUND


def test_prefill_tiles_take_the_flag(monkeypatch):
    kw = dict(max_query_len=64, page_size=16, head_dim=16)
    assert not prefill_tiles("cpu", torch.float16, torch.float16, **kw).lazy_rescale
    monkeypatch.setattr(tiles_module, "PREFILL_LAZY_RESCALE", True)
    assert prefill_tiles("cpu", torch.float16, torch.float16, **kw).lazy_rescale


@pytest.mark.gpu
@pytest.mark.parametrize("cached,new", [(0, 4096), (28672, 4096)])
def test_gpu_lazy_rescale_bf16(cached, new):
    q, cache, meta, _ = make_step([(cached, new)], hkv=8, group=4, head_dim=128, page_size=64,
                                  dtype=torch.bfloat16, device="cuda")
    default = prefill_tiles(q.device, q.dtype, cache.k.dtype, max_query_len=new, page_size=64,
                            head_dim=128)
    lazy = run_kernel(q, cache, meta, **dict(dataclasses.asdict(default), lazy_rescale=True))
    plain = run_kernel(q, cache, meta, **dataclasses.asdict(default))
    err = nmse(lazy, plain)
    print(f"\nprefill bf16 {cached}+{new}: lazy rescale vs default NMSE {err:.2e}")
    assert torch.isfinite(lazy).all() and err < 1e-5
