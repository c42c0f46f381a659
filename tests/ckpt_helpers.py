"""Helpers of the checkpoint tests (``test_loader.py``, ``test_random_checkpoint.py``): a small
vocabulary for folders the tests copy and mutate, copying a folder, editing its config.json,
reading back every stored tensor, and a checkpoint whose greedy reply is scripted."""

from __future__ import annotations

import json
import shutil

import torch
from safetensors.torch import load_file, save_file

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


def scripted_ckpt(src, dst, chain: dict[int, int]):
    """A copy of the single-file checkpoint ``src`` at ``dst`` whose greedy reply follows
    ``chain`` (token id -> the id that comes next), for at most 8 ids that start a link.

    Every layer's ``o_proj`` and ``down_proj`` are zeroed, so the last hidden state is the last
    token's embedding. The ids that start a link get one-hot embeddings in the first 8 columns
    (every other row is random in the columns after them), and the lm_head row of each link's
    next id a large weight on its start's column: after such an id the next one wins by far.
    Embeddings are untied; ``generation_config.json`` asks for greedy decoding.
    """
    assert len(chain) <= 8
    shutil.copytree(src, dst)
    weights = dst / "model.safetensors"
    sd = load_file(weights)
    for name in sd:
        if "o_proj" in name or "down_proj" in name:
            sd[name] = torch.zeros_like(sd[name])
    emb = sd["model.embed_tokens.weight"]
    gen = torch.Generator().manual_seed(0)
    embed = torch.zeros(emb.shape)
    embed[:, 8:] = torch.randn(emb.shape[0], emb.shape[1] - 8, generator=gen) * 0.1
    head = torch.zeros(emb.shape)
    head[:, 8:] = torch.randn(emb.shape[0], emb.shape[1] - 8, generator=gen) * 0.01
    for column, (token, after) in enumerate(chain.items()):
        embed[token] = 0.0
        embed[token, column] = 1.0
        head[after, column] = 10.0
    sd["model.embed_tokens.weight"] = embed.to(emb.dtype)
    sd["lm_head.weight"] = head.to(emb.dtype)
    save_file(sd, weights, metadata={"format": "pt"})
    edit_config(dst, tie_word_embeddings=False)
    gen_cfg = json.loads((dst / "generation_config.json").read_text())
    gen_cfg["do_sample"] = False
    (dst / "generation_config.json").write_text(json.dumps(gen_cfg))
    return dst
