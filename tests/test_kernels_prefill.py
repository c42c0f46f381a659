"""Paged prefill attention (kernels/prefill_attention.py) against kernels/reference.paged_attention.

CPU (Triton interpreter, float16/float32, tiny shapes): lengths around page boundaries, chunks after
a cached prefix, two sequences with different chunk lengths, GQA groups 1/4/5, tile shapes that
split or span pages, pages in scrambled order, stale NaN in unused slots, page ids whose element
offsets pass 2^31; the default tiles and TMA fallback. INT8 pools and the int8 query halves are
``test_kernels_prefill_int8.py``'s.
GPU (``pytest -m gpu``): bfloat16 and INT8, 32 query / 8 KV heads, head_dim 128, page 64, at 1k,
32k and 128k positions against a float32 reference computed in query chunks.
"""

from __future__ import annotations

import pytest
import torch
from conftest import nmse
from prefill_case import INT8_NMSE_BOUND, TOL, check, make_step, run_kernel

from kernels import reference as ref
from kernels.pool_tma import tma_ok
from kernels.prefill_attention import prefill_attention
from kernels.tiles import prefill_tiles


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("seq_len", [1, 15, 16, 17, 53])
def test_whole_prompt_lengths_around_page_boundaries(seq_len, dtype):
    q, cache, meta, _ = make_step([(0, seq_len)], group=2, dtype=dtype)
    last = meta.page_table[0, (seq_len - 1) // 16]
    # The unused slots of the last page hold NaN: the output must not see them.
    assert torch.isnan(cache.v[last, :, seq_len % 16 or 16:]).all()
    check(q, cache, meta)


@pytest.mark.parametrize("cached,new", [(1, 1), (15, 2), (16, 16), (19, 20), (39, 1), (48, 33)])
def test_chunk_after_cached_prefix(cached, new):
    q, cache, meta, _ = make_step([(cached, new)])
    check(q, cache, meta)


@pytest.mark.parametrize("group", [1, 4, 5])
def test_two_sequences_gqa(group):
    q, cache, meta, _ = make_step([(37, 21), (0, 9)], hkv=2, group=group)
    check(q, cache, meta)


@pytest.mark.parametrize("block_m,block_n,tma", [(16, 8, False), (32, 16, False),
                                               (16, 32, False), (64, 64, False),
                                               (16, 8, True), (32, 16, True)])
def test_tile_shapes_split_or_span_pages(block_m, block_n, tma):
    # block_n 8 splits a page, 32/64 span pages; block_m 64 covers both chunks in one tile;
    # tma: K/V tiles through tensor descriptors (whole-page tiles, zeroed past the diagonal).
    q, cache, meta, _ = make_step([(22, 30), (5, 12)])
    out = torch.full_like(q, 7.0)
    assert check(q, cache, meta, block_m=block_m, block_n=block_n, out=out, sm_scale=0.3,
                 use_tma=tma) is out


def test_oversized_grid_and_empty_sequence():
    # max_query_len larger than any chunk, a sequence with no new token (n_b = 0), and rows past
    # query_start_loc[B]: tiles past n_b exit, rows outside every sequence stay untouched.
    q, cache, meta, _ = make_step([(10, 5), (3, 4), (0, 7)])
    meta.query_start_loc = torch.tensor([0, 5, 5, 12], dtype=torch.int32)
    meta.seq_lens[1] = 3  # sequence 1 adds nothing this step
    out = torch.full_like(q, 7.0)
    run_kernel(q, cache, meta, out=out, max_query_len=40)
    expect = ref.paged_attention(q.float(), cache, meta)
    torch.testing.assert_close(out[:12].float(), expect[:12], **TOL[q.dtype])
    assert (out[12:] == 7.0).all()


@pytest.mark.parametrize("kv,dtype,tma", [("int8", torch.float16, False),
                                          ("float", torch.float32, False),
                                          ("int8", torch.float16, True)])
def test_page_offsets_past_2_31(kv, dtype, tma):
    # One page of one head is 16 x 16 elements: page ids past 2^23 put element offsets past 2^31.
    # torch.empty maps the pool lazily, so only the pages written here take memory.
    per_page = 16 * 16
    num_pages = (1 << 31) // per_page + 64
    pages = [num_pages - 1, 5, num_pages - 40, num_pages - 2, 0, num_pages - 17]
    q, cache, meta, _ = make_step([(20, 13), (0, 30)], kv=kv, dtype=dtype, num_pages=num_pages,
                                  pages=pages, fill_nan=False)
    assert max(pages) * per_page > 2**31
    check(q, cache, meta, use_tma=tma)


def test_rejects_unsupported_inputs():
    q, cache, meta, _ = make_step([(0, 4)])
    with pytest.raises(ValueError, match="needs torch.float16 queries|float16 queries"):
        run_kernel(q.float(), cache, meta)
    with pytest.raises(ValueError, match="block_n"):
        run_kernel(q, cache, meta, block_n=24)
    qi, ci, mi, _ = make_step([(0, 4)], kv="int8")
    with pytest.raises(ValueError, match="k_scale and v_scale"):
        prefill_attention(qi, ci.k, ci.v, mi.seq_lens, mi.query_start_loc, mi.page_table,
                          max_query_len=4, sm_scale=None)
    with pytest.raises(ValueError, match="qk_int8 needs"):
        run_kernel(qi.float(), ci, mi, qk_int8=True)  # float32 queries keep the converting path
    with pytest.raises(ValueError, match="qk_int8 needs"):
        run_kernel(q, cache, meta, qk_int8=True)  # a 16-bit pool


# ---------------------------------------------------------------------------------------------
# GPU: real shapes, bfloat16 and INT8, against float32 references computed in query chunks.


def chunked_reference(q, meta, kvs):
    """float32 causal attention per sequence, a few hundred queries at a time (bounded memory).

    ``kvs``: per sequence float32 K/V [S, Hkv, D] (gathered from the pool, or unquantized)."""
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    qsl = meta.query_start_loc.tolist()
    for b, (k, v) in enumerate(kvs):
        lo, hi = qsl[b], qsl[b + 1]
        s = k.shape[0]
        ctx = s - (hi - lo)
        chunk = max(16, (1 << 30) // (q.shape[1] * s))
        for c0 in range(lo, hi, chunk):
            c1 = min(hi, c0 + chunk)
            end = ctx + (c1 - lo)  # keys the chunk's last query sees
            out[c0:c1] = ref.dense_causal_attention(q[c0:c1], k[:end], v[:end],
                                                    q_offset=ctx + (c0 - lo))
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("tma", [False, True], ids=["ptr", "tma"])
@pytest.mark.parametrize("kv", ["bf16", "int8", "int8-convert"])
@pytest.mark.parametrize("cached,new", [(0, 1024), (0, 32768), (131072, 512)])
def test_gpu_long_context(kv, cached, new, tma):
    # int8: the default (scores from int8 query halves); int8-convert: key codes converted
    torch.manual_seed(1)
    convert = kv == "int8-convert"
    kv = "int8" if convert else kv
    q, cache, meta, kvs = make_step([(cached, new)], page_size=64, hkv=8, group=4, head_dim=128,
                                    dtype=torch.bfloat16, kv="int8" if kv == "int8" else "float",
                                    device="cuda")
    out = run_kernel(q, cache, meta, use_tma=tma, **({"qk_int8": False} if convert else {}))
    torch.cuda.synchronize()
    pooled = [ref.gather_kv(cache, meta.page_table[0], cached + new)]
    expect = chunked_reference(q, meta, pooled)
    err = (out.float() - expect).abs().max().item()
    name = (f"prefill {kv}{'-convert' if convert else ''} {'tma' if tma else 'ptr'} "
            f"cached={cached} new={new}")
    print(f"\n{name}: max |err| vs float32 reference of the pool = {err:.3e}, "
          f"NMSE = {nmse(out, expect):.2e}")
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), expect, **TOL[torch.bfloat16])
    if kv == "int8":
        full = chunked_reference(q, meta, kvs)
        e = nmse(out, full)
        print(f"{name}: NMSE vs full precision = {e:.2e}")
        assert e < INT8_NMSE_BOUND


