"""Write a random-weight Qwen3 checkpoint in the Hugging Face layout (tests and benchmarks).

Usage::

    python -m models.random_checkpoint --size 8b --out /tmp/qwen3-8b-random \\
        [--tokenizer DIR] [--shards N] [--dtype bfloat16] [--seed 0] [--tie|--no-tie]

The folder it writes is complete for ``infer``: the tokenizer files come from ``--tokenizer DIR``,
by default from ``$INFER_SHARED/data/qwen3-tokenizer`` (an error naming that path and the flag
when it is not there). ``write_random_checkpoint`` itself copies a tokenizer only when asked.

Sizes: ``tiny`` and ``0.6b``/``1.7b``/``4b``/``8b``/``14b``/``4b-2507``; what each is, and where
the published configs are read from (``$INFER_SHARED/data/qwen3-configs/``, or ``--config-dir``),
is ``models/qwen3_sizes.py``, whose names this module re-exports.

Design: weights are drawn on the fastest device present (CUDA if any), one tensor at a time, and
streamed into the files by ``models/safetensors_writer.py`` on a background thread (host memory
holds a few tensors, never a shard). Linear weights are N(0, 0.02^2), norm weights 1 + N(0,
0.02^2): bf16 activations stay finite, attention is non-trivial. Every folder gets a ``MARKER``
file; the command refuses to overwrite safetensors it did not write (``--force`` does).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path

import torch

from models.dtypes import TORCH_DTYPES
from models.paths import expand_user
from models.qwen3_sizes import (
    DEFAULT_CONFIG_DIR,
    DEFAULT_GENERATION_CONFIG,
    REAL_SIZES,
    REPO,
    SHARED,
    SIZES,
    TINY_CONFIG,
    base_config,
    write_generation_config,
)
from models.safetensors_writer import write_checkpoint_files

__all__ = [  # with the size names of models/qwen3_sizes.py, imported from here as before
    "DEFAULT_CONFIG_DIR", "DEFAULT_GENERATION_CONFIG", "DEFAULT_TOKENIZER_DIR", "MARKER",
    "REAL_SIZES", "REPO", "SHARED", "SIZES", "TINY_CONFIG", "TOKENIZER_FILES", "base_config",
    "copy_tokenizer", "foreign_checkpoint", "main", "tensor_specs", "write_generation_config",
    "write_random_checkpoint",
]

DEFAULT_TOKENIZER_DIR = SHARED / "data" / "qwen3-tokenizer"  # the CLI copies it in by default
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt")

_SHARD_BYTES = 5 * 10**9  # default shard size, as transformers' save_pretrained
MARKER = ".random-weights"  # written into every folder: what main may overwrite without --force


def tensor_specs(cfg: dict) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, init) for every stored tensor, in HF order; init is 'linear' or 'norm'."""
    h, i, d = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d
    specs = [("model.embed_tokens.weight", (cfg["vocab_size"], h), "linear")]
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}."
        specs += [
            (p + "input_layernorm.weight", (h,), "norm"),
            (p + "mlp.down_proj.weight", (h, i), "linear"),
            (p + "mlp.gate_proj.weight", (i, h), "linear"),
            (p + "mlp.up_proj.weight", (i, h), "linear"),
            (p + "post_attention_layernorm.weight", (h,), "norm"),
            (p + "self_attn.k_norm.weight", (d,), "norm"),
            (p + "self_attn.k_proj.weight", (kv, h), "linear"),
            (p + "self_attn.o_proj.weight", (h, q), "linear"),
            (p + "self_attn.q_norm.weight", (d,), "norm"),
            (p + "self_attn.q_proj.weight", (q, h), "linear"),
            (p + "self_attn.v_proj.weight", (kv, h), "linear"),
        ]
    specs.append(("model.norm.weight", (h,), "norm"))
    if not cfg.get("tie_word_embeddings", False):
        specs.append(("lm_head.weight", (cfg["vocab_size"], h), "linear"))
    return specs


