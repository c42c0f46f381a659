"""``benchmarks/persistent_chain.py``: the Gluon experiment for issue 16's persistent decode layer
(a loading warp that streams weights across grid barriers). Gluon has no interpreter, so on a CPU
it is compiled for sm_90 and its PTX read; on a Hopper GPU it runs against the torch chain."""

from __future__ import annotations

import pytest
import torch
from gpu_isolated import compile_facts, run_isolated

from benchmarks.persistent_chain import chain_persistent, chain_reference


def test_compiles_for_hopper_with_a_loading_warp_and_a_grid_barrier():
    res = compile_facts("compile_persistent_chain.py")
    assert res["tma_loads"] >= 1 and res["expect_tx_bytes"] == [32 * 64 * 2]  # one bf16 tile
    assert res["mbarrier_waits"] >= 2  # ready (compute) and empty (loader)
    assert res["release_adds"] == 1 and res["acquire_loads"] == 1  # the loader never waits
    assert res["control_acquire_loads"] == 2  # the control's loader spins at the barrier too
    assert res["barrier_threads"] == [128]  # the compute warps' own barrier, not all 8 warps
    assert res["num_warps"] == 8  # 4 compute + the loading warp, in whole warpgroups
    assert res["shared"] <= 232448  # 16 x 4 KB of ring and the barriers: one CTA's budget


def test_reference_is_the_float32_chain():
    torch.manual_seed(0)
    n, phases = 8, 3
    w = torch.randn(phases * n, n).to(torch.bfloat16)
    x = torch.zeros(phases + 1, n)
    x[0] = torch.randn(n)
    out = chain_reference(w, x)
    assert torch.equal(out[0], x[0]) and torch.count_nonzero(x[1:]) == 0  # x is not written
    want = x[0].double()
    for p in range(phases):
        want = w[p * n:(p + 1) * n].double() @ want
    torch.testing.assert_close(out[phases].double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("w_shape, x_dtype", [((12, 4), torch.float32), ((8, 4), torch.float64)])
def test_wrong_shapes_and_dtypes_are_refused(w_shape, x_dtype):
    w = torch.zeros(w_shape, dtype=torch.bfloat16)
    x = torch.zeros(3, 4, dtype=x_dtype)
    with pytest.raises(ValueError, match="bfloat16 \\[phases \\* n, n\\]"):
        chain_reference(w, x)
    with pytest.raises(ValueError, match="bfloat16 \\[phases \\* n, n\\]"):
        chain_persistent(w, x, torch.zeros(1, dtype=torch.int32))


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="needs a Hopper GPU")
def test_gpu_persistent_chain_matches_torch():
    """Every case in one child process, under a time limit: a hang (a barrier or a ring phase
    that never completes) fails this test, not the suite."""
    run_isolated(__file__, "_gpu_all_cases", timeout=300)


def _gpu_all_cases():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for n, phases, block_k, stages, cross in [
            (256, 5, 64, 4, True), (256, 7, 64, 16, True), (256, 7, 128, 8, True),
            (4096, 36, 64, 16, True), (4096, 36, 64, 16, False), (4096, 36, 128, 8, True)]:
        if n // 32 <= sms:  # every program resident: 128 for n = 4096 (an H100 SXM has 132)
            _gpu_persistent_chain_matches_torch(n, phases, block_k, stages, cross)


def _gpu_persistent_chain_matches_torch(n, phases, block_k, stages, cross):
    torch.manual_seed(0)
    w = (torch.randn(phases * n, n, device="cuda") / n ** 0.5).to(torch.bfloat16)
    x = torch.zeros(phases + 1, n, device="cuda")
    x[0] = torch.randn(n, device="cuda")
    want = chain_reference(w, x)
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    for _ in range(3):  # again: the counter is zeroed per launch, x[1:] rewritten
        x[1:] = float("nan")
        chain_persistent(w, x, counter, block_k=block_k, stages=stages, cross=cross)
        torch.cuda.synchronize()
        torch.testing.assert_close(x, want, rtol=1e-4, atol=1e-4 * want.abs().max().item(),
                                   msg=lambda m: f"case {(n, block_k, stages, cross)}: {m}")
    assert counter.item() == phases * (n // 32)  # one arrival a program and phase
