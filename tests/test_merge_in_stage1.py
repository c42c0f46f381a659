"""The split-KV combine folded into decode stage 1 (``kernels.decode_attention.MERGE_IN_STAGE1``,
``kernels/split_merge.py``): the last split of each (sequence, KV head) to finish merges.

CPU (Triton interpreter, float16/float32, tiny shapes): the output bit for bit the separate
combine's, over batches with a padding sequence (exact zeros) and lengths that leave splits
empty, GQA groups 1/2/4, 1 or 3 query tokens, 1/2/5 splits, 16-bit and INT8 pools, slabs (a
verify step's rows); every counter back at 0 after each call (self-cleaning) and a second call
the same bits (the combine summing in the merge's fixed order, ``kernels.combine.ORDERED_SUM``;
the shipped combine keeps ``tl.sum``'s, within tolerance of it); the tiny Qwen3 through
``TritonAttention`` with the flag on and off (the same logits, no combine launched when on).
GPU (``-m gpu``): ``test_merge_in_stage1_gpu.py``.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from decode_case import TOL, Case
from fused_steps import fused_steps
from test_kernels_decode_slabs import Rows

import kernels.combine
import kernels.decode_attention as da
from infer.meta import plan_slabs
from kernels.decode_plan import DecodeWorkspace

PAGE, KV_HEADS, HEAD_DIM = 16, 2, 32


@pytest.fixture(autouse=True)
def ordered_combine(monkeypatch):
    """The oracle: the combine summing in stage 1's merge order (module notes)."""
    monkeypatch.setattr(kernels.combine, "ORDERED_SUM", True)


def fused_and_unfused(run, ws, monkeypatch, like):
    """``run(out)`` with the combine (into ``out`` NaN-filled), then twice with the merge in
    stage 1; the counters are checked to be 0 after each call. Returns the three outputs."""
    outs = []
    for merge in (False, True, True):
        monkeypatch.setattr(da, "MERGE_IN_STAGE1", merge)
        out = torch.full_like(like, math.nan)
        assert run(out) is out
        assert torch.equal(ws.counters, torch.zeros_like(ws.counters))
        outs.append(out)
    return outs


