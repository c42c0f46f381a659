"""models/random_checkpoint.py: the random-weight writer (shapes, seeds, the tokenizer copy,
its command line and its errors)."""

from __future__ import annotations

import json

import pytest
import torch
from ckpt_helpers import SMALL, copy_ckpt
from conftest import CONFIGS_DIR
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from models.loader import load_model
from models.random_checkpoint import base_config, main, tensor_specs, write_random_checkpoint

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


def test_random_checkpoint_cli_and_seed(tmp_path):
    main(["--size", "tiny", "--out", str(tmp_path / "a"), "--vocab-size", "256", "--seed", "5",
          "--dtype", "float16", "--no-tie", "--layers", "1", "--device", "cpu"])
    main(["--size", "tiny", "--out", str(tmp_path / "b"), "--vocab-size", "256", "--seed", "5",
          "--dtype", "float16", "--no-tie", "--layers", "1", "--device", "cpu"])
    write_random_checkpoint(tmp_path / "c", "tiny", vocab_size=256, seed=6, dtype="float16",
                            tie=False, num_hidden_layers=1, device="cpu")
    a, b, c = (load_file(tmp_path / x / "model.safetensors") for x in "abc")
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 1 and cfg["torch_dtype"] == "float16"
    assert not cfg["tie_word_embeddings"] and "lm_head.weight" in a
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["lm_head.weight"], c["lm_head.weight"])
    assert a["lm_head.weight"].dtype == torch.float16


