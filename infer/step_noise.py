"""Where the decode runner's sampled steps take their noise from (``GraphRunner``'s randomness).

A fused top-k draw (``infer.noise_keys.uses_keys``; Qwen3's default sampling) takes its noise from
per-row keys that the host writes with each step's inputs (``infer.noise_keys.row_keys`` of the
reply's seed, the step and the row), drawn inside the kernel by Triton's counter-based Philox, and
its graph registers no generator (a capture with one slows every graph replayed after it:
BENCHMARKS.md). Every other sampled step (torch's ops: top-k 0 or above 64, a presence penalty; or
``infer.noise_keys.KEYED_NOISE`` off) draws from the runner's ``torch.Generator``, registered
with its graph (``CUDAGraph.register_generator_state``: torch feeds each replay the generator's
current Philox seed and offset, as the same ops would advance it eagerly). The first token of a
reply is sampled eagerly with the generator, reseeded per reply; a seeded reply is the same with
graphs as without either way.
"""

from __future__ import annotations

import torch

from infer.noise_keys import row_keys, uses_keys
from infer.sampling import resolve_seed, seed_generator
from infer.sampling_params import SamplingParams


class StepNoise:
    """A decode runner's sources of noise: its generator, and a keyed batch's seed and step count.

    Args:
        vocab_size: the logits' columns (whether a draw takes the fused top-k kernels).
        device: where the runner samples.

    Attributes:
        generator: the runner's ``torch.Generator`` on ``device``, reseeded by ``begin`` for a
            sampled batch and registered with each captured step that draws from it.
    """

    def __init__(self, vocab_size: int, device: torch.device):
        self.vocab_size, self.device = vocab_size, device
        self.generator = torch.Generator(device=device)
        self._keys: list[int] | None = None  # [seed, next step] of a keyed batch, else None

    def keyed(self, params: SamplingParams) -> bool:
        """Whether steps of ``params`` draw from the rows' keys (``infer.noise_keys.uses_keys``)."""
        return uses_keys(params, self.vocab_size, self.device)

    def begin(self, params: SamplingParams) -> torch.Generator | None:
        """Start a batch of replies: reseed the generator with ``params.seed`` and return it (None
        when greedy); a keyed batch's steps count from 0, their keys from ``params.seed``
        (``resolve_seed``: a fresh one if None)."""
        gen = None
        if not params.greedy:
            gen = seed_generator(self.generator, params.seed)
        self._keys = [resolve_seed(params.seed), 0] if self.keyed(params) else None
        return gen

    def step_keys(self, rows: int) -> list[int] | None:
        """The next step's keys for its ``rows`` rows (``row_keys``), counting the step; None
        outside a keyed batch."""
        if self._keys is None:
            return None
        keys = row_keys(self._keys[0], self._keys[1], rows)
        self._keys[1] += 1
        return keys
