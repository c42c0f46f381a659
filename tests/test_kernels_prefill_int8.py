"""Paged prefill attention over INT8 pools (kernels/prefill_attention.py) on the CPU (Triton
interpreter): against the reference on the dequantized pool and against full precision, with the
key codes converted or scored by the two int8 halves of the query (``kernels/query_int8.py``, its
error bound), staged in a strided ``out`` or not, and non-finite query rows.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from conftest import nmse
from prefill_case import INT8_NMSE_BOUND, TOL, check, make_step, run_kernel

from kernels import reference as ref
from kernels.query_int8 import split_query_int8


def full_precision_reference(q, meta, kvs):
    """float32 attention on the unquantized K/V (what an INT8 pool approximates)."""
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    qsl = meta.query_start_loc.tolist()
    for b, (k, v) in enumerate(kvs):
        lo, hi = qsl[b], qsl[b + 1]
        out[lo:hi] = ref.dense_causal_attention(q[lo:hi].float(), k, v,
                                                q_offset=k.shape[0] - (hi - lo))
    return out


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
