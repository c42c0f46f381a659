"""The split-KV combine (kernels/combine.py) against ``reference.merge_partials``, and its
argument checks (strided views are ValueErrors, also under ``python -O``); CPU, interpreter."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch
from conftest import REPO

from kernels import reference
from kernels.combine import combine

TOL16 = dict(atol=2e-3, rtol=2e-3)


def test_combine_rejects_strided_views_with_value_errors():
    """``combine(o_part, lse, out[..., ::2])`` would write outside the view."""
    o_part = torch.randn(1, 2, 3, 4, 16)
    lse = torch.randn(1, 2, 3, 4)
    out = torch.empty(2, 4, 32, dtype=torch.float16)
    with pytest.raises(ValueError, match="combine: out needs a contiguous last dim"):
        combine(o_part, lse, out[..., ::2])
    with pytest.raises(ValueError, match="combine: o_part needs a contiguous last dim"):
        combine(torch.randn(1, 2, 3, 4, 32)[..., ::2], lse, out[..., :16])
    with pytest.raises(ValueError, match="combine: lse needs a contiguous last dim"):
        combine(o_part, torch.randn(1, 2, 3, 8)[..., ::2], out[..., :16])
    with pytest.raises(ValueError, match="float32"):
        combine(o_part.half(), lse, out[..., :16])


def test_combine_rejects_a_strided_out_under_python_O():
    """The check is a ValueError, not an assert that ``python -O`` would drop."""
    code = ("import torch; from kernels.combine import combine; "
            "combine(torch.randn(1, 2, 3, 4, 16), torch.randn(1, 2, 3, 4), "
            "torch.empty(2, 4, 32, dtype=torch.float16)[..., ::2])")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=300)
    assert run.returncode != 0
    assert "ValueError: combine: out needs a contiguous last dim" in run.stderr, run.stderr[-2000:]


@pytest.mark.parametrize("splits,head_dim", [(5, 16), (150, 16), (300, 16), (33, 128),
                                             (198, 128)])
def test_combine_matches_merge_partials(splits, head_dim):
    """Random partials with empty splits (lse=-inf, o_part NaN) and an all-empty row. Up to 256
    splits take one pass, 300 two passes; head_dim 128 is split over 2 (33 splits) or 8 (198,
    the INT8 default on an H200) programs per row."""
    bsz, kv_heads, n, group = 2, 2, 3, 2
    rows = n * group
    o_part = torch.randn(bsz, kv_heads, splits, rows, head_dim)
    lse = torch.randn(bsz, kv_heads, splits, rows) * 20
    empty = torch.rand(bsz, kv_heads, splits, rows) < 0.3
    empty[1, 0, :, 4] = True  # one row with every split empty
    lse[empty] = -math.inf
    o_part[empty] = math.nan
    out = torch.empty(bsz * n, kv_heads * group, head_dim, dtype=torch.float16)
    combine(o_part, lse, out)
    merged = reference.merge_partials(o_part.transpose(2, 3), lse.transpose(2, 3))
    # [B, Hkv, rows, D] -> [B, n, Hkv, group, D] -> [B * n, Hq, D]
    expect = merged.view(bsz, kv_heads, n, group, head_dim).permute(0, 2, 1, 3, 4)
    expect = expect.reshape(bsz * n, kv_heads * group, head_dim)
    torch.testing.assert_close(out.float(), expect, **TOL16)
    assert torch.equal(out[1 * n + 2, 0 * group + 0], torch.zeros(head_dim, dtype=out.dtype))
