"""Sampling options: ``SamplingParams``, a frozen dataclass validated on construction that says
how to pick each next token, with its limits (``MAX_TEMPERATURE``, ``GREEDY_BELOW``, ``MAX_SEED``)
and ``draw_seed``. A bad value raises ``infer.errors.OptionError``, a ``ValueError`` that names the
parameter (``top_p must be in (0, 1] ...``); the CLI names the flag instead (``--top-p must be
...``). The defaults a checkpoint ships come from its ``generation_config.json``
(``infer/generation_config.py`` reads them, ``SamplingParams.from_generation_config`` checks them).
Same style as ``infer/config.py``'s ``EngineConfig``: frozen, validated in ``__post_init__``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, fields, replace
from pathlib import Path

from infer.errors import OptionError
from infer.generation_config import read_sampling_defaults

MAX_SEED = 2**63 - 1  # torch.Generator.manual_seed takes a signed 64-bit value
GREEDY_BELOW = 1e-5  # temperatures under this sample greedily (vLLM's _SAMPLING_EPS)
MAX_TEMPERATURE = 100.0  # near-uniform long before; float32 logits / 1e39 are 0 or NaN


def draw_seed() -> int:
    """A fresh seed from the OS's entropy, in 0..``MAX_SEED``."""
    return random.SystemRandom().randrange(MAX_SEED + 1)


def _is_number(x, kinds=(int, float)) -> bool:
    """``x`` is one of ``kinds`` and not a bool (JSON's true/false are Python ints)."""
    return isinstance(x, kinds) and not isinstance(x, bool)


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each next token (applied in this order, as in HF transformers).

    Attributes:
        temperature: in [0, 100] (``MAX_TEMPERATURE``); > 0 divides the float32 logits. Below
            ``GREEDY_BELOW`` (1e-5, 0 included) it is greedy (argmax): a tinier divisor would
            overflow the logits, and the argmax is what it tends to.
        top_k: keep the k most likely tokens; 0 disables it; a k above the vocabulary keeps all.
        top_p: nucleus sampling, keep the smallest set of most likely tokens whose probability
            reaches top_p, in (0, 1]; the most likely token always survives.
        min_p: drop tokens whose probability is below ``min_p`` x the top probability, in [0, 1].
        presence_penalty: subtracted from the logit of every token already generated in this
            reply (vLLM/OpenAI semantics), in [-2, 2]; 0 disables it.
        seed: seeds the sampling (its generator and its draws' noise keys); the same seed,
            prompt and model give the same reply.
            None draws a fresh seed per reply.
        max_new_tokens: the most tokens one reply yields; None means until a stop token or the
            context is full.
        ignore_eos: keep generating past the tokenizer's stop ids (they are yielded like any
            token); for benchmarks that must decode a fixed number of tokens (vLLM's name).

    Raises:
        OptionError: on an out-of-range value (the message names it and the allowed range).
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    seed: int | None = None
    max_new_tokens: int | None = None
    ignore_eos: bool = False

    def __post_init__(self):
        t = self.temperature
        if not _is_number(t) or not 0 <= t <= MAX_TEMPERATURE:  # NaN fails too
            raise OptionError("temperature", f"must be a number from 0 to {MAX_TEMPERATURE:g} "
                                             f"(0 = greedy), got {t!r}")
        if not _is_number(self.top_k, int) or self.top_k < 0:
            raise OptionError("top_k", f"must be an integer >= 0 (0 = off), got {self.top_k!r}")
        if not (_is_number(self.top_p) and 0 < self.top_p <= 1):
            raise OptionError("top_p", f"must be in (0, 1] (1 = off), got {self.top_p!r}")
        if not (_is_number(self.min_p) and 0 <= self.min_p <= 1):
            raise OptionError("min_p", f"must be in [0, 1] (0 = off), got {self.min_p!r}")
        pp = self.presence_penalty
        if not (_is_number(pp) and -2 <= pp <= 2):
            raise OptionError("presence_penalty", f"must be in [-2, 2] (0 = off), got {pp!r}")
        if self.seed is not None and (not _is_number(self.seed, int)
                                      or not 0 <= self.seed <= MAX_SEED):
            raise OptionError("seed", f"must be an integer from 0 to {MAX_SEED} (2**63 - 1), "
                                      f"got {self.seed!r}")
        if self.max_new_tokens is not None and (not _is_number(self.max_new_tokens, int)
                                                or self.max_new_tokens < 1):
            raise OptionError("max_new_tokens", f"must be an integer >= 1, "
                                                f"got {self.max_new_tokens!r}")

    @property
    def greedy(self) -> bool:
        """Argmax sampling: ``temperature`` below ``GREEDY_BELOW`` (the generator is unused)."""
        return self.temperature < GREEDY_BELOW

    def seeded(self) -> SamplingParams:
        """This, with a seed drawn now (from the OS) when sampling without one: a reply then
        knows the seed that reproduces it. Greedy: unchanged (the seed is unused)."""
        if self.greedy or self.seed is not None:
            return self
        return replace(self, seed=draw_seed())

    def record(self) -> dict:
        """The sampling fields for a JSON record: temperature, top_k, top_p, min_p,
        presence_penalty and seed (None when greedy: unused)."""
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p,
                "min_p": self.min_p, "presence_penalty": self.presence_penalty,
                "seed": None if self.greedy else self.seed}

    def replace(self, **changes) -> SamplingParams:
        """A copy with some fields changed (``None`` values are ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    @classmethod
    def from_generation_config(cls, folder: str | Path | None, **overrides) -> SamplingParams:
        """Defaults from the checkpoint's ``generation_config.json``, then ``overrides``.

        Reads ``temperature``, ``top_k``, ``top_p``, ``min_p``, ``presence_penalty`` (and
        ``do_sample: false`` as temperature 0, a negative ``top_k`` as 0: off) when present;
        fields it lacks keep the class defaults. A missing file means class defaults. Overrides
        whose value is None are ignored, so a CLI can pass every option straight through. For
        Qwen3 the file gives temperature 0.6, top_p 0.95, top_k 20. Its ``repetition_penalty``
        and ``frequency_penalty`` are not applied (``unapplied_settings``: the CLI notes them).

        Raises:
            ValueError: if the file is not valid JSON or holds a value out of range that no
                override replaces (a ``do_sample`` that is not a boolean: unless the temperature
                is given; the message names the file), an override names no field, or an
                override is out of range.
        """
        names = {f.name for f in fields(cls)}
        unknown = set(overrides) - names
        if unknown:
            raise ValueError(f"unknown sampling option(s): {', '.join(sorted(unknown))}")
        path = Path(folder) / "generation_config.json" if folder is not None else None
        values = read_sampling_defaults(path) if path is not None else {}
        given = {k: v for k, v in overrides.items() if v is not None}
        do_sample = values.pop("do_sample", None)  # there only when not a boolean
        if do_sample is not None and "temperature" not in given:
            raise ValueError(f"{path}: do_sample must be true or false, got {do_sample!r}")
        try:  # a bad value in the file that no override replaces: say which file
            cls(**{k: v for k, v in values.items() if k not in given})
        except OptionError as e:
            if e.option == "top_k":  # the file's rule: any integer, <= 0 read as 0 (vLLM's -1)
                e = OptionError("top_k", f"must be an integer (<= 0: no filter), got "
                                         f"{values['top_k']!r}")
            raise ValueError(f"{path}: {e}") from None
        values.update(given)
        return cls(**values)