def _cases():
    """Every (group, n, splits) of the issue's grid; batch, dtype and pool alternate so that each
    value meets each other dimension's values."""
    for i, (group, n, splits) in enumerate(itertools.product((1, 2, 4), (1, 3), (1, 2, 5))):
        batch, dtype, int8 = 3 if i % 2 else 1, (torch.float16, torch.float32)[i // 2 % 2], \
            bool(i // 3 % 2)
        yield pytest.param(batch, group, n, splits, dtype, int8, id=f"B{batch}-g{group}-n{n}-"
                           f"s{splits}-{str(dtype)[6:]}-{'int8' if int8 else 'fp'}")


@pytest.mark.parametrize("batch,group,n,splits,dtype,int8", list(_cases()))
def test_merge_in_stage1_equals_the_combine(batch, group, n, splits, dtype, int8, monkeypatch):
    """Sequences: one whose keys fill a block (with 5 splits, 4 of them empty), one of 4 blocks
    (split 0 of 5 empty, the others 1 block), and a padding sequence (0: exact zeros)."""
    lens = [n + 2, 3 * PAGE + 5, 0][:batch] if batch > 1 else [n + 2]
    case = Case(lens, n, kv_heads=KV_HEADS, group=group, head_dim=HEAD_DIM, page_size=PAGE,
                dtype=dtype, int8=int8)
    ws = DecodeWorkspace.allocate(batch, KV_HEADS, n * group, splits, HEAD_DIM, "cpu")
    tiles = {"block_n": 16, **({"int8_magic": 1} if int8 else {})}
    unfused, fused, again = fused_and_unfused(
        lambda out: case.run(num_splits=splits, workspace=ws, out=out, **tiles), ws,
        monkeypatch, case.q)
    assert torch.equal(fused, unfused) and torch.equal(again, fused)
    torch.testing.assert_close(fused.float(), case.expected(), **TOL[dtype])
    if batch > 1:
        assert torch.equal(fused[-n:], torch.zeros_like(fused[-n:]))


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("int8", [False, True], ids=["fp16", "int8"])
def test_merge_in_stage1_with_slabs(int8, splits, monkeypatch):
    """A verify step's rows in slabs (a 3-row slab, a padding row, a lone row, a 2-row slab):
    each slab's last split merges the slab's rows, the rows it covers (slab_rows 0) merge
    nothing; the same bits as the combine over the one-row layout."""
    positions = [20, 21, 22, None, 40, 33, 34]
    case = Rows(48, positions, 2, torch.float16, int8)
    slabs = torch.tensor(plan_slabs([None if p is None else (case, p) for p in positions],
                                    len(positions), 8, PAGE), dtype=torch.int32)
    assert slabs.tolist() == [3, 0, 0, 1, 1, 2, 0]
    rows = len(positions)
    ws = DecodeWorkspace.allocate(1, KV_HEADS, 16 * 2, splits, HEAD_DIM, "cpu")  # packed view
    c = case.cache

    def run(out):
        return da.decode_attention(case.q, c.k, c.v, case.seq_lens, case.page_table,
                                   k_scale=c.k_scale, v_scale=c.v_scale, num_splits=splits,
                                   workspace=ws, out=out, slab_rows=slabs)

    unfused, fused, again = fused_and_unfused(run, ws, monkeypatch, case.q)
    assert torch.equal(fused, unfused) and torch.equal(again, fused)
    assert torch.equal(fused[3], torch.zeros_like(fused[3]))
    torch.testing.assert_close(fused.float(), case.expected(), **TOL[torch.float16])
    assert ws.counters.numel() >= rows * KV_HEADS


def test_merge_in_stage1_counters_must_fit(monkeypatch):
    """A workspace's counters cover the program rows of every call ``views`` accepts; a call
    past them is a ValueError naming the counters."""
    ws = DecodeWorkspace.allocate(2, KV_HEADS, 4, 3, HEAD_DIM, "cpu")
    assert ws.counters.shape == (2 * 4 * KV_HEADS,) and not ws.counters.any()
    assert ws.counters_for(8, KV_HEADS).shape == (16,)  # 8 one-row sequences of a 4-row step
    with pytest.raises(ValueError, match="counters"):
        ws.counters_for(9, KV_HEADS)


def model_steps(model, kv_cache, merge, monkeypatch, num_splits=3):
    """The model's fused forward through ``TritonAttention`` over a 2-sequence pool: prefill
    chunks of 5 and 3 tokens (the prefill kernel), a decode step of 1 token per sequence and one
    of 3 (the decode kernel). Returns the logits and the combine launches."""
    import infer.attention as attention
    from infer.kv_pool import KVPool

    c, dev = model.config, model.device
    pool = KVPool(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, 8, 16, kv_cache,
                  model.dtype, dev)
    attn = attention.TritonAttention(pool, max_batch=2, num_splits=num_splits,
                                     group=c.num_attention_heads // c.num_key_value_heads)
    combines = []
    real = da.combine

    def counted(*args, **kwargs):
        combines.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(da, "MERGE_IN_STAGE1", merge)
    monkeypatch.setattr(da, "combine", counted)
    logits = fused_steps(model, attn, dev, ((5, 3), (1, 1), (3, 3)))
    assert not attn.workspace.counters.any()
    return logits, len(combines)


@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_model_merge_in_stage1_equals_combine_cpu(tiny_ckpt_factory, kv_cache, monkeypatch):
    """The tiny Qwen3 (float32) through the Triton backend with the merge in stage 1 and
    without: the same logits bit for bit, and no combine launched with it."""
    from models.loader import load_model

    model = load_model(tiny_ckpt_factory(vocab_size=512), device="cpu", dtype=torch.float32)
    on, combines_on = model_steps(model, kv_cache, True, monkeypatch)
    off, combines_off = model_steps(model, kv_cache, False, monkeypatch)
    assert (combines_on, combines_off) == (0, 2 * model.config.num_hidden_layers)
    for a, b in zip(on, off, strict=True):
        assert torch.equal(a, b)


def test_shipped_combine_sums_as_before_within_tolerance_of_the_ordered_one(monkeypatch):
    """The shipped combine (``ORDERED_SUM`` off, ``tl.sum``) and the ordered one agree to
    float32 rounding; the flag is off as shipped."""
    monkeypatch.undo()
    assert kernels.combine.ORDERED_SUM is False
    case = Case([3 * PAGE + 5, 7], 1, kv_heads=KV_HEADS, group=4, head_dim=HEAD_DIM,
                page_size=PAGE, dtype=torch.float32, int8=False)
    outs = []
    for ordered in (False, True):
        monkeypatch.setattr(kernels.combine, "ORDERED_SUM", ordered)
        outs.append(case.run(num_splits=5, block_n=16))
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(outs[0], case.expected(), **TOL[torch.float32])
