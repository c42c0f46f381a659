"""Helpers of the checkpoint tests (``test_loader.py``, ``test_random_checkpoint.py``): a small
vocabulary for folders the tests copy and mutate, copying a folder, editing its config.json and
reading back every stored tensor."""

from __future__ import annotations

import json
import shutil

import torch
from safetensors.torch import load_file

from models.checkpoint_folder import checkpoint_files

SMALL = dict(vocab_size=512)  # mutation tests copy folders: keep them small


def stored_tensors(folder) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint in ``folder``, by its stored name."""
    out = {}
    for path in checkpoint_files(folder):
        out.update(load_file(path))
    return out


def copy_ckpt(src, tmp_path):
    """A copy of the checkpoint folder ``src`` at ``tmp_path / "ckpt"``."""
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    return dst


def edit_config(folder, **changes):
    """Update fields of ``folder/config.json``."""
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))