def write_random_checkpoint(out_dir: str | Path, size: str = "tiny", *,
                            config_dir: str | Path | None = None, shards: int | None = None,
                            dtype: str = "bfloat16", seed: int = 0, tie: bool | None = None,
                            tokenizer: str | Path | None = None, vocab_size: int | None = None,
                            num_hidden_layers: int | None = None,
                            overrides: dict | None = None, device: str | None = None) -> Path:
    """Write a random Qwen3 checkpoint folder and return its path.

    Args:
        out_dir: folder to create (existing files of the same names are overwritten).
        size: "tiny" or one of 0.6b, 1.7b, 4b, 8b, 14b, 4b-2507 (real configs from
            ``config_dir``).
        shards: number of safetensors files; None = 1 file per ~5 GB. With more than one file,
            ``model.safetensors.index.json`` lists them as transformers does.
        dtype: stored dtype, "bfloat16", "float16" or "float32" (also written as torch_dtype).
        seed: RNG seed (values differ between CPU and CUDA for the same seed).
        tie: override tie_word_embeddings (a tied checkpoint stores no lm_head, as HF does).
        tokenizer: a folder whose tokenizer files are copied in.
        vocab_size, num_hidden_layers, overrides: config.json fields to override (tests).
            NOTE: token ids from the real tokenizer go up to 151668, so a smaller vocab_size
            only suits tests that make their own ids.
        device: where to draw the random numbers; default CUDA when present, else CPU.

    Raises:
        ValueError: unknown size or dtype, ``shards``, ``num_hidden_layers`` or ``vocab_size``
            below 1, a missing config, a ``tokenizer`` folder without
            ``tokenizer.json``, or an ``out_dir`` that is a file or cannot be created (raised
            before anything is written).
        OSError: writing the files failed (a full disk).
    """
    if dtype not in TORCH_DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}: choose one of {', '.join(TORCH_DTYPES)}")
    _check_counts(shards, num_hidden_layers, vocab_size)
    tdtype = TORCH_DTYPES[dtype]
    cfg = base_config(size, config_dir)
    cfg["torch_dtype"] = dtype
    if tie is not None:
        cfg["tie_word_embeddings"] = bool(tie)
    if vocab_size is not None:
        cfg["vocab_size"] = int(vocab_size)
    if num_hidden_layers is not None:
        cfg["num_hidden_layers"] = cfg["max_window_layers"] = int(num_hidden_layers)
    cfg.update(overrides or {})

    if tokenizer is not None and not (Path(tokenizer) / "tokenizer.json").is_file():
        raise ValueError(f"no tokenizer.json in {tokenizer}: pass the folder holding the "
                         "tokenizer files")  # before anything is written
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} exists and is not a folder: give a new or an existing folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a read-only place, /proc, a file on the way
        raise ValueError(f"cannot create the folder {out}: {e.strerror or e}") from None
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    write_generation_config(out, size, config_dir)
    if tokenizer is not None:
        copy_tokenizer(Path(tokenizer), out)

    specs = tensor_specs(cfg)
    esize = torch.empty((), dtype=tdtype).element_size()
    total = sum(math.prod(shape) * esize for _, shape, _ in specs)
    n_shards = shards if shards is not None else max(1, math.ceil(total / _SHARD_BYTES))
    init = {name: how for name, _, how in specs}
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    gen = torch.Generator(device=dev).manual_seed(seed)
    (out / MARKER).write_text("random weights: models/random_checkpoint.py\n")
    write_checkpoint_files(out, [(name, shape) for name, shape, _ in specs], tdtype,
                           lambda name, shape: _draw(shape, init[name], tdtype, dev, gen),
                           n_shards)
    return out


