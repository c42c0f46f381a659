"""Slabs of split-KV decode (``decode_attention(..., slab_rows=...)``) and their plan
(``infer.meta.plan_slabs``): a speculative verify step's rows, one query each at consecutive
positions of one sequence, attended by one program per slab.

CPU (Triton interpreter, tiny shapes): a slab inside one key block gives each row exactly what
the row alone (``slab_rows`` 1) gives, bit for bit; any slab, across a block too, is exact
attention against ``reference.paged_attention``; padding rows stay exact zeros; unused pool
slots hold NaN, so nothing past a row's own keys may leak. The interpreter's ``tl.dot`` is
numpy's matmul, whose BLAS rounding depends on a row's place in the tile (a tensor core's does
not), so the bit-for-bit checks run it as a sum in a fixed order per output element
(``row_exact_dot``): what they check is that the kernel's own operations on a row (masks, split
bounds, the online softmax, the rescale decision) never read another row. On the GPU the
runner-level test (``tests/test_speculative_gpu.py``) checks the whole step in bfloat16.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import triton.runtime.interpreter as interp

from infer.kv_pool import LayerCache, int8_v_shape
from infer.meta import AttnMeta, plan_slabs
from kernels import reference
from kernels.decode_attention import decode_attention, slab_capacity

PAGE, KV_HEADS, HEAD_DIM = 16, 2, 32
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=2e-3, rtol=2e-3)}


@pytest.fixture
def row_exact_dot(monkeypatch):
    """The interpreter's ``tl.dot`` with each output element summed over k in order (float32
    products of the operands), independent of the other rows."""

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        prod = a.data.astype(np.float32)[:, :, None] * b.data.astype(np.float32)[None, :, :]
        out = np.zeros(prod.shape[::2], dtype=np.float32)
        for k in range(prod.shape[1]):
            out = out + prod[:, k, :]
        return interp.TensorHandle((out + d.data).astype(d.data.dtype), d.dtype.scalar)

    monkeypatch.setattr(interp.InterpreterBuilder, "create_dot", create_dot)


class Rows:
    """One sequence of ``length`` positions on scrambled pages (the other slots NaN), and a step
    of one-query rows: row r at position ``positions[r]`` (None: a padding row)."""

    def __init__(self, length, positions, group, dtype, int8, seed=0, k_gain=1.0):
        gen = torch.Generator().manual_seed(seed)
        pages = -(-length // PAGE)
        num_pages = pages + 3
        shape = (num_pages, KV_HEADS, PAGE, HEAD_DIM)
        store = torch.int8 if int8 else dtype
        fill = (lambda s, dt: torch.full(s, -1 if dt == torch.int8 else math.nan, dtype=dt))
        self.cache = LayerCache(fill(shape, store),
                                fill(int8_v_shape(shape) if int8 else shape, store),
                                *((fill(shape[:3], torch.float32), fill(shape[:3], torch.float32))
                                  if int8 else ()))
        ids = torch.randperm(num_pages, generator=gen)[:pages]
        pos = torch.arange(length)
        k = torch.randn(length, KV_HEADS, HEAD_DIM, generator=gen) * k_gain
        v = torch.randn(length, KV_HEADS, HEAD_DIM, generator=gen)
        reference.store_kv(k.to(dtype), v.to(dtype), self.cache,
                           ids[pos // PAGE] * PAGE + pos % PAGE)
        n = len(positions)
        self.seq_lens = torch.tensor([0 if p is None else p + 1 for p in positions],
                                     dtype=torch.int32)
        row = torch.zeros(pages + 1, dtype=torch.int32)
        row[:pages] = ids.to(torch.int32)
        self.page_table = row.repeat(n, 1)
        self.q = torch.randn(n, KV_HEADS * group, HEAD_DIM, generator=gen).to(dtype)
        self.meta = AttnMeta(positions=torch.zeros(n, dtype=torch.int64),
                             slot_mapping=torch.zeros(n, dtype=torch.int64),
                             seq_lens=self.seq_lens,
                             query_start_loc=torch.arange(n + 1, dtype=torch.int32),
                             page_table=self.page_table, max_query_len=1,
                             max_seq_len=length)

    def run(self, slab_rows, num_splits=3):
        c = self.cache
        slabs = None if slab_rows is None else torch.tensor(slab_rows, dtype=torch.int32)
        return decode_attention(self.q, c.k, c.v, self.seq_lens, self.page_table,
                                k_scale=c.k_scale, v_scale=c.v_scale, num_splits=num_splits,
                                slab_rows=slabs)

    def expected(self):
        return reference.paged_attention(self.q, self.cache, self.meta).float()


def test_slab_capacity_fills_the_one_row_tile():
    assert [slab_capacity(g) for g in (1, 2, 4, 5, 8, 16, 20)] == [16, 8, 4, 3, 2, 1, 1]


@pytest.mark.parametrize("group,int8,splits,dtype", [
    (1, False, 3, torch.float16), (1, True, 3, torch.float16),
    (2, False, 3, torch.float16), (2, True, 3, torch.float16),
    (2, False, 1, torch.float32), (2, True, 1, torch.float32),
    (4, False, 3, torch.float16), (4, True, 1, torch.float16),
    (5, False, 1, torch.float16), (5, True, 3, torch.float16),
])
def test_a_slab_in_one_block_is_each_row_alone_bit_for_bit(group, int8, splits, dtype,
                                                          row_exact_dot):
    """Rows at positions 113 .. (a slab of the capacity, inside the key block 112..127 of a
    one-page block) equal the same rows each alone, and the reference. Keys 8x larger spread the
    scores, so rows of one tile take the conditional rescale in different blocks."""
    cap = slab_capacity(group)
    positions = [113 + t for t in range(min(cap, 14))]
    case = Rows(130, positions, group, dtype, int8, k_gain=8.0)
    alone = case.run([1] * len(positions), splits)
    slab = case.run(plan_slabs([((), p) for p in positions], len(positions), cap, PAGE),
                    splits)
    assert torch.equal(slab, alone)
    torch.testing.assert_close(slab.float(), case.expected(), **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("int8", [False, True], ids=["fp", "int8"])
def test_a_slab_across_blocks_is_still_exact_attention(dtype, int8):
    """One slab over positions 12..19 (across the block boundary at 16, which ``plan_slabs``
    never does): every row is still its own causal attention; so is a slab of 16 rows."""
    for positions in ([12 + t for t in range(8)], list(range(30, 46))):
        case = Rows(50, positions, 1, dtype, int8)
        out = case.run([len(positions)] + [0] * (len(positions) - 1))
        torch.testing.assert_close(out.float(), case.expected(), **TOL[dtype])


def test_slabs_padding_and_single_rows_in_one_step(row_exact_dot):
    """A step of a 3-row slab, a padding row, a lone row and a 2-row slab: each slab's rows are
    their own causal attention, the padding row exact zeros, and no NaN leaks."""
    positions = [20, 21, 22, None, 40, 33, 34]
    case = Rows(48, positions, 2, torch.float16, False)
    out = case.run([3, 0, 0, 1, 1, 2, 0])
    assert torch.isfinite(out).all()
    assert torch.equal(out[3], torch.zeros_like(out[3]))
    torch.testing.assert_close(out.float(), case.expected(), **TOL[torch.float16])
    assert torch.equal(out, case.run([1] * 7))  # every slab inside one block


def test_slab_rows_are_checked():
    case = Rows(20, [5, 6], 2, torch.float16, False)
    c = case.cache
    with pytest.raises(ValueError, match="num_queries 1"):
        decode_attention(case.q, c.k, c.v, case.seq_lens[:1], case.page_table[:1],
                         num_queries=2, slab_rows=torch.ones(1, dtype=torch.int32))
    for bad in (torch.ones(2, dtype=torch.int64), torch.ones(3, dtype=torch.int32)):
        with pytest.raises(ValueError, match="slab_rows must be int32"):
            decode_attention(case.q, c.k, c.v, case.seq_lens, case.page_table, slab_rows=bad)


def test_plan_slabs_groups_a_verify_steps_rows():
    a, b = [7, 8], [9]  # two sequences' pages lists
    # 13 rows of a at 60..72 with 8 rows a slab and 64-position blocks: 60..63 | 64..71 | 72
    rows = [(a, 60 + t) for t in range(13)]
    assert plan_slabs(rows, 16, 8, 64) == [4, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1]
    # a plain batch step: one row per sequence, padding between
    assert plan_slabs([(a, 5), None, (b, 6)], 4, 8, 64) == [1, 1, 1, 1]
    # the same sequence at the same or a skipped position, or another list: no slab
    assert plan_slabs([(a, 5), (a, 5), (a, 7), (b, 8), (list(a), 9)], 5, 8, 64) == [1] * 5
    # a batch of two drafting sequences, capacity 1: never a slab
    rows = [(a, 3), (a, 4), (b, 10), (b, 11), (b, 12)]
    assert plan_slabs(rows, 8, 8, 64) == [2, 0, 3, 0, 0, 1, 1, 1]
    assert plan_slabs(rows, 8, 1, 64) == [1] * 8
