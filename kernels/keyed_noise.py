"""The noise of keyed top-k draws (``kernels/topk_sample.py`` with int64 keys for ``noise``), for
the tests and any caller that needs the same values: row ``r`` draws ``U`` from Triton's
counter-based Philox (``tl.rand``, Salmon et al. 2011, "Parallel random numbers: as easy as
1, 2, 3") seeded with ``keys[r]``, at counters ``0..k-1`` for the race's Exp(1) noise
``-log(1 - U)`` and at ``MAX_TOP_K`` for the verify rule's ``u``. A key names a draw: the same
key gives the same noise in a CUDA graph and eagerly, with no generator state to register.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.topk_sample import MAX_TOP_K, U_COUNTER


@triton.jit
def _keyed_noise_kernel(keys_ptr, out_ptr, top_k, BLOCK_K: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    slots = tl.arange(0, BLOCK_K)
    u = tl.rand(tl.load(keys_ptr + row), slots)
    tl.store(out_ptr + row * (top_k + 1) + slots, -tl.log(1.0 - u), mask=slots < top_k)
    u_verify = tl.sum(tl.where(slots == 0, tl.rand(tl.load(keys_ptr + row), slots + U_COUNTER),
                               0.0), axis=0)
    tl.store(out_ptr + row * (top_k + 1) + top_k, u_verify)


def keyed_noise(keys: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """What the kernels draw from int64 [N] ``keys`` (``topk_sample``'s keyed ``noise``):
    ``(noise float32 [N, top_k], u float32 [N])``, Exp(1) and U(0, 1), for the float32 path
    and the tests. Raises ValueError: keys not a contiguous int64 [N], or top_k not in
    1..MAX_TOP_K."""
    if keys.dim() != 1 or keys.dtype != torch.int64 or not keys.is_contiguous():
        raise ValueError(f"keyed_noise: keys must be a contiguous int64 [N], got "
                         f"{keys.dtype} {tuple(keys.shape)}")
    if not 1 <= top_k <= MAX_TOP_K:
        raise ValueError(f"keyed_noise: top_k must be in 1..{MAX_TOP_K}, got {top_k}")
    out = torch.empty((keys.shape[0], top_k + 1), dtype=torch.float32, device=keys.device)
    if keys.shape[0]:
        _keyed_noise_kernel[(keys.shape[0],)](keys, out, top_k,
                                             BLOCK_K=max(16, triton.next_power_of_2(top_k)))
    return out[:, :top_k].contiguous(), out[:, top_k].contiguous()
