"""The L2 prefetch of each decode program's first K/V pages (``kernels/kv_prefetch.py``,
``DecodeTiles.l2_prefetch_blocks``, ``kernels.tiles.DECODE_L2_PREFETCH``).

CPU: the page count a block count asks for, the tiles' bounds, the switch, and that the
launcher runs unchanged with it set (the interpreter runs no PTX: it passes 0 pages). GPU: stage
1 gives the same bits with and without the prefetch (BF16 and INT8 pools at the Qwen3-8B head
shape, short and padding sequences, 1 and 4 blocks; the BF16 prologue too), and the engine's
greedy tokens are the same with the switch on and off, graphs and eager.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from decode_case import Case
from prologue_case import Step

import kernels.gemv
import kernels.tiles
from kernels.kv_prefetch import prefetch_pages
from kernels.tiles import DecodeTiles, decode_tiles


def test_prefetch_pages_cover_the_blocks_as_a_power_of_two():
    assert prefetch_pages(0, 128, 64) == 0
    assert prefetch_pages(1, 128, 64) == 2  # a 128-key block is two pages of 64
    assert prefetch_pages(1, 64, 64) == 1
    assert prefetch_pages(1, 16, 64) == 1  # part of one page
    assert prefetch_pages(3, 64, 64) == 4  # rounded up to a power of two
    assert prefetch_pages(16, 128, 64) == 32  # capped at 32 lanes per tensor


def test_tiles_bound_the_block_count_and_the_switch_sets_one(monkeypatch):
    with pytest.raises(ValueError, match="l2_prefetch_blocks"):
        DecodeTiles(block_n=64, num_warps=4, num_stages=2, l2_prefetch_blocks=-1)
    with pytest.raises(ValueError, match="l2_prefetch_blocks"):
        DecodeTiles(block_n=64, num_warps=4, num_stages=2, l2_prefetch_blocks=17)
    assert decode_tiles("cpu", torch.bfloat16).l2_prefetch_blocks == 0
    monkeypatch.setattr(kernels.tiles, "DECODE_L2_PREFETCH", True)
    assert decode_tiles("cpu", torch.bfloat16).l2_prefetch_blocks == 1
    assert decode_tiles("cpu", torch.int8).l2_prefetch_blocks == 1


@pytest.mark.parametrize("int8", [False, True])
def test_cpu_launch_with_prefetch_blocks_is_unchanged(int8):
    torch.manual_seed(0)
    case = Case([37, 130, 0], 1, 2, 2, 16, 8, torch.float32, int8)
    want = case.run(num_splits=2)
    got = case.run(num_splits=2, l2_prefetch_blocks=2)
    assert torch.equal(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("blocks", [1, 4])
def test_gpu_prefetch_leaves_stage1_bit_exact(int8, blocks):
    torch.manual_seed(0)
    case = Case([4100, 37, 0, 33000], 1, 8, 4, 128, 64, torch.bfloat16, int8, device="cuda")
    base = case.tiles()
    assert base.l2_prefetch_blocks == 0
    want = case.run()
    got = case.run(l2_prefetch_blocks=blocks)
    assert torch.equal(got, want)
    torch.testing.assert_close(got.float(), case.expected(), atol=3e-2, rtol=3e-2)


@pytest.mark.gpu
def test_gpu_prefetch_with_the_prologue_is_bit_exact(monkeypatch):
    outs = []
    for on in (False, True):
        monkeypatch.setattr(kernels.tiles, "DECODE_L2_PREFETCH", on)
        step = Step([4100, 0, 37], 1, 4, torch.bfloat16, False, kv_heads=8, head_dim=128,
                    page=64, device="cuda")
        outs.append((step.fused(None), step.cache.k.clone(), step.cache.v.clone()))
    for a, b in zip(*outs, strict=True):
        assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("kv", ["bf16", "int8"])
def test_gpu_engine_tokens_unchanged(gpu_qwen3_4l, monkeypatch, kv):
    from mock_engine import greedy_by_flag

    out = greedy_by_flag(gpu_qwen3_4l, kv, monkeypatch, kernels.tiles, "DECODE_L2_PREFETCH")
    assert len(out[True, True]) == 40
    assert out[True, True] == out[False, True] == out[True, False] == out[False, False]


def test_replace_keeps_the_other_fields():
    base = decode_tiles("cpu", torch.bfloat16)
    assert dataclasses.replace(base, l2_prefetch_blocks=2).block_n == base.block_n


def test_qkv_tiles_signal_early_only_when_switched_on(monkeypatch):
    import kernels.pdl_chain
    from models.qwen3_fused import qkv_tiles

    x, w = torch.zeros(1, 64), torch.zeros(96, 64)
    assert qkv_tiles(x, w) is None
    monkeypatch.setattr(kernels.pdl_chain, "QKV_EARLY_SIGNAL", True)
    tiles = qkv_tiles(x, w)
    assert tiles.early_signal and tiles.block_n == kernels.gemv.gemv_tiles(
        x.device, x.dtype, 96, 64, swiglu=False).block_n
    assert qkv_tiles(torch.zeros(17, 64), w) is None  # a prefill chunk: cuBLAS, no tiles


@pytest.mark.gpu
@pytest.mark.parametrize("kv", ["bf16", "int8"])
def test_gpu_engine_tokens_unchanged_with_early_signal(gpu_qwen3_4l, monkeypatch, kv):
    from mock_engine import greedy_by_flag

    import kernels.pdl_chain

    monkeypatch.setattr(kernels.tiles, "DECODE_L2_PREFETCH", True)
    out = greedy_by_flag(gpu_qwen3_4l, kv, monkeypatch, kernels.pdl_chain, "QKV_EARLY_SIGNAL")
    assert len(out[True, True]) == 40
    assert out[True, True] == out[False, True] == out[True, False] == out[False, False]
