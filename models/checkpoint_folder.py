"""What a Qwen3 checkpoint folder (Hugging Face layout) holds, read without loading a weight.

``read_config`` reads its ``config.json`` (``models.config.Qwen3Config``; a wrong architecture is
a ValueError); ``checkpoint_files`` finds its weights: ``model.safetensors``, or the shards named
in ``model.safetensors.index.json``; ``read_headers`` reads only the safetensors headers (every
tensor's name, shape and dtype), which the loader (``models/loader.py``) checks against the model
before any weight memory is allocated. Every problem is a ValueError naming the file and what to
do.
"""

from __future__ import annotations

import os
from pathlib import Path

from safetensors import safe_open

from models.config import Qwen3Config
from models.config_values import (
    json_kind,
    optional_file,
    read_json_object,
    shown,
    unlistable,
    unreadable,
)

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def read_config(folder: str | Path) -> Qwen3Config:
    """The folder's ``config.json`` as a Qwen3Config. Raises ValueError naming the problem."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise ValueError(f"no config.json in {folder}: pass a Hugging Face Qwen3 model folder")
    return Qwen3Config.from_json(path)  # an unreadable file: read_text's ValueError


def checkpoint_files(folder: str | Path) -> list[Path]:
    """The safetensors files of a checkpoint folder, from the index when there is one.

    Raises ValueError for a folder with neither file (naming the index when shards are there), a
    folder that may not be listed, an unreadable index, a missing shard, a folder or a broken
    link in a weight file's place (naming the file), or a path that is not UTF-8 (the
    safetensors library takes only UTF-8 paths).
    """
    return [_utf8_path(p) for p in _weight_files(Path(folder))]


def _utf8_path(path: Path) -> Path:
    """``path``, if the safetensors library can open it (its paths are Rust strings: UTF-8)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"cannot read {path}: the safetensors library opens only "
                         "UTF-8 paths; rename the folder (or the file) to a UTF-8 name") from None
    return path


def _weight_files(folder: Path) -> list[Path]:
    index = folder / INDEX_FILE
    if optional_file(index):
        weight_map = read_json_object(index).get("weight_map")  # unreadable, not JSON: its error
        if not isinstance(weight_map, dict):
            raise ValueError(f"cannot read {index}: expected JSON with a 'weight_map' object, "
                             f"got {json_kind(weight_map)}")
        odd = next(((k, v) for k, v in weight_map.items() if not isinstance(v, str) or not v), None)
        if odd is not None:
            raise ValueError(f"cannot read {index}: weight_map[{odd[0]!r}] must be the name of a "
                             f"shard file, got {shown(odd[1])}")
        names = sorted(set(weight_map.values()))
        missing = [n for n in names if not optional_file(folder / n)]
        if missing:
            raise ValueError(f"missing checkpoint shard {', '.join(missing)} in {folder} "
                             f"(listed in {INDEX_FILE}); download the complete checkpoint")
        return [folder / n for n in names]
    if optional_file(folder / SINGLE_FILE):
        return [folder / SINGLE_FILE]
    try:  # Path.glob would take a folder that may not be listed for an empty one
        shards = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    except OSError as e:
        raise unlistable(folder, e) from None
    if shards:  # shards without their index: say which file is missing
        names = ", ".join(shards[:3]) + (", ..." if len(shards) > 3 else "")
        raise ValueError(f"{INDEX_FILE} is missing in {folder}, which holds {len(shards)} "
                         f"safetensors file{'s' * (len(shards) > 1)} ({names}): download the "
                         f"index with the shards (a single file must be named {SINGLE_FILE})")
    raise ValueError(f"no {SINGLE_FILE} or {INDEX_FILE} in {folder}: infer loads Hugging Face "
                     "safetensors checkpoints (.bin/.pth/GGUF are not supported)")


def read_headers(files: list[Path]) -> dict[str, tuple[Path, tuple[int, ...], str]]:
    """name -> (file, shape, safetensors dtype string) over all files; duplicates are errors."""
    found: dict[str, tuple[Path, tuple[int, ...], str]] = {}
    for path in files:
        try:
            path.open("rb").close()  # no read permission: say so, not "not a valid safetensors"
        except OSError as e:
            raise unreadable(path, e) from None
        try:
            with safe_open(path, framework="pt") as f:
                for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                    sl = f.get_slice(name)
                    if name in found:
                        raise ValueError(f"tensor {name} is stored twice, in {found[name][0].name} "
                                         f"and {path.name}")
                    found[name] = (path, tuple(sl.get_shape()), sl.get_dtype())
        except ValueError:
            raise
        except Exception as e:  # safetensors raises its own error type for corrupt files
            if "Cannot allocate memory" in str(e):  # mmap refused: memory, not the file
                raise MemoryError(f"out of memory mapping {path} ({e}): free memory or use a "
                                  "machine with more") from None
            raise ValueError(f"cannot read {path}: not a valid safetensors file ({e})") from None
    return found
