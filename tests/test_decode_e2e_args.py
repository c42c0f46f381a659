"""``benchmarks/decode_e2e.py``'s arguments that need no GPU: ``--decode-tiles`` (checked, then
applied to ``kernels.tiles`` and seen by ``decode_tiles`` and the split count) and the variant
flags (``default-X``, ``base+X``)."""

from __future__ import annotations

import pytest
import torch
from launch_specs import gpu_facts

import kernels.tiles
from benchmarks.decode_e2e import (
    SHIPPED,
    apply_decode_tiles,
    decode_tile_overrides,
    parse_variants,
    set_variant,
)
from kernels.decode_plan import default_num_splits


@pytest.mark.parametrize("text, match", [
    ("not json", "not JSON"),
    ("[1]", "JSON object"),
    ('{"fp8": {"num_warps": 4}}', "one of bf16, int8, gemv_wide"),
    ('{"int8": 4}', "one of bf16"),
    ('{"gemv_wide": {"block_n": 8}}', "block_n and block_k must be >= 16"),
    ('{"gemv_narrow": {"split": 2}}', "split"),
    ('{"int8": {"num_warpz": 1}}', "num_warpz"),
    ('{"int8": {"num_warps": 3}}', "power of two"),
    ('{"bf16": {"programs_per_sm": 0}}', "programs_per_sm"),
])
def test_bad_decode_tiles_raise(text, match):
    with pytest.raises(ValueError, match=match):
        decode_tile_overrides(text)


def test_decode_tiles_replace_the_defaults(monkeypatch):
    """The INT8 tile of before (one warp, eight programs an SM) as an override: ``decode_tiles``
    returns it and the split count follows; the 16-bit tile is untouched."""
    monkeypatch.setattr(kernels.tiles, "_DECODE_INT8", kernels.tiles._DECODE_INT8)
    monkeypatch.setattr(kernels.tiles, "_DECODE_16BIT", kernels.tiles._DECODE_16BIT)
    gpu = torch.device("cuda", 0)  # never touched: gpu_facts answers for it
    with gpu_facts():  # an H200's tiles, on paper
        bf16 = kernels.tiles.decode_tiles(gpu, torch.bfloat16)
        assert kernels.tiles.decode_tiles(gpu, torch.int8).num_warps == 4
        assert default_num_splits(1, 8, gpu, torch.int8) == 66
        apply_decode_tiles(decode_tile_overrides(
            '{"int8": {"num_warps": 1, "programs_per_sm": 8}}'))
        int8 = kernels.tiles.decode_tiles(gpu, torch.int8)
        assert (int8.num_warps, int8.programs_per_sm, int8.block_n) == (1, 8, 64)
        assert default_num_splits(1, 8, gpu, torch.int8) == 132
        assert kernels.tiles.decode_tiles(gpu, torch.int8, rows=64).num_warps == 4  # big tile
        assert kernels.tiles.decode_tiles(gpu, torch.bfloat16) == bf16


def test_gemv_tiles_replace_the_defaults(monkeypatch):
    """A GEMV class's tile as an override: ``gemv_tiles`` returns it for that class only (an
    H200's on paper), with split-K still picked for the new tile and float32 still halving the
    columns."""
    for name in ("_GEMV_WIDE", "_GEMV_NARROW", "_GEMV_SWIGLU"):
        monkeypatch.setattr(kernels.tiles, name, getattr(kernels.tiles, name))
    gpu = torch.device("cuda", 0)
    with gpu_facts():
        qkv = kernels.tiles.gemv_tiles(gpu, torch.bfloat16, 6144, 4096, False)
        o = kernels.tiles.gemv_tiles(gpu, torch.bfloat16, 4096, 4096, False)
        small_o = kernels.tiles.gemv_tiles(gpu, torch.bfloat16, 1024, 2048, False)
        assert (qkv.block_n, qkv.block_k, qkv.num_stages) == (64, 128, 5)
        assert small_o.split_k == 4  # a 0.6B's o_proj: 32 programs on 132 SMs
        assert kernels.tiles.gemv_tiles(gpu, torch.bfloat16, 1024, 8192, False).split_k == 4
        apply_decode_tiles(decode_tile_overrides(
            '{"gemv_wide": {"block_n": 16, "block_k": 256, "num_stages": 6, "num_warps": 8},'
            ' "gemv_narrow": {"block_n": 64}}'))
        wide = kernels.tiles.gemv_tiles(gpu, torch.bfloat16, 6144, 4096, False)
        assert (wide.block_n, wide.block_k, wide.num_stages, wide.num_warps) == (16, 256, 6, 8)
        assert kernels.tiles.gemv_tiles(gpu, torch.float32, 6144, 4096, False).block_k == 128
        assert kernels.tiles._GEMV_NARROW.block_n == 64
        # [1024, 8192]: 32 programs of 32 rows took 4 splits, 16 of 64 rows take 8
        narrow = kernels.tiles.gemv_tiles(gpu, torch.bfloat16, 1024, 8192, False)
        assert (narrow.block_n, narrow.split_k) == (64, 8)
        assert kernels.tiles.gemv_tiles(gpu, torch.bfloat16, 4096, 4096, False) != o
        swiglu = kernels.tiles.gemv_tiles(gpu, torch.bfloat16, 12288, 4096, True)
        assert (swiglu.block_n, swiglu.block_k, swiglu.num_stages, swiglu.split_k) == (
            32, 128, 3, 1)


def test_variants_set_the_flags():
    assert parse_variants("default, default-keyed_noise,base+split_k") == [
        "default", "default-keyed_noise", "base+split_k"]
    with pytest.raises(ValueError, match="unknown variant part"):
        parse_variants("default+nope")
    from benchmarks.decode_e2e import FLAGS
    try:
        set_variant("default-keyed_noise")
        module, attr = FLAGS["keyed_noise"]
        assert getattr(module, attr) is False
        module, attr = FLAGS["split_k"]
        assert getattr(module, attr) == SHIPPED["split_k"]
        set_variant("base+split_k")
        assert all(getattr(m, a) == (key == "split_k") for key, (m, a) in FLAGS.items())
    finally:
        set_variant("default")
    assert all(getattr(m, a) == SHIPPED[key] for key, (m, a) in FLAGS.items())
