"""Split-KV decode (kernels/decode_attention.py, with kernels/combine.py) vs the reference.

CPU (Triton interpreter, float16/float32, tiny shapes): one launch covers a batch of sequences
whose lengths sit around page boundaries (1, page-1, page, page+1, several pages) plus a padding
sequence of length 0 (exact zeros); pages are scrambled, padding page-table entries and every
unused slot of the pool hold NaN (nothing may leak; ``decode_case.Case``). Oracles:
``reference.paged_attention`` and ``reference.split_partials``. INT8: tight against the
dequantized reference, and
NMSE < 1e-3 against attention over the unquantized K/V.
GPU (-m gpu): bfloat16, 32 query / 8 KV heads, head_dim 128, page 64, at 1k/32k/128k positions.
The combine alone is in ``test_kernels_combine.py``, the INT8 code conversions in
``test_int8_codes.py``, slabs in ``test_kernels_decode_slabs.py``.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import nmse
from decode_case import INT8_NMSE, TOL, Case, _lengths

from kernels import reference
from kernels.decode_attention import DecodeWorkspace, decode_attention
from kernels.tiles import DecodeTiles

# (n, group, splits, block_n, dtype, int8); page 16, 2 KV heads, head_dim 32
CASES = [
    (1, 1, 1, 16, torch.float32, False),
    (1, 4, 3, 16, torch.float16, False),
    (1, 5, 8, 32, torch.float16, False),  # 2 pages per block; more splits than pages
    (2, 4, 8, 8, torch.float32, False),  # half a page per block
    (5, 5, 3, 16, torch.float16, False),  # 25 rows -> a 32-row tile
    (5, 1, 8, 32, torch.float32, False),
    (16, 1, 3, 16, torch.float16, False),
    (1, 4, 3, 16, torch.float16, True),
    (2, 5, 8, 32, torch.float32, True),
    (5, 1, 1, 8, torch.float16, True),
]


@pytest.mark.parametrize("n,group,splits,block_n,dtype,int8", CASES)
def test_decode_matches_reference(n, group, splits, block_n, dtype, int8):
    case = Case(_lengths(n, 16), n, kv_heads=2, group=group, head_dim=32, page_size=16,
                dtype=dtype, int8=int8)
    out = case.run(num_splits=splits, block_n=block_n, **({"int8_magic": 1} if int8 else {}))
    assert out.dtype == dtype and out.shape == case.q.shape
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), case.expected(), **TOL[dtype])
    pad = out[-n:]  # the length-0 padding sequence
    assert torch.equal(pad, torch.zeros_like(pad))
    if int8:
        assert nmse(out, case.expected_full()) < INT8_NMSE


@pytest.mark.parametrize("int8", [False, True], ids=["fp16", "int8"])
@pytest.mark.parametrize("lazy", [False, True], ids=["rescale", "lazy"])
@pytest.mark.parametrize("k_gain", [1.0, 8.0])
def test_decode_lazy_rescale(lazy, k_gain, int8):
    """Conditional rescaling (skip the rescale unless a row max grows by > 2^8) against the
    reference, one split walking several blocks; k_gain 8 spreads the scores so both the skipped
    and the taken rescale happen."""
    case = Case(_lengths(1, 16) + [200], 1, kv_heads=2, group=4, head_dim=32, page_size=16,
                dtype=torch.float16, int8=int8, k_gain=k_gain)
    out = case.run(num_splits=1, block_n=16, lazy_rescale=lazy)
    torch.testing.assert_close(out.float(), case.expected(), **TOL[torch.float16])


@pytest.mark.parametrize("n", [1, 3])
def test_decode_int8_square_pages(n):
    """page_size == head_dim (32): the transposed V page has K's shape, the index maths must
    still tell the two apart."""
    case = Case(_lengths(n, 32), n, kv_heads=2, group=4, head_dim=32, page_size=32,
                dtype=torch.float16, int8=True)
    out = case.run(num_splits=3, block_n=16)
    torch.testing.assert_close(out.float(), case.expected(), **TOL[torch.float16])
    assert nmse(out, case.expected_full()) < INT8_NMSE


def test_decode_rejects_untransposed_int8_v():
    """An INT8 pool's V must hold transposed pages [pages, heads, head_dim, page_size]."""
    case = Case([5], 1, kv_heads=2, group=2, head_dim=32, page_size=16, dtype=torch.float16,
                int8=True)
    c = case.cache
    with pytest.raises(ValueError, match="transposed"):
        decode_attention(case.q, c.k, c.v.transpose(2, 3).contiguous(), case.seq_lens,
                         case.page_table, k_scale=c.k_scale, v_scale=c.v_scale)