def test_tma_default_falls_back_where_a_descriptor_cannot_describe_the_pool():
    """The default TMA loads need page/head strides that are multiples of D and an aligned base;
    other pools take pointer loads instead of failing (the check is host-side, CPU-testable)."""
    pool = torch.zeros(4, 2, 16, 32, dtype=torch.float16)
    assert tma_ok(pool)
    odd = torch.zeros(5000, dtype=torch.float16).as_strided((4, 2, 16, 32), (1040, 512, 32, 1))
    assert not tma_ok(odd)  # a page stride of 1040 elements is not a multiple of D = 32
    shifted = torch.zeros(4 * 2 * 16 * 32 + 1, dtype=torch.float16)[1:].view(4, 2, 16, 32)
    assert not tma_ok(shifted)  # base 2 bytes past an aligned address


def test_default_tiles_on_hopper_and_older_gpus(monkeypatch):
    """``prefill_tiles``'s choices, without a GPU (capability faked): Hopper TMA tiles take 6
    stages (INT8: 7) and 8 warps at 128 rows; pointer loads, float32 operands and head_dim 256
    keep the 4-warp, 3-stage tiles; int8 scoring where supported, staged queries on sm_90 only;
    sm_80 is unchanged."""
    from kernels import device

    cuda = torch.device("cuda", 0)
    bf16, i8, f32 = torch.bfloat16, torch.int8, torch.float32

    def tiles(q=bf16, kv=bf16, mql=32768, page=64, d=128, tma=True):
        t = prefill_tiles(cuda, q, kv, max_query_len=mql, page_size=page, head_dim=d, tma=tma)
        return (t.block_m, t.block_n, t.num_warps, t.num_stages, t.use_tma)

    monkeypatch.setattr(device, "_capability", lambda index: (9, 0))
    assert tiles() == (128, 64, 8, 6, True)
    assert tiles(kv=i8) == (64, 64, 4, 7, True)
    assert tiles(mql=40) == (64, 64, 4, 6, True)  # a short chunk
    assert tiles(page=16) == (128, 16, 8, 6, True)
    assert tiles(tma=False) == (128, 64, 4, 3, False)
    assert tiles(q=f32, kv=f32) == (128, 64, 4, 3, True)
    assert tiles(kv=i8, d=256) == (64, 64, 4, 3, True)
    assert tiles(page=8) == (128, 64, 8, 3, False)  # pages < 16
    hopper_i8 = prefill_tiles(cuda, bf16, i8, max_query_len=64, page_size=64, head_dim=128)
    assert hopper_i8.qk_int8 and hopper_i8.stage_q
    assert not prefill_tiles(cuda, f32, i8, max_query_len=64, page_size=64, head_dim=128).qk_int8
    assert not prefill_tiles(cuda, bf16, bf16, max_query_len=64, page_size=64,
                             head_dim=128).qk_int8
    monkeypatch.setattr(device, "_capability", lambda index: (8, 0))
    assert tiles() == (128, 64, 8, 2, False)
    assert tiles(kv=i8) == (128, 64, 8, 2, False)
    assert tiles(kv=i8, mql=32) == (32, 64, 4, 2, False)
    ampere_i8 = prefill_tiles(cuda, bf16, i8, max_query_len=64, page_size=64, head_dim=128)
    assert ampere_i8.qk_int8 and not ampere_i8.stage_q


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,head_dim,kv", [
    (torch.float32, 128, "float"), (torch.float32, 128, "int8"), (torch.bfloat16, 256, "float"),
    (torch.bfloat16, 256, "int8"), (torch.float16, 128, "float"), (torch.bfloat16, 64, "int8")])
def test_gpu_default_tiles_launch_for_every_operand_width(dtype, head_dim, kv):
    """The default tiles launch (fit in shared memory) and agree with the reference for float32
    operands and head_dim 256, where the 6-stage Hopper tiles would not fit, and for the 16-bit
    and INT8 pools that take them."""
    # the 128k cases above leave tens of GB in torch's cache; without this, loading the float32
    # kernel's module failed with "Triton Error [CUDA]: out of memory" on an H200
    torch.cuda.empty_cache()
    torch.manual_seed(3)
    q, cache, meta, _ = make_step([(300, 200), (0, 77)], page_size=64, hkv=2, group=4,
                                  head_dim=head_dim, dtype=dtype, kv=kv, device="cuda")
    check(q, cache, meta)