def test_random_checkpoint_bad_tokenizer_is_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "ckpt"
    with pytest.raises(SystemExit) as e:
        main(["--out", str(out), "--tokenizer", str(tmp_path / "nowhere"), "--device", "cpu"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(f"no tokenizer.json in {tmp_path / 'nowhere'}: pass the folder "
                            "holding the tokenizer files")
    assert not out.exists()


@pytest.mark.parametrize("flag", [["--layers", "0"], ["--shards", "0"], ["--vocab-size", "-1"],
                                  ["--vocab-size", "0"]])
def test_random_checkpoint_counts_below_one_are_refused(tmp_path, capsys, tokenizer_dir, flag):
    """The error alone: a --vocab-size below 1 was also noted as smaller than the tokenizer's,
    on the line before it."""
    out = tmp_path / "ckpt"
    with pytest.raises(SystemExit) as e:
        main(["--out", str(out), "--tokenizer", str(tokenizer_dir), "--device", "cpu", *flag])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(f"{flag[0]} must be at least 1, got {flag[1]}"), err
    assert not out.exists()


@pytest.mark.parametrize("where,needle", [
    ("file", "exists and is not a folder"), ("file/sub", "cannot create the folder"),
    ("/proc/x4", "cannot create the folder /proc/x4")])
def test_random_checkpoint_bad_out_is_one_line_exit_2(tmp_path, capsys, tokenizer_dir, where,
                                                       needle):
    import os

    if where.startswith("/proc") and not os.path.isdir("/proc/self"):
        pytest.skip("needs /proc (Linux)")
    (tmp_path / "file").write_text("not a folder\n")
    out = where if where.startswith("/") else str(tmp_path / where)
    with pytest.raises(SystemExit) as e:
        main(["--out", out, "--tokenizer", str(tokenizer_dir), "--device", "cpu"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert needle in err.strip().splitlines()[-1] and "Traceback" not in err
    assert (tmp_path / "file").read_text() == "not a folder\n"


def test_random_checkpoint_write_failure_is_one_line_exit_1(tmp_path, capsys, tokenizer_dir,
                                                            monkeypatch):
    import errno
    import os

    import models.random_checkpoint as rc

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(rc, "write_checkpoint_files", full)
    with pytest.raises(SystemExit) as e:
        main(["--out", str(tmp_path / "ckpt"), "--tokenizer", str(tokenizer_dir), "--vocab-size",
              "256", "--layers", "1", "--device", "cpu"])
    assert e.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if ": note: " not in line]  # the small-vocab note
    assert len(errors) == 1 and errors[0].endswith("No space left on device"), err


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


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_non_finite_weight_is_named(tiny_ckpt_factory, tmp_path, bad):
    """A float16 checkpoint whose model.norm.weight holds inf used to print '!!!!' (exit 0)."""
    folder = copy_ckpt(tiny_ckpt_factory(**SMALL, tie=False, dtype="float16", shards=2), tmp_path)
    name = "model.norm.weight"
    shard = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"][name]
    tensors = load_file(folder / shard)
    tensors[name][3] = bad
    save_file(tensors, folder / shard)
    for run in (torch.float16, torch.float32):
        with pytest.raises(ValueError, match=rf"^tensor model\.norm\.weight in {shard} holds "
                                             r"non-finite values \(inf or NaN\): the checkpoint "
                                             "is corrupt"):
            load_model(folder, dtype=run)


def test_fused_part_out_of_float16_range_is_named(tiny_ckpt_factory, tmp_path):
    folder = copy_ckpt(tiny_ckpt_factory(**SMALL, tie=False, dtype="float32"), tmp_path)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.layers.1.self_attn.v_proj.weight"][0, 0] = 1e6
    save_file(tensors, folder / "model.safetensors")
    load_model(folder, dtype=torch.float32)  # finite in its own dtype
    load_model(folder, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"tensor model\.layers\.1\.self_attn\.v_proj\.weight in "
                                         r"model\.safetensors has values beyond the range of "
                                         r"float16 \(largest 65504\).*bfloat16 or float32"):
        load_model(folder, dtype=torch.float16)


def test_random_checkpoint_cli_writes_a_folder_infer_accepts(tmp_path, tokenizer_dir,
                                                             monkeypatch, capsys):
    """Without --tokenizer the CLI copies the shared tokenizer (the folder used to be rejected
    by infer with a hint to run the same command), or says which flag to pass."""
    import models.random_checkpoint as rc
    from models.hub import resolve_model

    out = tmp_path / "ckpt"
    monkeypatch.setattr(rc, "DEFAULT_TOKENIZER_DIR", tokenizer_dir)
    main(["--out", str(out), "--vocab-size", "256", "--layers", "1", "--device", "cpu"])
    assert (out / "tokenizer.json").read_bytes() == (tokenizer_dir / "tokenizer.json").read_bytes()
    assert resolve_model(out) == out.resolve()
    monkeypatch.setattr(rc, "DEFAULT_TOKENIZER_DIR", tmp_path / "nowhere")
    with pytest.raises(SystemExit) as e:
        main(["--out", str(tmp_path / "other"), "--device", "cpu"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"no tokenizer.json in {tmp_path / 'nowhere'} (the default): pass --tokenizer DIR" in err
    assert not (tmp_path / "other").exists()


@pytest.mark.parametrize("out", ["", "  "])
def test_random_checkpoint_empty_out_is_refused(tmp_path, capsys, monkeypatch, out):
    """``--out ''`` would be the current folder (a repository's root, in the README's
    command): refused, nothing written."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["--out", out, "--device", "cpu"])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "--out is empty: give the folder to write the checkpoint to")
    assert list(tmp_path.iterdir()) == []


def test_random_checkpoint_cli_refuses_to_overwrite_weights_it_did_not_write(
        tmp_path, tokenizer_dir, capsys):
    """A folder with someone's safetensors (no marker file) is refused without --force, and left
    as it was; a folder this tool wrote is rewritten without a word, and --force overwrites."""
    from models.random_checkpoint import MARKER, foreign_checkpoint

    args = ["--vocab-size", "256", "--layers", "1", "--device", "cpu",
            "--tokenizer", str(tokenizer_dir)]
    real = tmp_path / "real"
    real.mkdir()
    (real / "model.safetensors").write_bytes(b"someone's weights")
    assert foreign_checkpoint(real) and not foreign_checkpoint(tmp_path / "missing")
    with pytest.raises(SystemExit) as e:
        main(["--out", str(real), *args])
    assert e.value.code == 2
    assert "--force to overwrite it" in capsys.readouterr().err.strip().splitlines()[-1]
    assert (real / "model.safetensors").read_bytes() == b"someone's weights"
    assert sorted(p.name for p in real.iterdir()) == ["model.safetensors"]  # nothing written
    ours = tmp_path / "ours"
    main(["--out", str(ours), *args])
    assert (ours / MARKER).is_file() and not foreign_checkpoint(ours)
    main(["--out", str(ours), *args, "--seed", "1"])  # ours: rewritten
    main(["--out", str(real), *args, "--force"])
    assert (real / MARKER).is_file() and (real / "model.safetensors").stat().st_size > 100


def test_random_checkpoint_cli_expands_the_home_folder(tmp_path, tokenizer_dir, monkeypatch):
    """``--out ~/x`` (quoted, so no shell expanded it) is ``$HOME/x``, not a folder named ``~``
    in the current one; ``--tokenizer`` expands as well."""
    import shutil

    home, cwd = tmp_path / "home", tmp_path / "cwd"
    cwd.mkdir()
    shutil.copytree(tokenizer_dir, home / "tok")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    main(["--out", "~/ckpt", "--tokenizer", "~/tok", "--vocab-size", "256", "--layers", "1",
          "--device", "cpu"])
    assert (home / "ckpt" / "model.safetensors").is_file()
    assert (home / "ckpt" / "tokenizer.json").is_file()
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("argv,needle", [
    (["--out", "~no-such-user-infer/ckpt"], "--out ~no-such-user-infer/ckpt: ~no-such-user-infer "
     "is no home folder on this system: give the full path (./~no-such-user-infer/ckpt for a "
     "folder of that name here)"),
    (["--out", "x", "--tokenizer", "~no-such-user-infer/tok"],
     "no tokenizer.json in ~no-such-user-infer/tok"),
    (["--out", "x", "--size", "huge"], "argument --size: invalid choice: 'huge'"),
    (["--size", "tiny"], "the following arguments are required: --out"),
    (["--out", "x", "--shards", "two"], "argument --shards: invalid int value: 'two'"),
    (["--out", "x", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["--out", "x", "--size", "8b", "--config-dir", "nowhere", "--vocab-size", "8"],
     "no config for size 8b at nowhere/Qwen3-8B/config.json: give --config-dir a folder holding "
     "Qwen3-8B/config.json"),
], ids=["out-no-such-user", "tokenizer-no-such-user", "size", "no-out", "shards", "flag",
        "config-dir"])
def test_random_checkpoint_bad_input_is_one_line_exit_2(tmp_path, capsys, monkeypatch,
                                                        tokenizer_dir, argv, needle):
    """Bad input is one line on stderr (argparse printed its usage block above it), exit 2, and
    nothing is written: a ``~user`` of no such user is not a folder of that name here."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main([*argv, "--device", "cpu"] + ([] if "--tokenizer" in argv
                                           else ["--tokenizer", str(tokenizer_dir)]))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and needle in err, err
    assert "config_dir" not in err  # the option's name, not the Python argument's
    assert list(tmp_path.iterdir()) == []
