"""kernels/decode_prologue.py: stage 1 with the step's q/k-norm + RoPE and K/V store inside it
equals ``qk_norm_rope``, then ``store_kv``, then ``decode_attention`` (the unfused path, the
oracle; each of those is held to ``kernels/reference.py`` by its own tests).

CPU (Triton interpreter, tiny shapes): float32 and float16 activations, 16-bit pools (the model
dtype; an INT8 pool is refused); steps of 1 and 3 tokens per sequence with a padding sequence, a
verify step's slabs, GQA groups 2 and 5 (a group that is no power of two), 1 to 4 splits so that
a step's new tokens fall into one split or straddle two, positions past 100k with YaRN. Pools
start as random data, so every slot the kernel must not write is checked too. The only expected
difference is the last float32 bit of a row's rstd (the sum of squares is reduced in another
order): float32 results agree to 1e-5, float16 to 2e-3. GPU (``-m gpu``,
``test_decode_prologue_gpu.py``): bfloat16 at Qwen3 shapes and the model path.
"""

from __future__ import annotations

import pytest
import torch
from prologue_case import Step, check_prologue

from infer.meta import plan_slabs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("n,group,seq_lens,splits", [
    (1, 2, [9, 0, 30], 3),  # one token, a padding sequence, splits of one or two pages
    (3, 5, [17, 3, 0], 2),  # three tokens straddling a page and a split boundary, group 5
    (1, 5, [40], 1),
    (3, 2, [25], 4),
])
def test_prologue_equals_unfused(dtype, n, group, seq_lens, splits):
    check_prologue(Step(seq_lens, n, group, dtype, False), splits)


def test_prologue_slabs():
    # a verify step: rows 0-2 are one sequence's queries at consecutive positions (one slab,
    # across a page boundary), row 3 a padding row (its own slab, seq_len 0)
    step = Step([15, 16, 17, 0], 1, 2, torch.float32, False,
                slab_rows=torch.tensor([3, 0, 0, 1], dtype=torch.int32))
    check_prologue(step, 2)


@pytest.mark.parametrize("reverse", [False, True], ids=["grid-order", "reversed"])
@pytest.mark.parametrize("slabs", [True, False], ids=["slabs", "row-programs"])
@pytest.mark.parametrize("splits", [1, 2])
def test_prologue_verify_rows_of_one_sequence(reverse, slabs, splits, reversed_grid):
    # a verify step as the graph runner feeds it: one sequence's 5 one-query rows at positions
    # 14..18 (across a page), plus a padding row; with slabs (plan_slabs: [2, 0, 3, 0, 0, 1] at
    # 8-key blocks) or one program per row. A later row reads keys the earlier rows add: run
    # the programs in reverse order too, as a GPU may
    reversed_grid(reverse)
    rows = [((), p) for p in range(14, 19)] + [None]
    slab_rows = torch.tensor(plan_slabs(rows, 6, 8, 8), dtype=torch.int32) if slabs else None
    step = Step([p + 1 for _, p in rows[:5]] + [0], 1, 2, torch.float32, False,
                slab_rows=slab_rows, one_sequence=True)
    check_prologue(step, splits)


def test_prologue_rejects_bad_arguments():
    step = Step([9], 1, 2, torch.float32, False)
    p = step.prologue()
    with pytest.raises(ValueError, match="positions"):
        step.attend(step.q, step.cache, 1, p._replace(positions=p.positions.int()))
    with pytest.raises(ValueError, match="slot_mapping"):
        step.attend(step.q, step.cache, 1, p._replace(slot_mapping=p.slot_mapping[:0]))
    with pytest.raises(ValueError, match="k/v"):
        step.attend(step.q, step.cache, 1, p._replace(v=p.v.half()))
    int8 = Step([9], 1, 2, torch.float32, True)  # INT8 pools keep the fused store kernel
    with pytest.raises(ValueError, match="16-bit pool"):
        int8.attend(int8.q, int8.cache, 1, int8.prologue())
