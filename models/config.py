"""Qwen3 model configuration, read from a Hugging Face ``config.json``.

Two config formats are in circulation and both are read:

- ``rope_theta`` + ``rope_scaling`` at the top level, as in the published Qwen3 checkpoints;
- ``rope_parameters`` (a dict holding ``rope_theta``, ``rope_type`` and the scaling fields), as
  transformers 5 writes when it saves a model.

The only RoPE scaling supported is YaRN (Peng et al. 2023, "YaRN: Efficient Context Window Extension
of Large Language Models"), which is what Qwen3 documents for contexts past 32k: ``models/yarn.py``
(``YarnScaling``, re-exported here). Single values are checked, and JSON files read
(``read_json_object``, re-exported here), by ``models/config_values.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from models.config_values import (
    MAX_POSITIONS,
    POSITIONS_REASON,
    boolean,
    positive_number,
    read_json_object,
    shown,
    to_int,
)
from models.dtypes import TORCH_DTYPES
from models.yarn import YarnScaling, parse_rope_scaling

SUPPORTED_ARCHITECTURES = ("Qwen3ForCausalLM",)


@dataclass(frozen=True)
class Qwen3Config:
    """The fields of a Qwen3 ``config.json`` that the model needs.

    Raises ``ValueError`` from ``from_dict``/``from_json`` for a config that is not a dense Qwen3
    model or that is internally inconsistent (the message names the field). ``sliding_window``
    is the window of the layers that slide (None: none does, as in every published Qwen3);
    ``models.context.plan_context`` refuses a context longer than it (full attention only here).
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    rope_scaling: YarnScaling | None = None
    max_position_embeddings: int = 40960
    tie_word_embeddings: bool = False
    torch_dtype: str = "bfloat16"
    hidden_act: str = "silu"
    sliding_window: int | None = None

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "head_dim"):
            to_int(name, getattr(self, name))
        to_int("max_position_embeddings", self.max_position_embeddings, maximum=MAX_POSITIONS,
               why=POSITIONS_REASON)
        for name in ("rms_norm_eps", "rope_theta"):  # NaN or <= 0 make every logit NaN
            positive_number(name, getattr(self, name))
        boolean("tie_word_embeddings", self.tie_word_embeddings)
        if self.rope_scaling is not None and self.rope_theta == 1:
            raise ValueError("config field rope_theta must not be 1 with YaRN rope scaling (its "
                             "ramp divides by ln(rope_theta)), got 1")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")
        if self.torch_dtype not in TORCH_DTYPES:
            raise ValueError(f"unsupported torch_dtype {self.torch_dtype!r}")
        if self.hidden_act not in ("silu", "swish"):  # the MLP is SwiGLU (transformers:
            # "swish" is SiLU too); another activation is another model
            raise ValueError(f"config field hidden_act must be \"silu\" (or \"swish\", the same "
                             f"SiLU; Qwen3's MLP: infer has no other activation), got "
                             f"{shown(self.hidden_act)}")
        if self.sliding_window is not None:
            to_int("sliding_window", self.sliding_window)

    @property
    def gqa_group(self) -> int:
        """Query heads per KV head (the GQA group size)."""
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def max_context(self) -> int:
        """The most positions (tokens) this config supports as it stands: with YaRN
        ``rope_scaling``, ``factor x original_max_position_embeddings`` (or the native length if
        that is larger), else the native ``max_position_embeddings``. ``models.context``
        decides when YaRN is added for a longer context."""
        native = self.max_position_embeddings
        s = self.rope_scaling
        if s is None:
            return native
        return max(native, int(s.factor * s.original_max_position_embeddings))

    @property
    def dtype(self) -> torch.dtype:
        """The checkpoint's stored dtype."""
        return TORCH_DTYPES[self.torch_dtype]

    def weight_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """Bytes of weights read per decoded token (embedding rows excluded; lm_head included)."""
        h, i = self.hidden_size, self.intermediate_size
        attn = h * (self.q_size + 2 * self.kv_size) + self.q_size * h
        mlp = 3 * h * i
        norms = 2 * h + 2 * self.head_dim
        per_layer = attn + mlp + norms
        return dtype_bytes * (self.num_hidden_layers * per_layer + h + self.vocab_size * h)

    # ------------------------------------------------------------------ parsing

    @classmethod
    def from_dict(cls, d: dict) -> Qwen3Config:
        """Build from a parsed ``config.json``. Raises ``ValueError`` naming the problem."""
        archs = d.get("architectures") or []
        model_type = d.get("model_type")
        for name in ("architectures", "layer_types"):
            if d.get(name) is not None and not (isinstance(d[name], list) and all(
                    isinstance(x, str) for x in d[name])):
                raise ValueError(f"config.json has an invalid value: {name} must be a list of "
                                 f"strings (or null), got {shown(d[name])}")
        if archs and not any(a in SUPPORTED_ARCHITECTURES for a in archs):
            raise ValueError(
                f"unsupported architecture {', '.join(archs)}: infer supports "
                f"{', '.join(SUPPORTED_ARCHITECTURES)} (dense Qwen3 models)")
        if model_type != "qwen3" and (not archs or model_type is not None):
            # no architectures: model_type must say qwen3; both given: they must agree
            raise ValueError(
                f"unsupported model_type {model_type!r}: infer supports "
                f"{', '.join(SUPPORTED_ARCHITECTURES)} (dense Qwen3 models)")
        if d.get("attention_bias") not in (None, False):  # Qwen2's q/k/v biases; not Qwen3's
            raise ValueError(f"config.json has an invalid value: attention_bias must be false "
                             f"(Qwen3 has no attention biases; infer loads none), got "
                             f"{shown(d['attention_bias'])}")
        for name in ("rope_scaling", "rope_parameters"):
            if d.get(name) is not None and not isinstance(d[name], dict):
                raise ValueError(f"config.json has an invalid value: {name} must be an object "
                                 f"(or null), got {d[name]!r}")
        try:
            rope_params = d.get("rope_parameters") or {}
            rope_theta = d.get("rope_theta", rope_params.get("rope_theta", 1_000_000.0))
            scaling, source = d.get("rope_scaling"), "rope_scaling"
            if scaling is None and rope_params:
                source = "rope_parameters"
                rtype = rope_params.get("rope_type", rope_params.get("type", "default"))
                scaling = None if rtype == "default" else rope_params
            hidden = to_int("hidden_size", d["hidden_size"])
            heads = to_int("num_attention_heads", d["num_attention_heads"])
            dtype = d.get("torch_dtype", d.get("dtype", "bfloat16")) or "bfloat16"
            return cls(
                vocab_size=to_int("vocab_size", d["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=to_int("intermediate_size", d["intermediate_size"]),
                num_hidden_layers=to_int("num_hidden_layers", d["num_hidden_layers"]),
                num_attention_heads=heads,
                num_key_value_heads=to_int("num_key_value_heads",
                                           d.get("num_key_value_heads", heads)),
                head_dim=to_int("head_dim", d.get("head_dim") or hidden // heads),
                rms_norm_eps=positive_number("rms_norm_eps", d.get("rms_norm_eps", 1e-6)),
                rope_theta=positive_number("rope_theta", rope_theta),
                rope_scaling=parse_rope_scaling(scaling, source),
                max_position_embeddings=to_int("max_position_embeddings",
                                               d.get("max_position_embeddings", 40960),
                                               maximum=MAX_POSITIONS, why=POSITIONS_REASON),
                tie_word_embeddings=d.get("tie_word_embeddings", False),  # checked: a bool
                torch_dtype=str(dtype),
                hidden_act=d.get("hidden_act", "silu"),
                sliding_window=_sliding_window(d),
            )
        except KeyError as e:
            raise ValueError(f"config.json is missing the field {e.args[0]!r}") from None
        except (TypeError, ValueError) as e:
            raise ValueError(f"config.json has an invalid value: {e}") from None

    @classmethod
    def from_json(cls, path: str | Path) -> Qwen3Config:
        """Read ``config.json`` (a file, or a folder holding one).

        Raises ``FileNotFoundError`` if it is missing and ``ValueError`` if it cannot be read
        (no read permission, say: the message names the file), is not valid JSON or not a
        supported Qwen3 config.
        """
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise FileNotFoundError(f"no config.json at {path}")
        return cls.from_dict(read_json_object(path))


def _sliding_window(d: dict) -> int | None:
    """The attention window of ``d``'s sliding layers as transformers' Qwen3 reads it, None when
    every layer attends to the whole context: ``sliding_window`` (default 4096) when
    ``use_sliding_window`` is true and a layer slides (one of ``layer_types`` is
    "sliding_attention", else a layer at or past ``max_window_layers``, default 28)."""
    use = d.get("use_sliding_window", False)
    if use is not None:
        boolean("use_sliding_window", use)
    window = d.get("sliding_window", 4096)
    if window is not None:  # checked even when unused: a bad value is a bad file
        window = to_int("sliding_window", window)
    if d.get("max_window_layers") is not None:
        to_int("max_window_layers", d["max_window_layers"], minimum=0)
    if not use or window is None:
        return None
    types = d.get("layer_types")
    if isinstance(types, list):
        slides = "sliding_attention" in types
    else:
        slides = to_int("max_window_layers", d.get("max_window_layers", 28), minimum=0) < to_int(
            "num_hidden_layers", d["num_hidden_layers"])
    return window if slides else None
