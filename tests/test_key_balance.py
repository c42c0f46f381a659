"""models/key_balance.py: power-of-two key-channel scales folded into q_norm/k_norm. Exact for
attention over unquantized keys (bit for bit), and smaller INT8 errors when a key channel is an
outlier."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import int8_kl  # noqa: E402
from models.key_balance import (  # noqa: E402
    balance_keys,
    default_mode,
    key_magnitudes,
    power_of_two_scales,  # noqa: E402
)
from models.loader import load_model  # noqa: E402

OUTLIER = 5  # a channel in the first half of head_dim: its RoPE partner is OUTLIER + D/2


def _plant_outliers(model, factor: float = 24.0) -> None:
    """Give every layer's k_norm weights a spread and one outlier RoPE pair (as trained Qwen3
    checkpoints have), and q_norm weights a spread too."""
    g = torch.Generator().manual_seed(3)
    for layer in model.model.layers:
        a = layer.self_attn
        d = a.head_dim
        a.k_norm.weight.copy_(0.5 + torch.rand(d, generator=g))
        a.k_norm.weight[OUTLIER] *= factor
        a.q_norm.weight.copy_(0.5 + torch.rand(d, generator=g))


@pytest.fixture(scope="module")
def planted(tiny_ckpt_factory):
    model = load_model(tiny_ckpt_factory(), device="cpu", dtype=torch.float32)
    with torch.no_grad():
        _plant_outliers(model)
    return model


def test_scales_are_powers_of_two_shared_by_rope_pairs(planted):
    m = copy.deepcopy(planted)
    d = m.config.head_dim
    for mode in ("norm", "proj"):
        mags = key_magnitudes(m.model.layers[0], mode)
        assert mags.shape == (d,) and torch.equal(mags[:d // 2], mags[d // 2:])
        s = power_of_two_scales(mags)
        assert torch.equal(s, torch.exp2(torch.log2(s).round()))  # powers of two
        assert torch.equal(s[:d // 2], s[d // 2:])
        assert abs(float(torch.log2(s).mean())) <= 0.5  # centred: geometric mean ~1
        # the planted pair gets the largest scale, about the factor above the typical pair
        assert int(s.argmax()) in (OUTLIER, OUTLIER + d // 2)
        assert 8 <= float(s.max() / s.median()) <= 64
    ks = [a.self_attn.k_norm.weight.clone() for a in m.model.layers]
    scales = balance_keys(m, "norm")
    for layer, k0, s in zip(m.model.layers, ks, scales, strict=True):
        assert torch.equal(layer.self_attn.k_norm.weight, k0 / s)
    assert all(torch.equal(s, torch.ones(d)) for s in balance_keys(copy.deepcopy(planted), "off"))
    assert float(power_of_two_scales(torch.ones(8)).max()) == 1.0  # flat keys: nothing to move


@pytest.mark.parametrize("mode", ["norm", "proj"])
def test_unquantized_attention_is_bit_identical(planted, mode):
    ids = torch.randint(0, planted.config.vocab_size, (37,), generator=torch.Generator()
                        .manual_seed(1))
    pos = torch.arange(37)
    with torch.inference_mode():
        before = planted.compute_logits(planted.forward(ids, pos, None, None))
    m = copy.deepcopy(planted)
    scales = balance_keys(m, mode)
    assert max(float(s.max()) for s in scales) >= 8  # the fold did move something
    with torch.inference_mode():
        after = m.compute_logits(m.forward(ids, pos, None, None))
    assert torch.equal(before, after)


def test_balanced_keys_lower_the_int8_cache_error(tmp_path, tiny_ckpt_factory, tokenizer_dir,
                                                  texts_dir):
    from safetensors.torch import load_file, save_file

    src = tiny_ckpt_factory(tokenizer=str(tokenizer_dir))
    dst = tmp_path / "ckpt"
    import shutil
    shutil.copytree(src, dst)
    path = dst / "model.safetensors"
    w = load_file(path)
    g = torch.Generator().manual_seed(4)
    for name in [n for n in w if n.endswith("k_norm.weight")]:
        w[name] = 0.5 + torch.rand(w[name].shape, generator=g)
        w[name][OUTLIER] *= 48
    save_file(w, path, metadata={"format": "pt"})
    recs = int8_kl.run_kl(dst, [96], window=32, chunk=48, device="cpu", page_size=16,
                          texts=texts_dir, balance=("off", "norm", "proj"))
    by = {r["balance"]: r for r in recs if r["what"] == "int8_kl"}
    assert set(by) == {"off", "norm", "proj"} and by["off"]["max_key_scale"] == 1.0
    assert by["norm"]["max_key_scale"] >= 16 and by["proj"]["max_key_scale"] >= 16
    assert by["off"]["mean_kl"] > 0 and 0 < by["off"]["margin_median"] <= 1
    assert by["norm"]["mean_kl"] < 0.5 * by["off"]["mean_kl"]
    assert by["proj"]["mean_kl"] < 0.5 * by["off"]["mean_kl"]
    assert recs[-1]["what"] == "kv_channels" and recs[-1]["balance"] == "proj"
    with pytest.raises(ValueError, match="--balance"):
        int8_kl.run_kl(dst, [96], window=32, device="cpu", texts=texts_dir, balance=("x",))


def test_bad_modes_and_the_environment_override(monkeypatch, planted):
    with pytest.raises(ValueError, match="mode must be one of"):
        balance_keys(copy.deepcopy(planted), "max")
    monkeypatch.delenv("INFER_KEY_BALANCE", raising=False)
    assert default_mode() == "proj"
    monkeypatch.setenv("INFER_KEY_BALANCE", "off")
    assert default_mode() == "off"
    monkeypatch.setenv("INFER_KEY_BALANCE", "bogus")
    with pytest.raises(ValueError, match="INFER_KEY_BALANCE"):
        default_mode()


@pytest.mark.gpu
def test_gpu_bf16_cache_tokens_and_logits_unchanged(gpu_qwen3_4l):
    """The Triton path (fused q/k-norm + RoPE + store, paged prefill and decode, graphs) on a
    BF16 cache: greedy tokens and prefill logits identical before and after the fold."""
    from mock_engine import GREEDY, random_ids
    from test_graphs_gpu import gpu_engine

    model = copy.deepcopy(gpu_qwen3_4l)
    with torch.no_grad():
        _plant_outliers(model)
    p = random_ids(300)
    ids = torch.tensor(p, device="cuda")
    pos = torch.arange(len(p), device="cuda")

    def run():
        eng = gpu_engine(model, "bf16", True, ctx=1024)
        with torch.inference_mode():
            logits = model.compute_logits(model.forward(ids, pos, None, None)[-16:])
        return list(eng.new_session().generate(p, GREEDY.replace(max_new_tokens=96))), logits

    tokens, logits = run()
    assert max(float(s.max()) for s in balance_keys(model, "proj")) >= 8
    tokens2, logits2 = run()
    assert tokens2 == tokens and torch.equal(logits2, logits)
