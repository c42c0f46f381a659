"""``kernels/grid_barrier.py``: the phase chain against its torch reference. CPU (interpreter):
one launch per phase, and one launch over all phases with one program (its barriers pass at
once); bad arguments. GPU (``-m gpu``): one launch over all phases with a program per SM and
its grid barriers, and the launches with programmatic dependent launch, equal to the reference.
"""

from __future__ import annotations

import pytest
import torch

from kernels.grid_barrier import phase_chain, phase_chain_reference


def _chain(programs: int, phases: int, width: int = 8, device: str = "cpu"):
    buf = torch.zeros(phases + 1, programs, width, dtype=torch.int32, device=device)
    buf[0] = torch.randint(-50, 50, (programs, width), dtype=torch.int32,
                           generator=torch.Generator().manual_seed(programs)).to(device)
    return buf, torch.zeros(1, dtype=torch.int32, device=device)


@pytest.mark.parametrize("programs,phases", [(1, 3), (3, 4), (5, 2)])
def test_phase_launches_match_reference(programs, phases):
    buf, counter = _chain(programs, phases)
    phase_chain(buf, counter, persistent=False)
    assert torch.equal(buf, phase_chain_reference(buf[0], phases))
    assert not torch.equal(buf[-1], buf[0])  # the chain changed something


def test_one_program_passes_its_own_barriers():
    buf, counter = _chain(1, 5)
    phase_chain(buf, counter, persistent=True)
    assert torch.equal(buf, phase_chain_reference(buf[0], 5))
    assert int(counter) == 4  # one arrival per barrier: phases - 1


def test_reference_reads_the_neighbour():
    first = torch.tensor([[1], [10], [100]], dtype=torch.int32)
    out = phase_chain_reference(first, 2)
    assert out[1].flatten().tolist() == [10 + 0, 100 + 1, 1 + 2]
    assert out[2].flatten().tolist() == [101 + 0 + 1, 3 + 1 + 1, 10 + 2 + 1]


def test_phase_chain_rejects_bad_arguments():
    buf, counter = _chain(3, 2)
    with pytest.raises(ValueError, match="interpreter"):
        phase_chain(buf, counter, persistent=True)
    with pytest.raises(ValueError, match="int32"):
        phase_chain(buf.float(), counter, persistent=False)
    with pytest.raises(ValueError, match="power-of-two width"):
        phase_chain(torch.zeros(3, 2, 6, dtype=torch.int32), counter, persistent=False)
    with pytest.raises(ValueError, match="counter"):
        phase_chain(buf, torch.zeros(2, dtype=torch.int32), persistent=False)


@pytest.mark.gpu
@pytest.mark.parametrize("persistent,pdl", [(True, False), (False, True)])
def test_gpu_grid_barrier_chain_exact(persistent, pdl):
    """A program per SM, 64 phases: one launch with 63 grid barriers, or 64 PDL launches; run
    twice (the counter is zeroed per launch)."""
    from kernels.device import sm_count

    buf, counter = _chain(sm_count("cuda"), 64, width=32, device="cuda")
    for _ in range(2):
        buf[1:] = 0
        phase_chain(buf, counter, persistent=persistent, pdl=pdl)
        torch.cuda.synchronize()
        assert torch.equal(buf, phase_chain_reference(buf[0], 64))
