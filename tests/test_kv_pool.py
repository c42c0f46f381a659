"""KV pool allocator, layouts and byte counts, and the step metadata (page table, slots)."""

from __future__ import annotations

import pytest
import torch

from infer.kv_pool import KVPool, OutOfPages
from infer.meta import build_meta


def _pool(num_pages=8, page_size=16, kv_dtype="bf16", dtype=torch.float32):
    return KVPool(num_layers=3, kv_heads=2, head_dim=8, num_pages=num_pages, page_size=page_size,
                  kv_dtype=kv_dtype, dtype=dtype)


def test_allocate_free_reuse():
    pool = _pool(num_pages=5)
    a = pool.allocate(2)
    b = pool.allocate(3)
    assert sorted(a + b) == list(range(5)) and pool.num_free_pages == 0
    with pytest.raises(OutOfPages, match="need 1 more pages, 0 free"):
        pool.allocate(1)
    pool.free(a)
    assert pool.num_free_pages == 2
    assert sorted(pool.allocate(2)) == sorted(a)
    pool.free(b)
    assert pool.allocate(0) == []


def test_failed_allocation_takes_nothing():
    pool = _pool(num_pages=3)
    pool.allocate(2)
    with pytest.raises(OutOfPages):
        pool.allocate(2)
    assert pool.num_free_pages == 1


@pytest.mark.parametrize("bad", [[0], [7], [-1], [99]])
def test_free_rejects_pages_not_allocated(bad):
    pool = _pool(num_pages=8)
    pool.allocate(4)  # 0..3 allocated; 7 is free, -1/99 out of range
    if bad == [0]:
        pool.free([0])
    with pytest.raises(RuntimeError, match="not an allocated page"):
        pool.free(bad)


def test_free_rejects_duplicates_in_one_call():
    pool = _pool(num_pages=4)
    p = pool.allocate(2)
    with pytest.raises(RuntimeError, match="twice"):
        pool.free([p[0], p[0]])
    assert pool.num_free_pages == 2


@pytest.mark.parametrize("page_size", [16, 32, 64, 128])
def test_pages_for_and_capacity(page_size):
    pool = _pool(num_pages=4, page_size=page_size)
    assert pool.capacity == 4 * page_size
    assert pool.pages_for(0) == 0
    assert pool.pages_for(1) == 1
    assert pool.pages_for(page_size) == 1
    assert pool.pages_for(page_size + 1) == 2


@pytest.mark.parametrize("kv_dtype,dtype", [("bf16", torch.bfloat16), ("bf16", torch.float32),
                                            ("int8", torch.bfloat16)])
def test_layout_and_bytes_per_page(kv_dtype, dtype):
    pool = _pool(num_pages=6, page_size=16, kv_dtype=kv_dtype, dtype=dtype)
    assert len(pool.layers) == 3
    total = 0
    for i in range(3):
        c = pool.layer(i)
        assert c.k.shape == (6, 2, 16, 8)
        # INT8 pools keep V pages transposed: [pages, heads, head_dim, page_size]
        assert c.v.shape == ((6, 2, 8, 16) if kv_dtype == "int8" else (6, 2, 16, 8))
        assert c.page_size == 16
        if kv_dtype == "int8":
            assert c.is_int8 and c.k.dtype == torch.int8
            assert c.k_scale.shape == c.v_scale.shape == (6, 2, 16)
            assert c.k_scale.dtype == torch.float32
        else:
            assert not c.is_int8 and c.k.dtype == dtype and c.k_scale is None
        for t in (c.k, c.v, c.k_scale, c.v_scale):
            if t is not None:
                total += t.numel() * t.element_size()
    per_page = KVPool.bytes_per_page(3, 2, 8, 16, kv_dtype, torch.finfo(dtype).bits // 8)
    assert per_page * 6 == total


def test_invalid_arguments():
    with pytest.raises(ValueError, match="page size"):
        _pool(page_size=48)
    with pytest.raises(ValueError, match="KV cache dtype"):
        _pool(kv_dtype="fp8")
    with pytest.raises(ValueError, match="at least one page"):
        _pool(num_pages=0)


def test_build_meta_slots_and_page_table():
    ps = 16
    pages_a, pages_b = [5, 2, 7], [3]
    meta = build_meta([(pages_a, 30, 4), (pages_b, 0, 1)], ps, "cpu")
    # Sequence a: positions 30..33 -> pages_a[1] (offsets 14, 15) then pages_a[2] (0, 1).
    assert meta.positions.tolist() == [30, 31, 32, 33, 0]
    assert meta.slot_mapping.tolist() == [2 * ps + 14, 2 * ps + 15, 7 * ps + 0, 7 * ps + 1,
                                          3 * ps]
    assert meta.seq_lens.tolist() == [34, 1]
    assert meta.query_start_loc.tolist() == [0, 4, 5]
    assert meta.page_table.shape == (2, 3)
    assert meta.page_table[0].tolist() == pages_a and meta.page_table[1, 0] == 3
    assert meta.max_query_len == 4 and meta.max_seq_len == 34
    assert meta.num_seqs == 2 and meta.num_tokens == 5
    assert meta.positions.dtype == meta.slot_mapping.dtype == torch.int64
    assert meta.seq_lens.dtype == meta.page_table.dtype == meta.query_start_loc.dtype == torch.int32


def test_build_meta_errors():
    with pytest.raises(ValueError, match="pages hold 16 positions, need 17"):
        build_meta([([0], 16, 1)], 16, "cpu")
    with pytest.raises(ValueError, match="at least one new token"):
        build_meta([([0], 3, 0)], 16, "cpu")
