"""benchmarks/train_small_qwen3.py, its helpers and benchmarks/int8_kl.py, on the CPU, tiny sizes.

A tiny Qwen3 (hidden 64, 2 layers, the real 151936-token vocabulary) is trained for 3 steps on
the training split, saved, and loaded back through ``models.loader.load_model``; the int8_kl
functions run on the saved folder with the reference attention.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import REPO, TEXTS_DIR, TOKENIZER_DIR

sys.path.insert(0, str(REPO))  # the benchmarks are scripts of the repo, not an installed package

from benchmarks import int8_kl  # noqa: E402
from benchmarks.heldout_texts import (  # noqa: E402
    HELD_OUT_FROM,
    held_out_texts,
    split_text,
    text_files,
    token_stream,
    train_texts,
)
from benchmarks.linear_cross_entropy import linear_cross_entropy, token_losses  # noqa: E402
from benchmarks.small_lm import (  # noqa: E402
    build_model,
    forward_batch,
    save_checkpoint,
    small_config,
)
from benchmarks.small_lm_train import (  # noqa: E402
    lr_at,
    repeat_frac_at,
    rows_at,
    sample_batch,
    train,
)
from benchmarks.train_small_qwen3 import deterministic, main, parse_args  # noqa: E402
from models.loader import load_model  # noqa: E402

pytestmark = pytest.mark.skipif(
    not TEXTS_DIR.is_dir() or not (TOKENIZER_DIR / "tokenizer.json").is_file(),
    reason=f"shared texts or tokenizer not found under {TEXTS_DIR.parent} (set INFER_SHARED)")

TINY = ["--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
        "--intermediate", "128", "--seq", "32", "--batch", "2", "--steps", "3", "--ce-chunk",
        "24", "--device", "cpu", "--summary-frac", "0", "--no-deterministic", "--eval-every",
        "0"]
FIRST_LINES = {  # the held-out part of each shared text starts here (heldout_texts docstring)
    "adventures_of_sherlock_holmes.txt": "XII. THE ADVENTURE OF THE COPPER BEECHES",
    "pep-0498-literal-string-interpolation.txt": "Examples from Python's source code",
    "pride_and_prejudice.txt": "CHAPTER LVIII.",
    "war_and_peace.txt": "CHAPTER X",
}


@pytest.fixture(scope="module")
def tok():
    from models.tokenizer import Qwen3Tokenizer

    return Qwen3Tokenizer.from_folder(TOKENIZER_DIR)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tok, one_thread):
    """(args, model after 3 steps, saved folder, held-out ids, train record)."""
    args = parse_args(TINY)
    cfg = small_config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, intermediate_size=128)
    data = torch.tensor(token_stream(train_texts(TEXTS_DIR)[:1], tok), dtype=torch.int64)
    held = token_stream(held_out_texts(TEXTS_DIR)[:1], tok)
    model = build_model(cfg, seed=0)
    init = model.model.layers[0].self_attn.qkv_proj.weight.detach().clone()
    lines = []
    rec = train(model, data, args, held, lines.append)
    assert not torch.equal(init, model.model.layers[0].self_attn.qkv_proj.weight)
    model.eval().requires_grad_(False)
    out = save_checkpoint(model, cfg, tmp_path_factory.mktemp("small") / "ckpt", TOKENIZER_DIR)
    return args, model, out, held, rec


def test_held_out_split_is_disjoint_and_at_headings():
    files = text_files(TEXTS_DIR)
    held, train_parts = held_out_texts(TEXTS_DIR), train_texts(TEXTS_DIR)
    for path, h, t in zip(files, held, train_parts, strict=True):
        text = path.read_text(encoding="utf-8").replace("\r\n", "\n")
        assert t + h == text and split_text(text) == (t, h)
        assert len(h) >= (1 - HELD_OUT_FROM) * len(text) and len(t) > 0.5 * len(text)
        if path.name in FIRST_LINES:
            assert h.split("\n", 1)[0] == FIRST_LINES[path.name]
        # no 200-character passage of the held-out part occurs in the training part
        for start in range(0, len(h) - 200, max(1, len(h) // 40)):
            assert h[start:start + 200] not in t, (path.name, start)


def test_linear_cross_entropy_matches_plain_cross_entropy():
    torch.manual_seed(0)
    h = torch.randn(37, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(500, 16, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 500, (37,))
    loss = linear_cross_entropy(h, w, y, chunk=8)
    (2.0 * loss).backward()
    h2, w2 = h.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    ref = F.cross_entropy(h2 @ w2.T, y)
    (2.0 * ref).backward()
    torch.testing.assert_close(loss, ref.float(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(h.grad, h2.grad)
    torch.testing.assert_close(w.grad, w2.grad)
    per_row = token_losses(h.detach(), w.detach(), y, chunk=5)
    torch.testing.assert_close(per_row, F.cross_entropy(h2 @ w2.T, y, reduction="none").float())


def test_copy_steps_come_first():
    from types import SimpleNamespace

    args = SimpleNamespace(copy_steps=3, repeat_frac=0.25)
    assert [repeat_frac_at(i, args) for i in range(5)] == [1.0, 1.0, 1.0, 0.25, 0.25]
    assert repeat_frac_at(0, SimpleNamespace(copy_steps=0, repeat_frac=0.1)) == 0.1


def test_schedule_and_batches():
    assert lr_at(0.0, 1.0, 0.1) == 0.0 and lr_at(0.1, 1.0, 0.1) == pytest.approx(1.0)
    assert lr_at(1.0, 1.0, 0.1) == pytest.approx(0.1)
    data = torch.arange(1000)
    rows = sample_batch(data, torch.Generator().manual_seed(0), 4, 9, 0.5)
    again = sample_batch(data, torch.Generator().manual_seed(0), 4, 9, 0.5)
    assert rows.shape == (4, 10) and torch.equal(rows, again)
    assert torch.equal(rows[0, :5], rows[0, 5:]) and torch.equal(rows[1, :5], rows[1, 5:])
    assert not torch.equal(rows[0, :5], rows[0, 0] + torch.arange(5))  # not a text window
    assert torch.equal(rows[2], rows[2, 0] + torch.arange(10))  # a plain window
    # longer rows: each copying row repeats with its own period, 16 .. half the row
    rows = sample_batch(data, torch.Generator().manual_seed(1), 64, 199, 0.5)
    periods = set()
    for row in rows[:32]:
        p = next(p for p in range(1, 101) if torch.equal(row[p:], row[:-p]))
        assert 16 <= p <= 100
        periods.add(p)
    assert len(periods) > 8  # not one fixed distance to copy from
    for row in rows[32:]:
        assert torch.equal(row, row[0] + torch.arange(200))


def test_long_rows_after_the_copying_steps(tmp_path, one_thread):
    args = parse_args(TINY + ["--copy-steps", "2", "--long-seq", "64"])
    assert [rows_at(i, args) for i in (0, 1, 2, 5)] == [(2, 32), (2, 32), (1, 64), (1, 64)]
    assert rows_at(5, parse_args(TINY)) == (2, 32)  # no --long-seq: one row shape throughout
    (rec,) = [r for r in main(TINY + ["--copy-steps", "1", "--long-seq", "160", "--summary-frac",
                                      "0.5", "--summary-pool", "2", "--out", str(tmp_path),
                                      "--induction-passages", "1", "--copy-samples", "1",
                                      "--heldout-tokens", "100", "--check-tokens", "8"])
              if r["what"] == "train"]
    assert rec["steps"] == 3 and rec["tokens"] == 2 * 32 + 2 * 160  # 1 short step, 2 long ones
    with pytest.raises(SystemExit):
        parse_args(TINY + ["--long-seq", "16"])  # shorter than --seq



def test_trained_model_loads_with_the_same_logits(trained):
    args, model, out, held, rec = trained
    assert rec["steps"] == 3 and rec["stopped_by"] == "steps" and rec["tokens"] == 3 * 2 * 32
    assert torch.isfinite(torch.tensor(rec["final_loss"]))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "qwen3" and cfg["architectures"] == ["Qwen3ForCausalLM"]
    assert cfg["tie_word_embeddings"] is True and cfg["torch_dtype"] == "bfloat16"
    assert cfg["rope_theta"] == 1000000 and cfg["max_position_embeddings"] == 40960
    assert (out / "tokenizer.json").is_file() and (out / "generation_config.json").is_file()
    from safetensors import safe_open
    with safe_open(out / "model.safetensors", framework="pt") as f:
        names = set(f.keys())
    assert "lm_head.weight" not in names and "model.layers.1.self_attn.q_norm.weight" in names
    assert "model.layers.0.mlp.gate_proj.weight" in names and len(names) == 2 + 2 * 11

    loaded = load_model(out, dtype=torch.float32)
    ids = torch.tensor(held[:40])
    rounded = {n: p.to(torch.bfloat16).float() for n, p in model.state_dict().items()}
    assert all(torch.equal(loaded.state_dict()[n], rounded[n]) for n in rounded)
    with torch.no_grad():
        got = loaded.compute_logits(loaded(ids, torch.arange(40)))
        for p in model.parameters():  # the training model with the stored weights
            p.copy_(p.to(torch.bfloat16).float())
        ref = model.compute_logits(forward_batch(model, ids[None]))  # the SDPA training path
    assert (got - ref).abs().max() < 1e-4 * ref.abs().max()


def test_same_seed_same_weights(one_thread):
    """Two runs with one seed, deterministic kernels on: the same weights, bit for bit."""
    args = parse_args(TINY[:-3] + ["--steps", "2", "--eval-every", "0"])
    cfg = small_config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                       num_key_value_heads=1, head_dim=16, intermediate_size=64)
    data = torch.randint(0, 151000, (4096,), generator=torch.Generator().manual_seed(1))
    weights = []
    for _ in range(2):
        model = build_model(cfg, seed=3)
        with deterministic(True):
            train(model, data, args, data[:100].tolist(), lambda rec: None)
        weights.append(model.state_dict())
        assert not torch.are_deterministic_algorithms_enabled()  # restored
    assert all(torch.equal(weights[0][n], weights[1][n]) for n in weights[0])
    assert not torch.equal(weights[0]["model.norm.weight"], torch.ones(32))  # it trained


def test_main_end_to_end(tmp_path, one_thread):
    report = tmp_path / "report.jsonl"
    records = main(TINY + ["--out", str(tmp_path / "ckpt"), "--report", str(report),
                           "--heldout-tokens", "200", "--induction-passages", "2",
                           "--induction-length", "16", "--copy-samples", "2",
                           "--check-tokens", "24"])
    by = {r["what"]: r for r in records}
    assert [json.loads(line) for line in report.read_text().splitlines()] == records
    assert {"device", "config", "train", "saved", "heldout_loss", "induction",
            "induction_random", "copy", "load_check"} <= set(by)
    assert by["train"]["steps"] == 3 and by["heldout_loss"]["loss"] > 0
    assert by["induction"]["first_loss"] > 0 and by["induction"]["second_loss"] > 0
    assert 0 <= by["copy"]["token_match_frac"] <= 1 and by["copy"]["samples"] == 2
    assert by["load_check"]["max_abs_diff"] < 1e-4 * max(1.0, by["load_check"]["max_abs_logit"])
    assert by["load_check"]["argmax_agree"] == 1.0


def test_int8_kl_on_the_trained_model(trained):
    _, _, out, _, _ = trained
    records = int8_kl.run_kl(out, [64, 112], window=16, chunk=40, device="cpu",
                             page_size=16)
    *records, channels = records
    assert [r["positions"] for r in records] == [64, 112]
    assert channels["what"] == "kv_channels" and channels["positions"] == 112
    assert len(channels["layers"]) == 2 and channels["max_k_outlier"] >= 1.0
    for r in records:
        assert r["what"] == "int8_kl" and r["attention"] == "reference" and r["rows"] == 16
        assert 0 <= r["mean_kl"] <= r["p99_kl"] <= r["max_kl"]
        assert 0 <= r["top1_agree"] <= 1 and r["nll_bf16"] > 0 and r["nll_int8"] > 0
    assert max(r["max_kl"] for r in records) > 0  # INT8 changes something


def test_int8_kl_same_cache_gives_zero(trained):
    _, _, out, held, _ = trained
    model = load_model(out, dtype=torch.float32)
    from models.tokenizer import Qwen3Tokenizer
    tok = Qwen3Tokenizer.from_folder(out)
    runners = [int8_kl.ChunkRunner(int8_kl.make_engine(model, tok, out, "bf16", 64,
                                                        torch.device("cpu"), page_size=16))
               for _ in range(2)]
    (rec,) = int8_kl.compare(model, *runners, held[:65], [64], 24, 16, tok.vocab_limit)
    assert rec["max_kl"] == 0 and rec["top1_agree"] == 1.0 and rec["rows"] == 24
    assert rec["flips"] == 0 and rec["flip_margin_median"] is None and rec["margin_median"] > 0
    assert int8_kl.chunk_bounds(10, 4, [5]) == [(0, 4), (4, 5), (5, 8), (8, 10)]


def test_int8_kl_noise_floor_records(trained):
    """``--noise-floor``'s records: BF16 against BF16 with the test engine's attention named
    (on the CPU both are the reference, so nothing differs), the NLLs kept apart."""
    _, _, out, _, _ = trained
    (rec,) = int8_kl.run_kl(out, [64], window=16, chunk=40, device="cpu", page_size=16,
                            caches=("bf16", "bf16"), test_attention="reference",
                            what="bf16_noise_floor", channels=False)
    assert rec["what"] == "bf16_noise_floor" and (rec["ref"], rec["test"]) == ("bf16", "bf16")
    assert rec["attention"] == rec["test_attention"] == "reference"
    assert rec["max_kl"] == 0 and rec["top1_agree"] == 1.0 and rec["rows"] == 16
    assert rec["nll_ref"] == rec["nll_test"] > 0 and "nll_bf16" not in rec
    records = int8_kl.main(["--model", str(out), "--positions", "64", "--window", "16",
                            "--chunk", "40", "--page-size", "16", "--device", "cpu",
                            "--noise-floor"])
    assert [r["what"] for r in records] == ["device", "int8_kl", "kv_channels",
                                            "bf16_noise_floor"]


@pytest.mark.parametrize("argv,needle", [
    (["--lr", "-1"], "--lr must be > 0"),
    (["--heads", "3"], "a multiple of --kv-heads"),
    (["--kv-heads", "0"], "must be >= 1"),
])
def test_bad_training_arguments_are_one_line_usage_errors(argv, needle, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2 and needle in capsys.readouterr().err


@pytest.mark.parametrize("argv,needle", [
    (["--device", "bogus"], "--device"),
    (["--attention", "triton", "--device", "cpu"], "needs --device cuda"),
    (["--device", "cpu", "--report", "/nonexistent/dir/x.json"], "folder does not exist"),
])
def test_bad_int8_kl_arguments_are_one_line_usage_errors(tmp_path, argv, needle, capsys):
    with pytest.raises(SystemExit) as e:
        int8_kl.main(["--model", str(tmp_path), *argv])
    assert e.value.code == 2 and needle in capsys.readouterr().err
