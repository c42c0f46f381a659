"""``benchmarks/prefill_fa3.py``: the Gluon FlashAttention-3-style prefill attention experiment.
Gluon has no interpreter, so on a CPU it is compiled for sm_90 and its PTX (and ptxas's notes)
read, and its argument checks exercised; on a Hopper GPU it runs against
``kernels.reference.paged_attention`` (bfloat16, Hq 32 / Hkv 8, head_dim 128, 64-slot pages in
scrambled order, NaN in every slot no sequence owns)."""

from __future__ import annotations

import pytest
import torch
from gpu_isolated import compile_facts, run_isolated
from prefill_case import TOL, make_step

from benchmarks.prefill_fa3 import prefill_fa3
from kernels import reference as ref


def test_compiles_for_hopper_with_overlapped_wgmma_and_a_loading_warp():
    res = compile_facts("compile_prefill_fa3.py")
    # two warpgroups x (prologue scores, loop scores, loop P.V, last P.V): 8 + 8 + 4 + 4 each
    assert res["wgmma"] == 48
    assert 1 in res["wait_group"]  # a P.V left in flight while the softmax runs
    assert not res["ptxas_wgmma_serialized"]  # ptxas keeps the wgmma asynchronous (no C7514)
    assert res["ptxas_spill_bytes"] == 0
    assert res["tma_loads"] >= 3 and res["tma_stores"] >= 1  # Q, K, V in; O out
    assert res["mbarrier_waits"] >= 4 and res["mbarrier_arrives"] >= 2
    assert res["bar_sync_threads"] == [128]  # each warpgroup syncs only itself
    assert res["num_warps"] == 12  # 2 compute warpgroups + the loading warp's
    assert res["shared"] <= 232448


def _args(**over):
    """CPU tensors that pass every shape check (seq_len 70, a 3-query chunk, GQA 2)."""
    args = dict(q=torch.zeros(3, 4, 128, dtype=torch.bfloat16),
                k_cache=torch.zeros(4, 2, 64, 128, dtype=torch.bfloat16),
                v_cache=torch.zeros(4, 2, 64, 128, dtype=torch.bfloat16),
                page_table=torch.tensor([2, 0], dtype=torch.int32), seq_len=70, n_new=3)
    args.update(over)
    return args


@pytest.mark.parametrize("over, match", [
    ({"q": torch.zeros(3, 4, 128, dtype=torch.float16)}, "q must be bfloat16"),
    ({"q": torch.zeros(3, 4, 64, dtype=torch.bfloat16)}, "q must be bfloat16"),
    ({"q": torch.zeros(4, 3, 128, dtype=torch.bfloat16).transpose(0, 1)}, "q must be"),
    ({"k_cache": torch.zeros(4, 2, 16, 128, dtype=torch.bfloat16)}, "k_cache, v_cache"),
    ({"v_cache": torch.zeros(4, 2, 64, 128)}, "k_cache, v_cache"),
    ({"q": torch.zeros(3, 3, 128, dtype=torch.bfloat16)}, "not a multiple of Hkv"),
    ({"n_new": 71}, "n_new <= seq_len"),
    ({"n_new": 2}, "q.shape\\[0\\] == n_new"),
    ({"seq_len": 129}, "page_table"),
    ({"page_table": torch.tensor([2, 0])}, "page_table must be int32"),
    ({"stages": 5}, "stages"),
    ({}, "CUDA device"),
])
def test_argument_checks_raise_before_any_gpu_work(over, match):
    kw = _args(**over)
    stages = kw.pop("stages", 4)
    with pytest.raises(ValueError, match=match):
        prefill_fa3(**kw, stages=stages)


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


CASES = [  # (cached positions, new queries, ring stages)
    (0, 1, 4),        # one query, one key
    (0, 200, 4),      # a whole prompt: n_new not a multiple of 128, a partial last page
    (37, 300, 2),     # the chunk starts mid-page
    (64, 64, 3),      # page-aligned, half of the tile's rows past n_new
    (1000, 129, 4),   # the second tile holds one row
    (3000, 1096, 4),  # 4k positions, mid-page start (3000 % 64 = 56)
    (2048, 2048, 3),  # 4k positions, the benchmark's chunk
]


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="needs a Hopper GPU")
def test_gpu_matches_paged_attention():
    """Every case in one child process (one CUDA start-up, one compile a stage count), under a
    time limit: a hang fails this test, not the suite."""
    run_isolated(__file__, "_gpu_all_cases", timeout=400)


def _gpu_all_cases():
    for case in CASES:
        _gpu_matches_paged_attention(*case)
    _gpu_gqa_group_one_and_custom_scale()


def _gpu_matches_paged_attention(cached, new, stages):
    q, cache, meta, _ = make_step([(cached, new)], page_size=64, hkv=8, group=4, head_dim=128,
                                  dtype=torch.bfloat16, device="cuda")
    seq_len = cached + new
    out = torch.full_like(q, float("nan"))
    assert prefill_fa3(q, cache.k, cache.v, meta.page_table[0], seq_len, new, out=out,
                       stages=stages) is out
    expect = ref.paged_attention(q.float(), cache, meta)
    assert torch.isfinite(out).all(), (cached, new, stages)
    torch.testing.assert_close(out.float(), expect, **TOL[torch.bfloat16],
                               msg=lambda m: f"case {(cached, new, stages)}: {m}")


def _gpu_gqa_group_one_and_custom_scale():
    q, cache, meta, _ = make_step([(77, 150)], page_size=64, hkv=2, group=1, head_dim=128,
                                  dtype=torch.bfloat16, device="cuda")
    out = prefill_fa3(q, cache.k, cache.v, meta.page_table[0], 227, 150, sm_scale=0.05)
    expect = ref.paged_attention(q.float(), cache, meta, 0.05)
    torch.testing.assert_close(out.float(), expect, **TOL[torch.bfloat16])
