"""Keyed top-k draws: the noise drawn inside ``kernels/topk_sample.py`` from one int64 key per row
(``kernels/keyed_noise.py``), the runner's keys (``infer.noise_keys.row_keys``) and when a step
uses them (``infer.noise_keys.uses_keys``).

CPU (Triton interpreter): the uniforms against a plain-Python Philox4x32-10 (Salmon et al.
2011) as Triton's ``tl.rand`` computes it, bit for bit; the keyed draw and verify rule against
the same kernels fed that noise as float32 (the same tokens); the draws' frequencies against the
filtered probabilities; the keys; the dispatch; a CPU runner's keyed speculative reply
reproducible, each step (verify steps too) staging its own keys; errors. The GPU tests (graph
== eager, seeded replies reproducible, no generator registered) are in ``test_graphs_gpu.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from keyed_helpers import keyed_draws_on_cpu, topk_kernels_on_cpu

import infer.noise_keys as noise_keys
import infer.sampling as sampling
from infer.noise_keys import row_keys, uses_keys
from infer.sampling_filters import topk_probs
from infer.sampling_params import SamplingParams
from kernels.keyed_noise import keyed_noise
from kernels.topk_sample import MAX_TOP_K, topk_sample, topk_verify

M32, M64 = (1 << 32) - 1, (1 << 64) - 1


def philox_u32(key: int, counter: int) -> int:
    """Triton's ``randint(key, counter)`` for a 32-bit counter: Philox4x32 with 10 rounds, the
    counter in word 0, the key's low and high 32 bits as the Philox key; word 0 out."""
    c0, c1, c2, c3 = counter & M32, 0, 0, 0
    k0, k1 = key & M32, (key & M64) >> 32
    for _ in range(10):
        c0, c1, c2, c3 = (((0xCD9E8D57 * c2) >> 32) ^ c1 ^ k0, (0xCD9E8D57 * c2) & M32,
                          ((0xD2511F53 * c0) >> 32) ^ c3 ^ k1, (0xD2511F53 * c0) & M32)
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c0


def uniform(key: int, counter: int) -> np.float32:
    """``tl.rand(key, counter)``: the word as int32, folded to ``x >= 0``, times 2**-31 in
    float32 (below 1)."""
    x = philox_u32(key, counter)
    x = x - (1 << 32) if x >> 31 else x
    x = -x - 1 if x < 0 else x
    return np.float32(x) * np.float32(4.6566127342e-10)


KEYS = [0, 1, -1, 12345678901234, -(1 << 63), (1 << 63) - 1]


@pytest.mark.parametrize("top_k", [1, 20])
def test_keyed_noise_is_tritons_philox(top_k):
    noise, u = keyed_noise(torch.tensor(KEYS, dtype=torch.int64), top_k)
    assert noise.shape == (len(KEYS), top_k) and u.shape == (len(KEYS),)
    for r, key in enumerate(KEYS):
        assert u[r].item() == uniform(key, MAX_TOP_K)
        want = [-np.log(np.float32(1) - uniform(key, j)) for j in range(top_k)]
        np.testing.assert_allclose(noise[r].numpy(), np.array(want, np.float32), rtol=2e-6)
    assert (noise > 0).all() and not torch.equal(noise[0], noise[1])


def test_keyed_noise_checks_its_input():
    with pytest.raises(ValueError, match="keys must be"):
        keyed_noise(torch.zeros(3, dtype=torch.int32), 4)
    with pytest.raises(ValueError, match="top_k"):
        keyed_noise(torch.zeros(3, dtype=torch.int64), MAX_TOP_K + 1)
    noise, u = keyed_noise(torch.zeros(0, dtype=torch.int64), 4)
    assert noise.shape == (0, 4) and u.shape == (0,)


def _logits(rows: int, cols: int, seed: int) -> torch.Tensor:
    return torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)) * 2


@pytest.mark.parametrize("top_k,top_p", [(20, 0.95), (5, 1.0), (1, 1.0)])
def test_keyed_draw_equals_the_draw_with_its_noise(top_k, top_p):
    x = _logits(5, 300, 1)
    keys = torch.tensor(KEYS[:5], dtype=torch.int64)
    noise, _ = keyed_noise(keys, top_k)
    got = topk_sample(x, keys, top_k, 0.6, top_p, 0.0, 290)
    want = topk_sample(x, noise, top_k, 0.6, top_p, 0.0, 290)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)


def test_keyed_verify_equals_the_verify_rule_with_its_noise():
    x = _logits(6, 300, 2)
    keys = torch.tensor(KEYS, dtype=torch.int64)
    noise, u = keyed_noise(keys, 20)
    probs, ids = topk_probs(x / 0.6, SamplingParams(temperature=0.6, top_k=20, top_p=0.95))
    drafts = torch.tensor([ids[0, 0], ids[1, 3], -1, 299, ids[4, 1], ids[5, 0]])
    got = topk_verify(x, drafts, None, keys, 20, 0.6, 0.95)
    assert torch.equal(got, topk_verify(x, drafts, u, noise, 20, 0.6, 0.95))
    with pytest.raises(ValueError, match="topk_verify: u"):
        topk_verify(x, drafts, None, noise, 20, 0.6, 0.95)  # float noise needs its u


