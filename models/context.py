"""How long a context a Qwen3 checkpoint supports, and the static YaRN that a given context needs.

Design: one pure function, ``plan_context(config, ctx)``, decides from the checkpoint's config
alone (no constants per model) and returns a frozen ``ContextPlan``: the config to build the model
with, and the one line to show the user when YaRN was turned on. The engine builds the model from
``plan.config`` (``models.loader.load_model(folder, config=plan.config)``).

The rule (the Qwen3 model cards, "Processing Long Texts": static YaRN with
``original_max_position_embeddings`` 32768 and ``factor`` = context / 32768, at most 4; YaRN is
Peng et al. 2023):

- native = ``max_position_embeddings`` (40960 for Qwen3, 262144 for Qwen3-4B-2507).
- A config that already carries ``rope_scaling`` keeps it; its limit is
  ``Qwen3Config.max_context`` (``factor x original_max_position_embeddings``, or native if larger).
- Otherwise a context at or below native never gets YaRN. Past native, YaRN is added with
  ``original`` = min(native, 32768) (the length Qwen3 was trained at; a checkpoint with a shorter
  native length was trained at that) and ``factor`` = ctx / original rounded up to a multiple of
  ``FACTOR_STEP`` (0.5, so 40961..49152 -> 1.5, 64k -> 2.0, 128k -> 4.0), at most ``MAX_FACTOR``.
- The largest context is max(native, MAX_FACTOR x original): 131072 for Qwen3, 262144 (native, so
  never YaRN) for Qwen3-4B-2507, whose 4 x 32768 is shorter than its native length.

Static YaRN scales every position, short prompts included, which costs a little quality on short
texts: hence YaRN only when the context asks for it, and a note saying so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from models.config import Qwen3Config, YarnScaling

TRAINED_LENGTH = 32768  # Qwen3's pretraining length: the model cards' original for YaRN
MAX_FACTOR = 4.0  # the largest YaRN factor the Qwen3 model cards prescribe
FACTOR_STEP = 0.5  # auto YaRN factors are ctx / original rounded up to a multiple of this


@dataclass(frozen=True)
class ContextPlan:
    """The decision of ``plan_context`` for one checkpoint and context.

    Attributes:
        config: the Qwen3Config to build the model with: the checkpoint's, or a copy with static
            YaRN ``rope_scaling`` added (``added_yarn``).
        ctx: the context asked for (tokens).
        max_ctx: the largest context this checkpoint supports (tokens), YaRN included.
        yarn_factor: the YaRN factor the model runs with (the checkpoint's own or the added one),
            None without YaRN.
        added_yarn: True when YaRN was turned on for this context (the checkpoint had none).
        note: one line for the user when ``added_yarn`` (None otherwise).
    """

    config: Qwen3Config
    ctx: int
    max_ctx: int
    yarn_factor: float | None = None
    added_yarn: bool = False
    note: str | None = None

    def __post_init__(self):
        if not 0 < self.ctx <= self.max_ctx:
            raise ValueError(f"context {self.ctx} is outside 1..{self.max_ctx}")
        if self.added_yarn != (self.note is not None):
            raise ValueError("a plan has a note exactly when it added YaRN")
        scaling = self.config.rope_scaling
        if (scaling.factor if scaling else None) != self.yarn_factor:
            raise ValueError("yarn_factor must be the config's rope_scaling factor")


def trained_length(config: Qwen3Config) -> int:
    """The ``original_max_position_embeddings`` for YaRN added to ``config``: min(native, 32768)."""
    return min(config.max_position_embeddings, TRAINED_LENGTH)


def largest_context(config: Qwen3Config) -> int:
    """The largest context (tokens) ``config`` supports, with YaRN where ``plan_context`` adds it:
    its own ``max_context`` when it has ``rope_scaling``, else
    max(native, MAX_FACTOR x ``trained_length``); never past a ``sliding_window`` (infer has
    full attention only, the same as sliding attention up to the window)."""
    if config.rope_scaling is not None:
        limit = config.max_context
    else:
        limit = max(config.max_position_embeddings, int(MAX_FACTOR * trained_length(config)))
    return limit if config.sliding_window is None else min(limit, config.sliding_window)


def yarn_factor_for(ctx: int, original: int) -> float:
    """ctx / original rounded up to a multiple of FACTOR_STEP, at least 1 (no cap here)."""
    return max(1.0, math.ceil(ctx / original / FACTOR_STEP) * FACTOR_STEP)


def plan_context(config: Qwen3Config, ctx: int) -> ContextPlan:
    """Decide how the model runs a context of ``ctx`` tokens (the rule: the module docstring).

    Args:
        config: the checkpoint's config (``models.checkpoint_folder.read_config(folder)``).
        ctx: the context length in tokens (``--ctx``), positive.

    Returns:
        A ContextPlan; ``plan.config`` is ``config`` itself unless YaRN was added.

    Raises:
        ValueError: ``ctx`` not a positive integer, or more than the checkpoint supports (the
            message names the largest context and how it comes about), or longer than its
            sliding attention window (``Qwen3Config.sliding_window``).
    """
    if isinstance(ctx, bool) or not isinstance(ctx, int) or ctx <= 0:
        raise ValueError(f"context size must be a positive number of tokens, got {ctx!r}")
    native = config.max_position_embeddings
    max_ctx = largest_context(config)
    scaling = config.rope_scaling
    window = config.sliding_window
    if window is not None and ctx > window:  # up to the window, full attention is the same
        raise ValueError(f"config.json sets use_sliding_window true with sliding_window "
                         f"{window:,}: infer has full attention only, which gives other output "
                         f"past {window:,} tokens: lower --ctx to at most {window:,}")
    if ctx > max_ctx:
        raise ValueError(f"--ctx {ctx:,} is beyond the largest context this checkpoint "
                         f"supports, {max_ctx:,} tokens ({_limit_reason(config)}): lower --ctx "
                         f"to at most {max_ctx:,}"
                         + (f" ({max_ctx // 1024}k)" if max_ctx % 1024 == 0 else ""))
    if scaling is not None:
        return ContextPlan(config, ctx, max_ctx, yarn_factor=scaling.factor)
    if ctx <= native:
        return ContextPlan(config, ctx, max_ctx)
    original = trained_length(config)
    factor = yarn_factor_for(ctx, original)
    assert factor <= MAX_FACTOR, (ctx, original, factor)  # ctx <= max_ctx guarantees it
    yarn = replace(config, rope_scaling=YarnScaling(factor=factor,
                                                    original_max_position_embeddings=original))
    note = (f"--ctx {ctx:,} is past this checkpoint's {native:,} native positions: static YaRN "
            f"is on (factor {factor:g} over {original:,}), which costs a little quality on short "
            f"texts")
    return ContextPlan(yarn, ctx, max_ctx, yarn_factor=factor, added_yarn=True, note=note)


def _limit_reason(config: Qwen3Config) -> str:
    """Why ``largest_context(config)`` is what it is, for an error message."""
    native = config.max_position_embeddings
    s = config.rope_scaling
    if s is not None:
        return (f"its config.json's YaRN rope_scaling: factor {s.factor:g} x "
                f"{s.original_max_position_embeddings:,}; raise the factor there for more")
    yarn = int(MAX_FACTOR * trained_length(config))
    if yarn <= native:
        return "its native max_position_embeddings"
    return (f"{native:,} native positions, {yarn:,} with YaRN factor {MAX_FACTOR:g} over "
            f"{trained_length(config):,}")
