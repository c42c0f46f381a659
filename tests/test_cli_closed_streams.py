"""The `infer` command line started with a standard stream closed (Python then sets ``sys.stderr``
or ``sys.stdin`` to None): a closed stderr (``2>&-``) drops the side channel's text and the reply
still comes on stdout with exit 0; a closed stdin (``<&-``) where input is read is one error line
and exit 2, in ``chat`` before the model is loaded. A tiny random checkpoint on the CPU; in-process
through ``cli.main`` and, where Python itself must see the stream closed, in a real process. A
stdout closed from the start is in ``test_cli_streams.py``; a stdout whose reader is gone before
``--help`` or ``--version`` is here."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import FAST, TEXT, reply_command_params

pytestmark = pytest.mark.usefixtures("cli_tokenizer_once")

ROOT = Path(__file__).parents[1]


def run_closed(redirect: str, *args: str, input: str | None = None):
    """``infer ARGS`` in a real process, its shell redirection ``redirect`` (``2>&-``, ``<&-``)."""
    return subprocess.run(
        ["sh", "-c", f'exec "$@" {redirect}', "sh", sys.executable, "-c",
         "from cli import main; main()", *args],
        input=input, capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.mark.parametrize("argv,stdin", reply_command_params(
    (["generate", "/nonexistent-model", "hi", *FAST, "--json"], None, "bad-model-json")))
def test_closed_stderr_still_delivers_stdout(argv, stdin, tiny_ckpt, tmp_path, monkeypatch,
                                             capsys):
    """`infer ... 2>&-`: it was exit 1 and an empty stdout (with --json the object
    ``AttributeError: 'NoneType' object has no attribute 'write'``)."""
    from cli import main

    (tmp_path / "t.txt").write_text(TEXT)
    argv = [a.replace("{ckpt}", str(tiny_ckpt)).replace("{file}", str(tmp_path / "t.txt"))
            for a in argv]
    monkeypatch.setattr(sys, "stderr", None)
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    with pytest.raises(SystemExit) as info:
        main(argv)
    monkeypatch.undo()
    out = capsys.readouterr().out
    bad_model = "/nonexistent-model" in argv
    assert info.value.code == (2 if bad_model else 0), out
    assert "Error" not in out and "NoneType" not in out, out
    if bad_model:
        assert json.loads(out) == {"error": "model folder /nonexistent-model does not exist",
                                   "exit_code": 2}
    elif "--json" in argv:
        objs = [json.loads(line) for line in out.splitlines()]
        assert len(objs) == (2 if argv[0] == "chat" else 1)
        assert all("error" not in o and o["new_tokens"] >= 1 for o in objs), objs
    else:
        assert out.strip()


def test_closed_stderr_in_a_real_process(tiny_ckpt):
    """`infer generate M hi --json 2>&-`: Python starts with no stderr at all."""
    proc = run_closed("2>&-", "generate", str(tiny_ckpt), "hi", *FAST, "--json")
    assert proc.returncode == 0, proc.stdout
    obj = json.loads(proc.stdout)
    assert obj["command"] == "generate" and obj["new_tokens"] >= 1 and "error" not in obj


@pytest.mark.parametrize("argv,needle", [
    (["generate", "/nonexistent-model", "-"], "(- reads the prompt from it)"),
    (["summarize", "-", "--model", "/nonexistent-model"], "(- reads the text from it)"),
    # the model is not even looked at: chat says so before loading it
    (["chat", "/nonexistent-model"], "(chat reads the messages from it)"),
], ids=["generate", "summarize", "chat"])
def test_closed_stdin_is_one_error_line_exit_2(argv, needle):
    """`infer ... <&-`: it was ``error: AttributeError: 'NoneType' object has no attribute
    'buffer'`` (chat: ``'isatty'``, after loading the model), exit 1."""
    for json_flag in ([], ["--json"]):
        proc = run_closed("<&-", *argv, *json_flag)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: standard input is closed "), lines
        assert needle in lines[0]
        if json_flag:
            obj = json.loads(proc.stdout)
            assert obj["exit_code"] == 2 and obj["error"].startswith("standard input is closed")
        else:
            assert proc.stdout == ""


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["generate", "--help"]],
                         ids=["help", "version", "command-help"])
def test_help_and_version_to_a_gone_reader_exit_0_quietly(args):
    """`infer --help | true`: the reader is gone before the help is written; it was exit 1 (rich's
    help console, and typer for --version, exit 1 on a broken pipe). A command's reply to a gone
    reader exits 0 quietly (``test_cli_streams.py``): so do these."""
    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run([sys.executable, "-c", "from cli import main; main()", *args],
                              stdout=w, stderr=subprocess.PIPE, text=True, timeout=60, cwd=ROOT)
    finally:
        os.close(w)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