def test_decode_int64_offsets():
    """Page ids whose element offsets pass 2^31 (a huge virtual pool), fp16 and int8."""
    head_dim, page_size, kv_heads = 16, 16, 1
    huge = 2**31 // (kv_heads * page_size * head_dim) + 16
    for int8 in (False, True):
        case = Case([3 * page_size + 1, 20], 2, kv_heads, group=4, head_dim=head_dim,
                    page_size=page_size, dtype=torch.float16, int8=int8, huge_pages=huge)
        assert int(case.page_table[:, 0].max()) * page_size * head_dim > 2**31
        out = case.run(num_splits=3, block_n=32)
        torch.testing.assert_close(out.float(), case.expected(), **TOL[torch.float16])


def test_decode_reuses_workspace_and_out():
    """A workspace larger than the step and a given ``out``: the result lands in ``out``."""
    case = Case([9, 40], 2, kv_heads=2, group=4, head_dim=32, page_size=16,
                dtype=torch.float32, int8=False)
    ws = DecodeWorkspace.allocate(max_batch=4, kv_heads=2, max_rows=16, max_splits=8,
                                  head_dim=32, device="cpu")
    out = torch.full_like(case.q, math.nan)
    res = case.run(num_splits=3, workspace=ws, out=out)
    assert res is out
    torch.testing.assert_close(out, case.expected(), **TOL[torch.float32])
    with pytest.raises(ValueError, match="workspace"):
        case.run(num_splits=16, workspace=ws)


def test_decode_rejects_bad_arguments():
    case = Case([5], 1, kv_heads=2, group=2, head_dim=32, page_size=16, dtype=torch.float16,
                int8=False)
    c = case.cache
    with pytest.raises(ValueError, match="num_queries"):
        decode_attention(case.q, c.k, c.v, case.seq_lens, case.page_table, num_queries=2)
    with pytest.raises(ValueError, match="same dtype"):
        decode_attention(case.q.float(), c.k, c.v, case.seq_lens, case.page_table)
    with pytest.raises(ValueError, match="k_scale"):
        decode_attention(case.q, c.k, c.v, case.seq_lens, case.page_table, k_scale=c.k[..., 0])
    with pytest.raises(ValueError, match="seq_lens"):
        decode_attention(case.q, c.k, c.v, case.seq_lens.long(), case.page_table)


