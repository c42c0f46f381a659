"""The named Qwen3 sizes of the random checkpoints: their config.json and generation_config.json.

Sizes: ``tiny`` (hidden 64, 2 layers, 4 query / 2 KV heads, head_dim 32, intermediate 128, the
real vocabulary of 151936 so that ids from the real tokenizer are valid; ``vocab_size=`` makes it
smaller when a test uses its own ids), and ``0.6b``/``1.7b``/``4b``/``8b``/``14b`` and ``4b-2507``
(Qwen3-4B-Instruct-2507, also the shape of its Thinking twin: 262144 native positions, rope_theta
5e6), read from the published configs in ``$INFER_SHARED/data/qwen3-configs/`` (INFER_SHARED
defaults to ``../shared`` next to the repo; or pass ``config_dir=`` / ``--config-dir``).

Design: ``tiny`` is written out here; a real size is its published file, read as it is (no
transformers). ``models/random_checkpoint.py`` builds on these and re-exports them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("INFER_SHARED", REPO.parent / "shared"))
DEFAULT_CONFIG_DIR = SHARED / "data" / "qwen3-configs"

REAL_SIZES = {"0.6b": "Qwen3-0.6B", "1.7b": "Qwen3-1.7B", "4b": "Qwen3-4B", "8b": "Qwen3-8B",
              "14b": "Qwen3-14B", "4b-2507": "Qwen3-4B-Instruct-2507"}
SIZES = ("tiny", *REAL_SIZES)

TINY_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
    "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 32,
    "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128,
    "max_position_embeddings": 40960, "max_window_layers": 2, "num_attention_heads": 4,
    "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
    "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 151936,
}

DEFAULT_GENERATION_CONFIG = {
    "bos_token_id": 151643, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
    "do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95,
}


def base_config(size: str, config_dir: str | Path | None = None) -> dict:
    """The config.json dict for a named size. Raises ValueError for an unknown size."""
    if size == "tiny":
        return dict(TINY_CONFIG)
    if size not in REAL_SIZES:
        raise ValueError(f"unknown size {size!r}: choose one of {', '.join(SIZES)}")
    path = Path(config_dir or DEFAULT_CONFIG_DIR) / REAL_SIZES[size] / "config.json"
    if not path.is_file():
        raise ValueError(f"no config for size {size} at {path}: give --config-dir a folder "
                         f"holding {REAL_SIZES[size]}/config.json")
    return json.loads(path.read_text())


def write_generation_config(out: Path, size: str = "tiny", config_dir=None) -> None:
    """Write ``out/generation_config.json``: the published one for a real size (from
    ``config_dir``), else ``DEFAULT_GENERATION_CONFIG``."""
    src = None
    if size in REAL_SIZES:
        src = Path(config_dir or DEFAULT_CONFIG_DIR) / REAL_SIZES[size] / "generation_config.json"
    if src is not None and src.is_file():
        shutil.copyfile(src, out / "generation_config.json")
    else:
        (out / "generation_config.json").write_text(
            json.dumps(DEFAULT_GENERATION_CONFIG, indent=2) + "\n")
