"""benchmarks/small_lm_grow.py (a trained small Qwen3 widened without changing its function) and
``train_small_qwen3.py --grow-hidden``, on the CPU at tiny sizes (the real vocabulary).

With no noise the grown model's logits equal the old ones (norm weights and eps scaled, the
gate/up halves placed at their new offsets); with noise they move by about that much; the
widths can only grow; the script trains, grows, trains on, and saves a checkpoint the loader
reads at the new width.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch
from conftest import REPO, TEXTS_DIR, TOKENIZER_DIR

sys.path.insert(0, str(REPO))  # the benchmarks are scripts of the repo, not an installed package

from benchmarks.small_lm import build_model, forward_batch, small_config  # noqa: E402
from benchmarks.small_lm_grow import grow, grown_config  # noqa: E402
from benchmarks.train_small_qwen3 import main  # noqa: E402
from models.loader import load_model  # noqa: E402

SHAPE = dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16)


@pytest.fixture(scope="module")
def small():
    torch.set_num_threads(1)
    cfg = small_config(hidden_size=32, intermediate_size=48, **SHAPE)
    model = build_model(cfg, seed=3)
    with torch.no_grad():  # trained-looking norms: the scaling must carry them
        for p in model.parameters():
            if p.ndim == 1:
                p.mul_(1 + 0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    return model, cfg


def _logits(model, ids):
    with torch.no_grad():
        return forward_batch(model, ids) @ model.lm_head.weight.T


def test_grow_without_noise_keeps_the_logits(small):
    model, cfg = small
    ids = torch.randint(0, 151936, (2, 12), generator=torch.Generator().manual_seed(0))
    want = _logits(model, ids)
    grown, gcfg = grow(model, cfg, 128, 96)
    got = _logits(grown, ids)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))
    assert gcfg["hidden_size"] == 128 and gcfg["intermediate_size"] == 96
    assert gcfg["rms_norm_eps"] == pytest.approx(cfg["rms_norm_eps"] * 32 / 128)
    assert grown.lm_head.weight is grown.model.embed_tokens.weight  # still tied
    gu = dict(grown.named_parameters())["model.layers.0.mlp.gate_up_proj.weight"]
    old = dict(model.named_parameters())["model.layers.0.mlp.gate_up_proj.weight"]
    assert torch.equal(gu[:48, :32], old[:48]) and torch.equal(gu[96:144, :32], old[48:])
    assert not gu[48:96].any() and not gu[:, 32:].any()  # new units and columns: zeros


def test_grow_with_noise_moves_the_logits_a_little(small):
    model, cfg = small
    ids = torch.randint(0, 151936, (1, 16), generator=torch.Generator().manual_seed(2))
    want = _logits(model, ids)
    grown, _ = grow(model, cfg, 64, 48, noise_std=1e-3, seed=5)
    diff = float((_logits(grown, ids) - want).abs().max())
    assert 0 < diff < 0.05 * float(want.abs().max())
    again, _ = grow(model, cfg, 64, 48, noise_std=1e-3, seed=5)
    assert all(torch.equal(a, b) for a, b in zip(grown.parameters(), again.parameters(),
                                                 strict=True))  # seeded


def test_grow_refuses_to_shrink_or_an_untied_model(small):
    model, cfg = small
    with pytest.raises(ValueError, match="only grow"):
        grown_config(cfg, 16, 48)
    with pytest.raises(ValueError, match="only grow"):
        grow(model, cfg, 64, 32)
    untied = build_model(small_config(hidden_size=32, intermediate_size=48, **SHAPE), seed=0)
    untied.lm_head.weight = torch.nn.Parameter(untied.lm_head.weight.detach().clone())
    with pytest.raises(ValueError, match="tied"):
        grow(untied, cfg, 64, 48)


@pytest.mark.skipif(not TEXTS_DIR.is_dir() or not (TOKENIZER_DIR / "tokenizer.json").is_file(),
                    reason="shared texts or tokenizer not found (set INFER_SHARED)")
def test_train_then_grow_saves_the_wide_model(tmp_path):
    torch.set_num_threads(1)
    out = tmp_path / "ckpt"
    records = main(["--hidden", "32", "--layers", "2", "--heads", "4", "--kv-heads", "2",
                    "--head-dim", "16", "--intermediate", "48", "--seq", "32", "--batch", "2",
                    "--summary-frac", "0",
                    "--steps", "2", "--ce-chunk", "24", "--device", "cpu", "--no-deterministic",
                    "--eval-every", "0", "--grow-hidden", "64", "--grow-intermediate", "96",
                    "--grow-steps", "2", "--grow-noise", "1e-3", "--out", str(out),
                    "--heldout-tokens", "200", "--induction-passages", "2",
                    "--induction-length", "16", "--copy-samples", "1", "--check-tokens", "24"])
    by = {}
    for r in records:
        by.setdefault(r["what"], []).append(r)
    assert [r.get("phase") for r in by["train"]] == [None, "grown"]
    assert by["train"][1]["steps"] == 2
    g = by["grow"][0]
    assert g["hidden"] == [32, 64] and g["intermediate"] == [48, 96]
    assert 0 < g["max_abs_logit_change"] < 0.05 * g["max_abs_logit"]
    assert "induction_random_before_grow" in by and "induction_random" in by
    assert by["config"][0]["grow_hidden"] == 64
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["hidden_size"] == 64 and cfg["intermediate_size"] == 96
    assert cfg["rms_norm_eps"] == pytest.approx(1e-6 * 32 / 64)
    loaded = load_model(out, dtype=torch.float32)
    assert loaded.model.embed_tokens.weight.shape == (151936, 64)
    assert by["load_check"][0]["argmax_agree"] == 1.0


@pytest.mark.parametrize("extra", [["--grow-hidden", "256"],
                                   ["--grow-hidden", "1024", "--grow-intermediate", "512"],
                                   ["--grow-hidden", "1024", "--grow-lr", "0"],
                                   ["--grow-hidden", "1024", "--grow-noise", "-1"],
                                   ["--grow-hidden", "1024", "--grow-steps", "-1"]])
def test_bad_grow_flags_are_usage_errors(extra, capsys):
    from benchmarks.train_small_qwen3 import parse_args
    with pytest.raises(SystemExit) as e:
        parse_args(extra)
    assert e.value.code == 2 and "--grow" in capsys.readouterr().err
    args = parse_args(["--grow-hidden", "1024"])  # the default MLP width grows along
    assert args.grow_intermediate == 1536
