"""models/random_checkpoint.py: the random-weight writer (shapes, seeds, the tokenizer copy, the
sizes' configs, a crash midway). Its command line (``main``) and its errors are
``test_random_checkpoint_cli.py``; the loader's errors are ``test_loader.py``."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import CONFIGS_DIR
from safetensors import safe_open
from safetensors.torch import load_file

from models.random_checkpoint import base_config, tensor_specs, write_random_checkpoint

# ------------------------------------------------------------------ random checkpoints


@pytest.mark.parametrize("size", ["tiny", "0.6b", "1.7b", "4b", "8b", "14b", "4b-2507"])
def test_random_checkpoint_layout_matches_transformers(size):
    """The writer's tensor list equals the names and shapes of transformers' model (on meta)."""
    transformers = pytest.importorskip("transformers")
    cfg = base_config(size)
    with torch.device("meta"):
        hf = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**cfg))
    want = {n: tuple(p.shape) for n, p in hf.state_dict().items()}
    if cfg["tie_word_embeddings"]:
        want.pop("lm_head.weight")
    assert {n: s for n, s, _ in tensor_specs(cfg)} == want


def test_random_checkpoint_sharding_and_files(tmp_path, tokenizer_dir):
    out = write_random_checkpoint(tmp_path / "c", "tiny", shards=3, tie=False, vocab_size=512,
                                  tokenizer=tokenizer_dir, device="cpu")
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert files == [f"model-0000{k}-of-00003.safetensors" for k in (1, 2, 3)]
    seen = {}
    for f in files:
        with safe_open(out / f, "pt") as g:
            seen.update({k: f for k in g.keys()})  # noqa: SIM118
    assert seen == index["weight_map"]
    specs = tensor_specs(json.loads((out / "config.json").read_text()))
    assert set(seen) == {n for n, _, _ in specs}
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"):
        if (tokenizer_dir / name).is_file():
            assert (out / name).read_bytes() == (tokenizer_dir / name).read_bytes()
    gen = json.loads((out / "generation_config.json").read_text())
    assert 151645 in gen["eos_token_id"]
    norm = load_file(out / seen["model.norm.weight"])["model.norm.weight"]
    assert (norm - 1).abs().max() < 0.2 and norm.std() > 0  # near 1, not constant


def test_real_size_config_is_the_published_one():
    cfg = base_config("0.6b", CONFIGS_DIR)
    published = json.loads((CONFIGS_DIR / "Qwen3-0.6B" / "config.json").read_text())
    assert cfg == published
    assert base_config("0.6b") == published  # the default folder resolves to the same data
    with pytest.raises(ValueError, match="unknown size"):
        base_config("70b")
    with pytest.raises(ValueError, match="no config for size 8b"):
        base_config("8b", CONFIGS_DIR / "nowhere")


@pytest.mark.parametrize("fail_in", ["writer", "draw"])
def test_random_checkpoint_crash_leaves_no_weights_file(tmp_path, monkeypatch, fail_in):
    """A crash midway (e.g. torch without numpy) leaves no *.safetensors, not a truncated one."""
    import models.random_checkpoint as rc
    import models.safetensors_writer as sw

    calls = []

    def boom(*args, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("Numpy is not available")
        return real(*args, **kw)

    real = sw.StreamingWriter.write if fail_in == "writer" else rc._draw
    if fail_in == "writer":
        monkeypatch.setattr(sw.StreamingWriter, "write", lambda self, t: boom(self, t))
    else:
        monkeypatch.setattr(rc, "_draw", boom)
    with pytest.raises(RuntimeError, match="Numpy"):
        write_random_checkpoint(tmp_path / "c", "tiny", shards=2, vocab_size=256,
                                num_hidden_layers=1, device="cpu")
    assert len(calls) == 3
    left = sorted(p.name for p in (tmp_path / "c").iterdir())
    assert not [n for n in left if "safetensors" in n], left
    monkeypatch.undo()
    out = write_random_checkpoint(tmp_path / "c", "tiny", vocab_size=256, num_hidden_layers=1,
                                  device="cpu")
    assert sorted(p.name for p in out.glob("*safetensors*")) == ["model.safetensors"]
