"""The decode prologue on the GPU (``-m gpu``; the CPU tests are
``test_kernels_decode_prologue.py`` and ``test_model_attention_prologue.py``): stage 1 with the
step's q/k-norm + RoPE and KV store inside it against the unfused launches in bfloat16 at the
Qwen3-8B attention shape (a BF16 pool; 1 and 4 tokens per sequence, a verify step's slab, a
padding sequence; the default split count); the 4-layer 0.6B's logits and pool with the
prologue on and off; its greedy tokens through the engine, graphs == eager either way; with the
prologue on, a verify step's rows against one-row steps and speculation against plain decoding,
bit for bit.
"""

from __future__ import annotations

import pytest
import torch
from prologue_case import Step, check_prologue
from test_model_attention_prologue import model_steps

SHAPE_8B = dict(kv_heads=8, head_dim=128, page=64, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("n,seq_lens", [(1, [4100, 0, 37]), (4, [3000, 129])])
def test_gpu_prologue_bf16_8b_shape(n, seq_lens):
    check_prologue(Step(seq_lens, n, 4, torch.bfloat16, False, **SHAPE_8B), None)


@pytest.mark.gpu
def test_gpu_prologue_slab():
    # a verify step: 4 one-query rows of one sequence across a 64-key page (one slab), a padding row
    step = Step([2046, 2047, 2048, 2049, 0], 1, 4, torch.bfloat16, False,
                slab_rows=torch.tensor([4, 0, 0, 0, 1], dtype=torch.int32), **SHAPE_8B)
    check_prologue(step, None)


@pytest.mark.gpu
def test_gpu_model_prologue_close_to_unfused(gpu_qwen3_4l, monkeypatch):
    """A 4-layer bfloat16 0.6B: prefill chunks, then decode steps of 1 and 3 tokens, with the
    prologue on and off: the logits within 2 % of the largest, layer 0's values bit for bit."""
    on, pool_on, launches = model_steps(gpu_qwen3_4l, "bf16", True, monkeypatch)
    off, pool_off, _ = model_steps(gpu_qwen3_4l, "bf16", False, monkeypatch)
    assert launches == {"qk_norm_rope": 4, "store_kv": 4}  # the prefill chunk's only
    for a, b in zip(on, off, strict=True):
        err = (a - b).abs().max().item()
        print(f"logits max abs difference {err:.4g} of {b.abs().max().item():.4g}")
        assert err <= 0.02 * b.abs().max().item()
    assert torch.equal(pool_on.layer(0).v, pool_off.layer(0).v)


@pytest.mark.gpu
def test_gpu_engine_prologue_graphs_equal_eager(gpu_qwen3_4l, monkeypatch):
    """The 4-layer 0.6B through the engine with the prologue on and off: graphs == eager bit for
    bit either way; the tokens of on and off agree from the start (the count printed)."""
    from mock_engine import greedy_by_flag

    import models.qwen3_fused as fused

    out = greedy_by_flag(gpu_qwen3_4l, "bf16", monkeypatch, fused, "ATTENTION_PROLOGUE")
    assert len(out[True, True]) == 40
    assert out[True, True] == out[True, False]
    assert out[False, True] == out[False, False]
    same = next((i for i, (a, b) in enumerate(zip(out[True, True], out[False, True], strict=True))
                 if a != b), 40)
    print(f"the first {same} of 40 tokens agree with the prologue on and off")
    assert same >= 8


@pytest.mark.gpu
@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "eager"])
def test_gpu_verify_rows_with_the_prologue_equal_one_row_steps(gpu_qwen3_4l, graphs,
                                                                monkeypatch):
    """With the prologue on, a verify step's rows (one sequence's queries: a later row reads
    keys the earlier rows add, stored by each program that reads them) give each row's one-row
    logits bit for bit, and speculation gives plain decoding's 1000 tokens (the checks of
    ``test_speculative_gpu.py``, which failed with the prologue's first version)."""
    import test_speculative_gpu as spec

    import models.qwen3_fused as fused

    monkeypatch.setattr(fused, "ATTENTION_PROLOGUE", True)
    spec.test_gpu_verify_rows_equal_one_row_steps(gpu_qwen3_4l, "bf16", graphs)
    if graphs:
        spec.test_gpu_speculation_equals_plain_over_1000_tokens(gpu_qwen3_4l, "bf16")