@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
def test_stage1_partials_and_empty_splits(int8):
    """Stage 1's own contract (``kernels/combine.py``), read from the workspace the call fills:
    each split's partial matches ``reference.split_partials``, and a split that sees no key (an
    empty split, a padding sequence, or every key after the row's query: the last split of the
    33-position sequence holds key 32 only) writes ``lse = -inf`` and an exact-zero partial, not
    the NaN the workspace held before. (The combine drops such splits by a select, so its own
    output cannot show a broken guard here.)"""
    n, group, splits, block_n = 4, 2, 4, 16
    case = Case([33, 5, 0], n, kv_heads=2, group=group, head_dim=16, page_size=16,
                dtype=torch.float32, int8=int8)
    ws = DecodeWorkspace.allocate(3, 2, n * group, splits, 16, "cpu")
    ws.o_part.fill_(math.nan)
    ws.lse.fill_(math.nan)
    case.run(num_splits=splits, workspace=ws, block_n=block_n)
    rows = n * group
    for b, seq_len in enumerate(case.seq_lens.tolist()):
        o_part, lse = ws.o_part[b, :, :splits, :rows], ws.lse[b, :, :splits, :rows]
        k, v = reference.gather_kv(case.cache, case.page_table[b], seq_len)
        want_o, want_lse = reference.split_partials(case.q[b * n:(b + 1) * n], k, v, n, splits,
                                                    block_n)
        empty = torch.isinf(want_lse)
        assert empty.any() and (seq_len == 0) == bool(empty.all())
        assert torch.equal(lse[empty], want_lse[empty])  # -inf
        assert torch.equal(o_part[empty], torch.zeros_like(o_part[empty]))
        torch.testing.assert_close(lse[~empty], want_lse[~empty], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(o_part[~empty], want_o[~empty], atol=1e-4, rtol=1e-4)
    assert torch.isinf(ws.lse[0, :, splits - 1, :(n - 1) * group]).all()  # keys after the query


def test_decode_rejects_strided_views_with_value_errors():
    """A view whose last dim is strided would be read (or written) outside its elements: every
    launcher says which argument, with a ValueError (an assert would vanish under python -O)."""
    case = Case([5, 20], 1, kv_heads=2, group=2, head_dim=32, page_size=16, dtype=torch.float16,
                int8=False)
    c = case.cache
    wide_q = torch.cat([case.q, case.q], -1)[..., ::2]
    with pytest.raises(ValueError, match="decode_attention: q needs a contiguous last dim"):
        decode_attention(wide_q, c.k, c.v, case.seq_lens, case.page_table)
    table = torch.cat([case.page_table, case.page_table], -1)[:, ::2]
    with pytest.raises(ValueError, match="decode_attention: page_table needs a contiguous"):
        decode_attention(case.q, c.k, c.v, case.seq_lens, table)
    lens = torch.stack([case.seq_lens, case.seq_lens], -1)[:, 0]
    with pytest.raises(ValueError, match="decode_attention: seq_lens must be contiguous"):
        decode_attention(case.q, c.k, c.v, lens, case.page_table)
    with pytest.raises(ValueError, match="block_n"):
        case.run(block_n=24)  # not a power of two
    odd = Case([5], 1, kv_heads=2, group=2, head_dim=32, page_size=48, dtype=torch.float16,
               int8=False)
    with pytest.raises(ValueError, match="tiles.block_n=32"):  # neither divides nor spans 48
        decode_attention(odd.q, odd.cache.k, odd.cache.v, odd.seq_lens, odd.page_table,
                         tiles=DecodeTiles(block_n=32, num_warps=4, num_stages=1))


# ----------------------------------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("pdl", [False, True], ids=["plain", "pdl"])
@pytest.mark.parametrize("positions", [1024, 32768, 131072])
@pytest.mark.parametrize("int8", [False, True], ids=["bf16", "int8"])
def test_decode_gpu_qwen3_8b_shape(positions, int8, pdl):
    n = 1
    case = Case([positions], n, kv_heads=8, group=4, head_dim=128, page_size=64,
                dtype=torch.bfloat16, int8=int8, device="cuda", k_gain=2.0)
    out = case.run(pdl=pdl)
    torch.cuda.synchronize()
    ref = case.expected()
    err = (out.float() - ref).abs().max().item()
    full = case.expected_full()
    err_nmse = nmse(out, full)
    print(f"\ndecode {'int8' if int8 else 'bf16'}{' pdl' if pdl else ''} @ {positions}: max |err| "
          f"vs float32 reference "
          f"over the pool {err:.3e}; vs unquantized K/V {(out.float() - full).abs().max():.3e}"
          f", NMSE {err_nmse:.2e}")
    torch.testing.assert_close(out.float(), ref, **TOL[torch.bfloat16])
    assert err_nmse < (INT8_NMSE if int8 else 1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("pdl", [False, True], ids=["plain", "pdl"])
@pytest.mark.parametrize("int8,magic", [(False, None), (True, 0), (True, 2)],
                         ids=["bf16", "int8-cvt", "int8-magic"])
def test_decode_gpu_multi_query_batch(int8, magic, pdl):
    """n = 4 (speculative verification) over a batch with lengths around pages and a padding row;
    each INT8 conversion compiled."""
    n = 4
    case = Case([5, 63, 64, 65, 3000, 0], n, kv_heads=8, group=4, head_dim=128, page_size=64,
                dtype=torch.bfloat16, int8=int8, device="cuda")
    out = case.run(num_splits=8, pdl=pdl, **({} if magic is None else {"int8_magic": magic}))
    torch.testing.assert_close(out.float(), case.expected(), **TOL[torch.bfloat16])
    assert torch.equal(out[-n:], torch.zeros_like(out[-n:]))


@pytest.mark.gpu
@pytest.mark.parametrize("pdl", [False, True], ids=["plain", "pdl"])
def test_decode_gpu_cuda_graph(pdl):
    """Captured once, replayed after the sequence grew (fixed grid, no host reads; with pdl the
    graph holds programmatic-dependency edges)."""
    case = Case([700, 2000], 1, kv_heads=8, group=4, head_dim=128, page_size=64,
                dtype=torch.bfloat16, int8=False, device="cuda")
    c = case.cache
    ws = DecodeWorkspace.allocate(2, 8, 4, 16, 128, "cuda")
    out = torch.empty_like(case.q)
    lens = case.seq_lens.clone()
    lens.copy_(torch.tensor([300, 1000], dtype=torch.int32))
    run = lambda: decode_attention(case.q, c.k, c.v, lens, case.page_table, num_splits=16,
                                   workspace=ws, out=out, tiles=case.tiles(pdl=pdl))
    run()  # compile outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    lens.copy_(case.seq_lens)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out.float(), case.expected(), **TOL[torch.bfloat16])


def test_pdl_is_never_used_off_hopper():
    """griddepcontrol exists from sm_90 on: the CPU (and pre-Hopper GPUs) never get it."""
    from kernels.device import supports_pdl

    assert supports_pdl("cpu") is False
