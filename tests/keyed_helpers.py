"""Test helpers: the top-k kernels and the decode runner's keyed draws taken on a CPU, as on CUDA
(the kernels run in the Triton interpreter)."""

from __future__ import annotations

from types import SimpleNamespace

import infer.noise_keys as noise_keys
import infer.sampling as sampling
import infer.step_noise as step_noise


def topk_kernels_on_cpu(monkeypatch) -> None:
    """``infer.sampling`` takes ``kernels.topk_sample`` for CPU logits as it would for CUDA ones."""
    real_use = sampling._use_fused_topk
    monkeypatch.setattr(sampling, "_use_fused_topk", lambda logits, params, presence: real_use(
        SimpleNamespace(is_cuda=True, shape=logits.shape), params, presence))


def keyed_draws_on_cpu(monkeypatch) -> None:
    """``topk_kernels_on_cpu``, and a CPU decode runner draws from the rows' keys
    (``infer.noise_keys.KEYED_NOISE`` on, ``uses_keys`` as for CUDA)."""
    topk_kernels_on_cpu(monkeypatch)
    monkeypatch.setattr(noise_keys, "KEYED_NOISE", True)
    real_keys = noise_keys.uses_keys
    monkeypatch.setattr(step_noise, "uses_keys",
                        lambda p, vocab, dev: real_keys(p, vocab, "cuda"))
