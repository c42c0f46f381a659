"""YaRN RoPE scaling (Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large Language
Models"): the parameters (``YarnScaling``) and their reading from a config.json's ``rope_scaling``
or ``rope_parameters`` (``parse_rope_scaling``). ``models/rope.py`` turns them into frequencies.

What each field may be follows from how transformers' ``_compute_yarn_parameters`` uses it (and
its ``_validate_yarn_rope_parameters`` warnings, which infer makes errors):

- ``factor``: a number >= 1 (``1 / (factor * pos_freqs)``, ``log(factor)``), not a bool or a
  string; ``factor x original_max_position_embeddings`` at most 2**24 positions
  (``models.config_values.MAX_POSITIONS``).
- ``original_max_position_embeddings``: a positive integer (``log(original / (beta * 2 pi))``).
- ``beta_fast`` >= ``beta_slow`` > 0 (null: 32 and 1): the ramp runs from the dim that turns
  ``beta_fast`` times over the original context to the one that turns ``beta_slow`` times; a
  beta <= 0 has no logarithm (``math domain error``) and beta_fast < beta_slow inverts the ramp.
- ``attention_factor``: null (derived) or a number in (0, 100] (``MAX_COS_SIN_SCALE``): it
  multiplies cos and sin, so every attention logit by its square (NaN or <= 0 break them).
- ``mscale``, ``mscale_all_dim``: null or a finite number >= 0 (0, as null: not used, as
  transformers reads ``if mscale and mscale_all_dim``); a negative one could make the derived
  attention factor <= 0, and the factor they give is at most 100 too.
- ``truncate``: true or false (absent: true). transformers reads null as false: refused here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from models.config_values import MAX_POSITIONS, POSITIONS_REASON, boolean, real, shown, to_int

# the most cos/sin may be multiplied by: every attention logit is multiplied by its square, and
# YaRN's own values are 1 to 3 (0.1 ln(factor) + 1 <= 2.7 within MAX_POSITIONS); far past it the
# logits overflow (the decode stops on non-finite logits, blaming the dtype)
MAX_COS_SIN_SCALE = 100.0


def _mscale(scale: float, m: float = 1.0) -> float:
    """YaRN's attention temperature term ``0.1 * m * ln(scale) + 1`` (1 for scale <= 1)."""
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


@dataclass(frozen=True)
class YarnScaling:
    """YaRN RoPE scaling parameters (valid ranges: the module docstring).

    Attributes:
        factor: context extension factor s (e.g. 4.0 turns 32768 into 131072 positions).
        original_max_position_embeddings: the context length the model was trained at (tokens).
        beta_fast, beta_slow: the YaRN ramp bounds, in rotations over the original context.
        attention_factor: the logit-temperature multiplier on cos/sin; None means
            ``0.1 * ln(factor) + 1`` as in the paper (or the mscale ratio below when both given):
            ``cos_sin_scale`` is the value used.
        mscale, mscale_all_dim: DeepSeek-style terms for the default attention_factor.
        truncate: round the ramp bounds outward to whole dims (transformers' default, True).
        source: the config.json field it was read from, for messages (not compared).

    Raises:
        ValueError: a value out of range, naming ``source`` and the field.
    """

    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True
    source: str = field(default="rope_scaling", compare=False, repr=False)

    def __post_init__(self):
        def name(key: str) -> str:
            return f"{self.source}.{key}"

        real(name("factor"), self.factor, "a finite number >= 1", lambda x: x >= 1)
        original = to_int(name("original_max_position_embeddings"),
                          self.original_max_position_embeddings, maximum=MAX_POSITIONS,
                          why=POSITIONS_REASON)
        if self.factor * original > MAX_POSITIONS:
            raise ValueError(f"config field {name('factor')} x original_max_position_embeddings "
                             f"must be at most {MAX_POSITIONS:,} positions ({POSITIONS_REASON}), "
                             f"got {shown(self.factor)} x {original:,}")
        for beta in ("beta_fast", "beta_slow"):
            real(name(beta), getattr(self, beta), "a positive finite number (null: the default)",
                 lambda x: x > 0)
        if self.beta_fast < self.beta_slow:
            raise ValueError(f"config field {name('beta_fast')} must be >= beta_slow (the ramp "
                             f"runs from beta_fast rotations down to beta_slow), got beta_fast "
                             f"{self.beta_fast:g} and beta_slow {self.beta_slow:g}")
        if self.attention_factor is not None:
            real(name("attention_factor"), self.attention_factor, f"a number in (0, "
                 f"{MAX_COS_SIN_SCALE:g}] (or null: derived from factor)",
                 lambda x: 0 < x <= MAX_COS_SIN_SCALE)
        for m in ("mscale", "mscale_all_dim"):
            if getattr(self, m) is not None:
                real(name(m), getattr(self, m), "a finite number >= 0 (0 or null: not used)",
                     lambda x: x >= 0)
        boolean(name("truncate"), self.truncate)
        if not self.cos_sin_scale <= MAX_COS_SIN_SCALE:  # a huge mscale (inf included)
            raise ValueError(f"config field {name('mscale')} must give an attention factor of at "
                             f"most {MAX_COS_SIN_SCALE:g} (mscale / mscale_all_dim terms), got "
                             f"mscale {shown(self.mscale)} and mscale_all_dim "
                             f"{shown(self.mscale_all_dim)}")

    @property
    def cos_sin_scale(self) -> float:
        """The attention factor that multiplies cos and sin: ``attention_factor``, else the
        mscale ratio when ``mscale`` and ``mscale_all_dim`` are both set (and not 0), else
        ``0.1 * ln(factor) + 1`` (transformers' ``_compute_yarn_parameters``)."""
        if self.attention_factor is not None:
            return float(self.attention_factor)
        if self.mscale and self.mscale_all_dim:
            return _mscale(self.factor, self.mscale) / _mscale(self.factor, self.mscale_all_dim)
        return _mscale(self.factor)


def parse_rope_scaling(s: dict | None, source: str = "rope_scaling") -> YarnScaling | None:
    """The YaRN scaling of a config.json's ``rope_scaling`` (or ``rope_parameters``: ``source``
    names which, for messages); None when it is null, empty or of type "default".

    Raises:
        ValueError: another rope type, a missing ``factor``/``original_max_position_embeddings``,
            or a value out of range (the message names the field).
    """
    if not s:
        return None
    rtype = s.get("rope_type", s.get("type"))
    if rtype in (None, "default"):
        return None
    if rtype != "yarn":
        raise ValueError(f"unsupported {source} type {rtype!r}: only 'yarn' is supported")
    if "factor" not in s or "original_max_position_embeddings" not in s:
        raise ValueError(f"YaRN {source} needs 'factor' and 'original_max_position_embeddings'")

    def given(key: str, default=None):  # null reads as absent (transformers: ``get(key) or``)
        return default if s.get(key) is None else s[key]

    return YarnScaling(
        factor=given("factor"),
        original_max_position_embeddings=to_int(
            f"{source}.original_max_position_embeddings", s["original_max_position_embeddings"],
            maximum=MAX_POSITIONS, why=POSITIONS_REASON),
        beta_fast=given("beta_fast", 32.0),
        beta_slow=given("beta_slow", 1.0),
        attention_factor=given("attention_factor"),
        mscale=given("mscale"),
        mscale_all_dim=given("mscale_all_dim"),
        truncate=s.get("truncate", True),
        source=source,
    )