def _check_counts(shards: int | None, layers: int | None, vocab_size: int | None) -> None:
    """ValueError for a count below 1 (None: not given), named by its flag."""
    for name, value in (("--shards", shards), ("--layers", layers), ("--vocab-size", vocab_size)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")


def foreign_checkpoint(out: str | Path) -> bool:
    """Whether the folder ``out`` holds safetensors files that this module did not write (no
    ``MARKER`` file): weights that ``main`` must not overwrite without ``--force``."""
    out = Path(out)
    return (out.is_dir() and not (out / MARKER).is_file()
            and any(out.glob("*.safetensors")))


def _draw(shape, init: str, dtype: torch.dtype, dev: torch.device, gen) -> torch.Tensor:
    t = torch.randn(shape, device=dev, dtype=torch.float32 if dev.type == "cpu" else dtype,
                    generator=gen)
    t.mul_(0.02)
    if init == "norm":
        t.add_(1.0)
    return t.to(dtype).cpu()


def copy_tokenizer(src: Path, out: Path) -> None:
    """Copy the ``TOKENIZER_FILES`` present in ``src`` into ``out``. Raises ValueError when
    ``src`` has no tokenizer.json."""
    if not (src / "tokenizer.json").is_file():
        raise ValueError(f"no tokenizer.json in {src}: pass the folder holding the tokenizer files")
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copyfile(src / name, out / name)


class _OneLineParser(argparse.ArgumentParser):
    """argparse, with an error as one line on stderr and exit 2 (no usage block), as infer's."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> None:
    p = _OneLineParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", choices=SIZES, default="tiny")
    p.add_argument("--out", required=True)
    p.add_argument("--tokenizer", default=None,
                   help=f"folder with the tokenizer files (default {DEFAULT_TOKENIZER_DIR})")
    p.add_argument("--shards", type=int, default=None, help="files (default: one per ~5 GB)")
    p.add_argument("--dtype", choices=tuple(TORCH_DTYPES), default="bfloat16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tie", action=argparse.BooleanOptionalAction, default=None,
                   help="override tie_word_embeddings")
    p.add_argument("--vocab-size", type=int, default=None)
    p.add_argument("--layers", type=int, default=None, help="override num_hidden_layers")
    p.add_argument("--config-dir", default=None, help=f"default {DEFAULT_CONFIG_DIR}")
    p.add_argument("--device", default=None, help="default: cuda if available")
    p.add_argument("--force", action="store_true",
                   help="overwrite a folder holding a checkpoint this tool did not write")
    a = p.parse_args(argv)
    if not a.out.strip():  # Path("") is the current folder: files would land wherever we are
        p.error("--out is empty: give the folder to write the checkpoint to")
    a.out, a.tokenizer, a.config_dir = (x and str(expand_user(x))
                                        for x in (a.out, a.tokenizer, a.config_dir))
    if a.out.startswith("~"):  # a ~user of no such user: not a folder of that name here
        p.error(f"--out {a.out}: {a.out.split('/')[0]} is no home folder on this system: give "
                f"the full path (./{a.out} for a folder of that name here)")
    try:  # before the --vocab-size note below: an error comes alone
        _check_counts(a.shards, a.layers, a.vocab_size)
        base_config(a.size, a.config_dir)
    except ValueError as e:
        p.error(str(e))
    if foreign_checkpoint(a.out) and not a.force:  # someone's real weights, perhaps
        p.error(f"{a.out} already holds a checkpoint (*.safetensors) that this tool did not "
                "write: give a new folder, or --force to overwrite it")
    if a.tokenizer is None:
        if not (DEFAULT_TOKENIZER_DIR / "tokenizer.json").is_file():
            p.error(f"no tokenizer.json in {DEFAULT_TOKENIZER_DIR} (the default): set "
                    "INFER_SHARED to the shared/ folder, or pass --tokenizer DIR, a folder "
                    "holding a Qwen3 tokenizer.json and tokenizer_config.json; infer cannot run "
                    "a checkpoint without them")
        a.tokenizer = str(DEFAULT_TOKENIZER_DIR)
    if a.device is not None:
        try:
            dev = torch.device(a.device)
        except RuntimeError as e:
            p.error(f"--device {a.device!r} is not a device: {e}")
        if dev.type == "cuda" and not torch.cuda.is_available():
            p.error(f"--device {a.device}: no CUDA GPU here (use --device cpu, the default "
                    f"without one)")
    if a.vocab_size is not None:
        from tokenizers import Tokenizer

        path = Path(a.tokenizer) / "tokenizer.json"
        if path.is_file():
            need = Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True)
            if a.vocab_size < need:  # fine for tests of the loader, not for infer itself
                print(f"{p.prog}: note: --vocab-size {a.vocab_size} is smaller than the "
                      f"tokenizer's {need} tokens: infer will refuse this checkpoint",
                      file=sys.stderr)
    t0 = time.perf_counter()
    try:
        out = write_random_checkpoint(a.out, a.size, config_dir=a.config_dir, shards=a.shards,
                                      dtype=a.dtype, seed=a.seed, tie=a.tie,
                                      tokenizer=a.tokenizer, vocab_size=a.vocab_size,
                                      num_hidden_layers=a.layers, device=a.device)
    except ValueError as e:  # a bad --out / --tokenizer / --config-dir: one line, exit 2
        p.error(str(e))
    except OSError as e:  # writing failed (a full disk): a runtime failure, exit 1
        print(f"{p.prog}: error: cannot write {a.out}: {e.strerror or e}", file=sys.stderr)
        sys.exit(1)
    nbytes = sum(f.stat().st_size for f in out.glob("*.safetensors"))
    print(f"wrote {out} ({nbytes / 1e9:.2f} GB) in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
