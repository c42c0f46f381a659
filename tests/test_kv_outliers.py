"""benchmarks/kv_outliers.py: outlier-channel ratios and the INT8 rounding error of cached K/V,
read back from a BF16 pool's pages."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.kv_outliers import cached, channel_stats, int8_rel_err, outlier_ratio  # noqa: E402
from infer.kv_pool import KVPool  # noqa: E402


def _fill(pool: KVPool, pages: list[int], k: torch.Tensor, v: torch.Tensor) -> None:
    """Write [n, heads, dim] k/v to every layer at positions 0..n-1 of ``pages``."""
    ps = pool.page_size
    for layer in range(pool.num_layers):
        lc = pool.layer(layer)
        for t in range(k.shape[0]):
            lc.k[pages[t // ps], :, t % ps] = k[t] * (layer + 1)
            lc.v[pages[t // ps], :, t % ps] = v[t]


def test_a_planted_key_channel_is_found_and_costs_int8_precision():
    g = torch.Generator().manual_seed(0)
    n, heads, dim = 40, 2, 16
    k = torch.randn(n, heads, dim, generator=g)
    v = torch.randn(n, heads, dim, generator=g)
    k_out = k.clone()
    k_out[:, 1, 5] *= 50.0  # one outlier channel in head 1
    pool = KVPool(2, heads, dim, num_pages=6, page_size=16, dtype=torch.float32)
    pages = [4, 1, 3]  # out of order: the read must follow the page table
    _fill(pool, pages, k_out, v)
    assert torch.equal(cached(pool.layer(0).k, pages, n), k_out)
    stats = channel_stats(pool, pages, n)
    assert [s["layer"] for s in stats] == [0, 1]
    assert stats[0]["k_outlier"] > 30 and stats[0]["v_outlier"] < 3
    assert stats[1]["k_outlier"] == pytest.approx(stats[0]["k_outlier"], rel=1e-4)  # scale-free
    assert outlier_ratio(k) < 3
    # the outlier makes the scale coarse for the other 15 channels of its head
    others = torch.cat([k_out[:, 1, :5], k_out[:, 1, 6:]], dim=-1)
    err_plain = int8_rel_err(k[:, 1:2])
    deq_err = others - torch.round(others / (k_out[:, 1].abs().amax(-1, keepdim=True) / 127))\
        * (k_out[:, 1].abs().amax(-1, keepdim=True) / 127)
    assert float(deq_err.norm() / others.norm()) > 10 * err_plain
    assert 0 < err_plain < 0.01


def test_int8_rel_err_of_exact_codes_is_zero_and_bad_input_raises():
    x = torch.tensor([[[127.0, -64.0, 0.0, 1.0]]])  # absmax 127: scale 1, every value a code
    assert int8_rel_err(x) == 0.0
    pool = KVPool(1, 1, 4, num_pages=1, page_size=16, dtype=torch.float32)
    with pytest.raises(ValueError, match="2 or more"):
        channel_stats(pool, [0], 1)
    int8_pool = KVPool(1, 1, 4, num_pages=1, page_size=16, kv_dtype="int8")
    with pytest.raises(ValueError, match="INT8"):
        channel_stats(int8_pool, [0], 4)
