"""Paged prefill attention (kernels/prefill_attention.py) against kernels/reference.paged_attention.

CPU (Triton interpreter, float16/float32, tiny shapes): lengths around page boundaries, chunks after
a cached prefix, two sequences with different chunk lengths, GQA groups 1/4/5, tile shapes that
split or span pages, pages in scrambled order, stale NaN in unused slots, page ids whose element
offsets pass 2^31, INT8 against the dequantized reference and against full precision.
GPU (``pytest -m gpu``): bfloat16 and INT8, 32 query / 8 KV heads, head_dim 128, page 64, at 1k,
32k and 128k positions against a float32 reference computed in query chunks.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import triton
import triton.language as tl
from conftest import nmse

from infer.kv_pool import LayerCache, int8_v_shape
from infer.meta import build_meta
from kernels import reference as ref
from kernels.pool_tma import tma_ok
from kernels.prefill_attention import prefill_attention
from kernels.query_int8 import split_query_int8
from kernels.tiles import PrefillTiles, prefill_tiles

# INT8 (per-vector, scale = amax/127) output error relative to full precision, as NMSE
# sum((o - o_ref)^2) / sum(o_ref^2). Measured ~5e-5 on the CPU cases (random data); 10x margin.
INT8_NMSE_BOUND = 5e-4
TOL = {torch.float32: dict(atol=2e-5, rtol=2e-5), torch.float16: dict(atol=2e-3, rtol=4e-3),
       torch.bfloat16: dict(atol=1.5e-2, rtol=2e-2)}


def make_step(spec, *, page_size=16, hkv=1, group=1, head_dim=16, dtype=torch.float16,
              kv="float", num_pages=None, pages=None, device="cpu", fill_nan=True):
    """A pool holding ``spec = [(num_cached, num_new), ...]`` sequences, plus queries and meta.

    Pages are drawn in scrambled order (or given as ``pages``); the pool starts as NaN (float) or
    garbage codes with NaN scales (INT8), so anything read outside the stored positions shows.
    Returns (q [T, Hq, D], cache, meta, full-precision K/V per sequence).
    """
    need = [-(-(c + n) // page_size) for c, n in spec]
    if pages is None:
        num_pages = num_pages or sum(need) + 3
        pages = torch.randperm(num_pages).tolist()
    shape = (num_pages, hkv, page_size, head_dim)
    if kv == "int8":
        def codes(shape=shape):
            if fill_nan:
                return torch.randint(-127, 128, shape, dtype=torch.int8, device=device)
            return torch.empty(shape, dtype=torch.int8, device=device)

        def scales():
            s = torch.empty(shape[:3], dtype=torch.float32, device=device)
            return s.fill_(math.nan) if fill_nan else s

        cache = LayerCache(codes(), codes(int8_v_shape(shape)), scales(), scales())
    else:
        def values():
            x = torch.empty(shape, dtype=dtype, device=device)
            return x.fill_(math.nan) if fill_nan else x

        cache = LayerCache(values(), values())
    seqs, kvs, i = [], [], 0
    for (c, n), m in zip(spec, need, strict=True):
        seqs.append((pages[i:i + m], c, n))
        i += m
    meta = build_meta(seqs, page_size, device)
    for (seq_pages, c, n) in seqs:
        s = c + n
        k = torch.randn(s, hkv, head_dim, device=device).to(dtype)
        v = torch.randn(s, hkv, head_dim, device=device).to(dtype)
        slots = torch.tensor([seq_pages[p // page_size] * page_size + p % page_size
                              for p in range(s)], dtype=torch.int64, device=device)
        ref.store_kv(k, v, cache, slots)
        kvs.append((k.float(), v.float()))
    q = (1.5 * torch.randn(meta.num_tokens, hkv * group, head_dim, device=device)).to(dtype)
    return q, cache, meta, kvs


TILE_FIELDS = {f.name for f in dataclasses.fields(PrefillTiles)}


def run_kernel(q, cache, meta, **kw):
    """``prefill_attention`` on a step; keyword arguments named like ``PrefillTiles`` fields
    override the default tiles (``use_tma`` picks the default tiles of that load path)."""
    mql = kw.pop("max_query_len", meta.max_query_len)
    over = {k: kw.pop(k) for k in list(kw) if k in TILE_FIELDS}
    tiles = None
    if over:
        tma = over.get("use_tma", True)
        base = prefill_tiles(q.device, q.dtype, cache.k.dtype, max_query_len=mql,
                             page_size=cache.k.shape[2], head_dim=q.shape[2], tma=tma)
        tiles = dataclasses.replace(base, **{"use_tma": tma, **over})
    return prefill_attention(q, cache.k, cache.v, meta.seq_lens, meta.query_start_loc,
                             meta.page_table, max_query_len=mql,
                             sm_scale=kw.pop("sm_scale", None), k_scale=cache.k_scale,
                             v_scale=cache.v_scale, tiles=tiles, **kw)


def full_precision_reference(q, meta, kvs):
    """float32 attention on the unquantized K/V (what an INT8 pool approximates)."""
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    qsl = meta.query_start_loc.tolist()
    for b, (k, v) in enumerate(kvs):
        lo, hi = qsl[b], qsl[b + 1]
        out[lo:hi] = ref.dense_causal_attention(q[lo:hi].float(), k, v,
                                                q_offset=k.shape[0] - (hi - lo))
    return out


def check(q, cache, meta, **kw):
    out = run_kernel(q, cache, meta, **kw)
    expect = ref.paged_attention(q.float(), cache, meta, kw.get("sm_scale"))
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), expect, **TOL[q.dtype])
    return out


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


@pytest.mark.parametrize("qk_int8", [True, False], ids=["qk_int8", "convert"])
@pytest.mark.parametrize("group,tma", [(1, False), (4, False), (4, True)])
def test_int8_against_dequantized_and_full_precision(group, tma, qk_int8):
    q, cache, meta, kvs = make_step([(29, 24), (0, 18)], hkv=2, group=group, kv="int8")
    # vs the reference on the dequantized pool
    out = check(q, cache, meta, use_tma=tma, qk_int8=qk_int8)
    full = full_precision_reference(q, meta, kvs)
    err = nmse(out, full)
    assert err < INT8_NMSE_BOUND, f"INT8 NMSE {err:.2e} vs full precision"


def test_int8_query_halves_staged_in_a_strided_out_stay_inside_it():
    # The int8 query halves go through the tile's own slots of ``out`` before the output
    # overwrites them: with ``out`` a strided view (heads 1..Hq of a wider buffer) the result
    # matches a contiguous ``out`` bit for bit and the buffer's other heads keep their values.
    q, cache, meta, _ = make_step([(29, 24), (0, 18)], hkv=2, group=2, kv="int8")
    t, hq, d = q.shape
    wide = torch.full((t, hq + 2, d), 7.0, dtype=q.dtype)
    run_kernel(q, cache, meta, out=wide[:, 1:-1], qk_int8=True)
    assert torch.equal(wide[:, 1:-1], run_kernel(q, cache, meta, qk_int8=True))
    assert (wide[:, 0] == 7.0).all() and (wide[:, -1] == 7.0).all()


def test_int8_query_halves_unstaged_path_matches():
    # Off Hopper the halves stay in registers (stage_q off by default): the same codes and
    # dots, so the same output bit for bit, and right against the reference.
    q, cache, meta, _ = make_step([(29, 24), (0, 18)], hkv=2, group=2, kv="int8")
    unstaged = check(q, cache, meta, qk_int8=True, stage_q=False)
    assert torch.equal(unstaged, run_kernel(q, cache, meta, qk_int8=True, stage_q=True))


@pytest.mark.parametrize("head_dim", [16, 32])
def test_int8_query_split_scores_like_the_16_bit_query(head_dim):
    # Scores from the two int8 query halves against scores from the converted codes: same
    # inputs, outputs within float16 rounding of each other (a one-term split would not be).
    # The default for 16-bit queries is the split (head_dim 32: the smallest it takes on CUDA).
    q, cache, meta, _ = make_step([(40, 50), (0, 33)], hkv=2, group=2, head_dim=head_dim,
                                  kv="int8")
    split = run_kernel(q, cache, meta, qk_int8=True).float()
    convert = run_kernel(q, cache, meta, qk_int8=False).float()
    torch.testing.assert_close(split, convert, **TOL[torch.float16])
    assert torch.equal(run_kernel(q, cache, meta).float(), split)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy, on the interpreter's NaN math
@pytest.mark.parametrize("qk_int8", [True, False], ids=["qk_int8", "convert"])
def test_int8_non_finite_query_rows_give_nan_rows(qk_int8):
    # A NaN or inf in a query poisons that (token, head) row only, on both INT8 paths (the split
    # must not turn it into a finite code).
    q, cache, meta, _ = make_step([(20, 30)], hkv=2, group=2, kv="int8")
    q[3, 1, 5] = float("nan")
    q[7, 2, 0] = float("inf")
    out = run_kernel(q, cache, meta, qk_int8=qk_int8).float()
    assert out[3, 1].isnan().all() and out[7, 2].isnan().all()
    bad = torch.zeros(out.shape[:2], dtype=torch.bool)
    bad[3, 1] = bad[7, 2] = True
    assert torch.isfinite(out[~bad]).all()
    good = q.clone()
    good[3, 1] = good[7, 2] = 0
    expect = run_kernel(good, cache, meta, qk_int8=qk_int8).float()
    torch.testing.assert_close(out[~bad], expect[~bad], atol=0, rtol=0)


@triton.jit
def _split_query_kernel(q_ptr, hi_ptr, lo_ptr, scale_ptr, M: tl.constexpr, D: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * D + tl.arange(0, D)[None, :]
    hi, lo, scale = split_query_int8(tl.load(q_ptr + offs))
    tl.store(hi_ptr + offs, hi)
    tl.store(lo_ptr + offs, lo)
    tl.store(scale_ptr + tl.arange(0, M), scale)


def test_split_query_int8_error_bound():
    # q ~ scale * (hi + lo / 127), |error| <= scale / 254 (+ float16 input rounding is exact here:
    # the split reads q as float32); ranges hi in [-127, 127], lo in [-64, 64]; a zero row -> 0s.
    m, d = 16, 32
    q = (3 * torch.randn(m, d)).to(torch.float16)
    q[3] = 0
    q[5, 7] = -60000.0  # one large entry: the row's other entries fall into lo
    hi, lo = (torch.empty(m, d, dtype=torch.int8) for _ in range(2))
    scale = torch.empty(m, dtype=torch.float32)
    _split_query_kernel[(1,)](q, hi, lo, scale, M=m, D=d)
    assert hi.abs().max() <= 127 and lo.abs().max() <= 64
    assert (hi[3] == 0).all() and (lo[3] == 0).all() and scale[3] == 1
    amax = q.float().abs().amax(1)
    torch.testing.assert_close(scale, torch.where(amax > 0, amax / 127, 1.0))
    approx = scale[:, None] * (hi.float() + lo.float() / 127)
    err = (approx - q.float()).abs()
    assert (err <= scale[:, None] / 254 * (1 + 1e-5)).all(), (err / scale[:, None]).max()


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