def test_keyed_draws_follow_the_filtered_distribution():
    """1,500 rows of the same logits, one key each: the drawn ids' frequencies against ``p``."""
    rows, k = 1500, 4
    x = torch.tensor([[2.0, 1.5, 1.0, 0.2, -1.0, -3.0]]).repeat(rows, 1)
    keys = torch.tensor(row_keys(99, 0, 16) + [hash((i, 7)) for i in range(rows - 16)],
                        dtype=torch.int64)
    tok, probs, ids = topk_sample(x, keys, k, 1.0)
    p = probs[0] / probs[0].sum()
    freq = torch.bincount(tok, minlength=6)[ids[0]].float() / rows
    sd = (p * (1 - p) / rows).sqrt()
    assert ((freq - p).abs() <= 4 * sd + 1e-3).all(), (freq, p)
    assert torch.isin(tok, ids[0]).all()  # only the top-k candidates are ever drawn


def test_row_keys_name_every_step_and_row_of_a_seed():
    a = row_keys(7, 0, 16)
    assert a == row_keys(7, 0, 16) and len(set(a)) == 16
    assert all(-(1 << 63) <= k < (1 << 63) for k in a)
    later = row_keys(7, 1, 16)
    assert not set(a) & set(later) and not set(a) & set(row_keys(8, 0, 16))
    assert row_keys(7, 3, 2) == row_keys(7, 3, 4)[:2]  # a row's key does not depend on the bucket


def test_uses_keys_only_for_fused_top_k_draws_on_cuda(monkeypatch):
    qwen3 = SamplingParams(temperature=0.6, top_k=20, top_p=0.95)
    assert noise_keys.KEYED_NOISE  # on by default (measured on an H100: BENCHMARKS.md)
    assert uses_keys(qwen3, 1000, "cuda") and not uses_keys(qwen3, 1000, "cpu")
    assert not uses_keys(SamplingParams(temperature=0.0), 1000, "cuda")
    assert not uses_keys(SamplingParams(top_k=0), 1000, "cuda")
    assert not uses_keys(SamplingParams(top_k=MAX_TOP_K + 1), 1000, "cuda")
    assert not uses_keys(SamplingParams(top_k=20, presence_penalty=0.5), 1000, "cuda")
    assert not uses_keys(qwen3, 20, "cuda")  # k >= V: no top-k
    monkeypatch.setattr(noise_keys, "KEYED_NOISE", False)
    assert not uses_keys(qwen3, 1000, "cuda")


def test_sample_takes_the_keys_on_the_fused_path(monkeypatch):
    topk_kernels_on_cpu(monkeypatch)
    x = _logits(3, 300, 3)
    p = SamplingParams(temperature=0.6, top_k=20, top_p=0.95)
    keys = torch.tensor(KEYS[:4], dtype=torch.int64)  # one more than the rows: sliced
    got = sampling.sample(x, p, None, noise_keys=keys)
    assert torch.equal(got, topk_sample(x, keys[:3], 20, 0.6, 0.95, 0.0)[0])
    drafts = torch.tensor([-1, 5, 7])
    assert torch.equal(sampling.verify_sample(x, drafts, p, None, noise_keys=keys),
                       topk_verify(x, drafts, None, keys[:3], 20, 0.6, 0.95))


def test_keys_on_a_torch_path_draw_and_bad_rows_are_errors():
    keys = torch.zeros(2, dtype=torch.int64)
    x = _logits(2, 300, 4)
    with pytest.raises(ValueError, match="noise_keys were given"):  # on a CPU: the torch path
        sampling.sample(x, SamplingParams(temperature=0.6, top_k=20), None, noise_keys=keys)
    with pytest.raises(ValueError, match="noise_keys were given"):
        sampling.verify_sample(x, torch.tensor([-1, 3]), SamplingParams(temperature=0.6,
                                                                        top_k=20), None,
                               noise_keys=keys)
    with pytest.raises(ValueError, match="rows must be in 0..16"):
        row_keys(1, 0, 17)
    with pytest.raises(ValueError, match="step >= 0"):
        row_keys(1, -1, 2)


def test_keyed_speculative_reply_on_a_cpu(monkeypatch):
    """Speculation with keyed draws forced on a CPU runner (SumModel, 50 ids; the kernels in the
    interpreter): verify steps stage one key per row, as plain steps do, and a seeded reply is
    the same twice."""
    from mock_engine import mock_engine, prompt_of
    from spec_helpers import TailLookup

    import infer.verify_step as verify_step
    from infer.step_io import StepIO

    keyed_draws_on_cpu(monkeypatch)
    monkeypatch.setattr(verify_step, "PromptLookup", TailLookup)
    staged, real_stage = [], StepIO.stage

    def stage(self, bucket, tokens, rows, drafts=None, keys=None):
        staged.append((bucket, drafts is not None, keys))
        return real_stage(self, bucket, tokens, rows, drafts, keys)

    monkeypatch.setattr(StepIO, "stage", stage)
    eng = mock_engine(ctx=512)
    eng.cuda_graphs = True
    sp = SamplingParams(temperature=5.0, top_k=20, seed=3, max_new_tokens=40)
    runs = []
    for _ in range(2):
        staged.clear()
        s = eng.new_session()
        runs.append(list(s.generate(prompt_of(30), sp, speculate=True)))
        assert s.stats.verify_steps > 0
    assert runs[0] == runs[1] and len(runs[0]) == 40
    assert any(verify for _, verify, _ in staged)
    assert [keys for _, _, keys in staged] == [
        row_keys(3, i, bucket) for i, (bucket, _, _) in enumerate(staged)]
