"""models/random_checkpoint.py's command line (``python -m models.random_checkpoint``, ``main``):
its flags, the seed, the default tokenizer, and its errors (one line on stderr, exit 2 for bad
input and 1 for a failed write, nothing written). The writer itself is
``test_random_checkpoint.py``."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from models.random_checkpoint import main, write_random_checkpoint


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
    assert (f"no tokenizer.json in {tmp_path / 'nowhere'} (the default): set INFER_SHARED to "
            "the shared/ folder, or pass --tokenizer DIR") in err
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
