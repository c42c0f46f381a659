"""The `infer` command line at its input and output edges: a closed or full stdout, stderr that
cannot be written, stdin from a terminal, Ctrl-C during prefill, the prefill bar; through typer's
test runner (and real processes where a pipe must be real) on a tiny random checkpoint. Help,
version and the start-up imports are in ``test_cli_startup.py`` (which modules they import in
``test_cli_imports.py``), Ctrl-C before the reply in ``test_cli_interrupt.py``."""

from __future__ import annotations

import json
import re

import pytest
from cli_helpers import FAST, TEXT, invoke, reply_command_params

pytestmark = pytest.mark.usefixtures("cli_tokenizer_once")


def test_closed_stdout_exits_0_quietly(tiny_ckpt, monkeypatch):
    def closed(self, piece):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("infer.ui.render.ReplyView._add", closed)
    result = invoke("generate", tiny_ckpt, "hi", *FAST)
    assert result.exit_code == 0, result.output
    assert "error" not in result.stderr and "Broken" not in result.stderr


def test_closed_stdout_pipe_in_a_real_process(tiny_ckpt):
    """`infer generate ... | head -c 0`: stdout is a pipe whose reader is gone."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", "from cli import main; main()", "generate", str(tiny_ckpt),
             "hi", *FAST], stdout=w, stderr=subprocess.PIPE, text=True, timeout=120,
            cwd=Path(__file__).parents[1])
    finally:
        os.close(w)
    assert proc.returncode == 0, proc.stderr
    assert "Error" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr


def test_closed_stderr_pipe_keeps_the_json_on_stdout(tiny_ckpt):
    """`infer generate ... --json 2>&1 >out.json | head -c 3`: stderr's reader is gone, stdout is
    still read: the reply's object is written and the command exits 0."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", "from cli import main; main()", "generate", str(tiny_ckpt),
             "hi", *FAST, "--json"], stdout=subprocess.PIPE, stderr=w, text=True, timeout=120,
            cwd=Path(__file__).parents[1])
    finally:
        os.close(w)
    assert proc.returncode == 0
    obj = json.loads(proc.stdout)
    assert obj["command"] == "generate" and obj["new_tokens"] >= 1


def test_stdout_closed_from_the_start_is_an_error_in_a_real_process(tiny_ckpt):
    """`infer generate ... >&-`: no stdout at all (sys.stdout is None), so the reply would be
    lost: one error line and exit 1, as `> /dev/full` gives, not a silent exit 0."""
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.run(
        ["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-c", "from cli import main; main()",
         "generate", str(tiny_ckpt), "hi", *FAST], stderr=subprocess.PIPE, text=True,
        timeout=120, cwd=Path(__file__).parents[1])
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip() == "error: cannot write output: standard output is closed"


def test_bad_input_keeps_exit_2_when_stderr_cannot_be_written():
    """`infer generate M hi --ctx abc 2>/dev/full`: the error line cannot be written, so the exit
    code alone tells, and it is still the bad-input code."""
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.run(
        ["sh", "-c", 'exec "$@" 2>/dev/full', "sh", sys.executable, "-c",
         "from cli import main; main()", "generate", "/nonexistent-model", "hi", "--ctx", "abc"],
        stdout=subprocess.PIPE, timeout=120, cwd=Path(__file__).parents[1])
    assert proc.returncode == 2 and proc.stdout == b""


@pytest.mark.parametrize("json_flag", [False, True])
def test_a_full_stderr_still_gives_the_reply_on_stdout(tiny_ckpt, json_flag):
    """`infer generate M hi [--json] 2>/dev/full`: stderr is the side channel (notes, the stats
    line, the streamed reply under --json); its failed writes are dropped, so the reply (or the
    --json object) still comes on stdout with exit 0, not an OSError's error object."""
    import subprocess
    import sys
    from pathlib import Path

    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full (Linux)")
    proc = subprocess.run(
        ["sh", "-c", 'exec "$@" 2>/dev/full', "sh", sys.executable, "-c",
         "from cli import main; main()", "generate", str(tiny_ckpt), "hi", "--max-new-tokens",
         "4", "--seed", "0", *(["--json"] if json_flag else [])],
        stdout=subprocess.PIPE, timeout=300, cwd=Path(__file__).parents[1])
    assert proc.returncode == 0
    out = proc.stdout.decode()
    if json_flag:
        obj = json.loads(out)
        assert obj["command"] == "generate" and obj["new_tokens"] == 4 and "error" not in obj
    else:
        assert out.strip()


def test_stdin_from_a_terminal_says_how_to_end_it(tiny_ckpt, monkeypatch):
    monkeypatch.setattr("infer.ui.prepare.stdin_is_terminal", lambda: True)
    result = invoke("summarize", "-", "--model", tiny_ckpt, *FAST, input="Some text.\n")
    assert result.exit_code == 0, result.output
    assert "end it with Ctrl-D" in result.stderr
    monkeypatch.setattr("infer.ui.prepare.stdin_is_terminal", lambda: False)  # piped
    piped = invoke("summarize", "-", "--model", tiny_ckpt, *FAST, input="Some text.\n")
    assert "Ctrl-D" not in piped.stderr


def test_ctrl_c_during_prefill_says_so(tiny_ckpt, monkeypatch):
    def interrupt(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("infer.engine.Session._forward", interrupt)
    result = invoke("generate", tiny_ckpt, "hi", *FAST)
    assert result.exit_code == 130
    stats = result.stderr.strip().splitlines()[-1]
    assert "interrupted during prefill" in stats and "first token" not in stats


@pytest.mark.parametrize("command", ["generate", "chat"])
def test_ctrl_c_before_the_prefill_is_a_reply_with_no_token(command, tiny_ckpt, monkeypatch):
    """Ctrl-C as a reply begins, before its prefill set the session's stats: the reply had
    the stats of none (generate: an AttributeError, exit 1) or of the chat's previous reply
    (its stats line and object, stop: length); now its own, interrupted with no token stored."""
    from infer.engine import Engine

    real, calls = Engine.run_batch, []

    def run_batch(self, *args, **kwargs):
        calls.append(1)
        if command == "generate" or len(calls) == 2:  # chat: the second reply
            raise KeyboardInterrupt
        yield from real(self, *args, **kwargs)

    monkeypatch.setattr(Engine, "run_batch", run_batch)
    args = [command, tiny_ckpt, *(["hi"] if command == "generate" else []), *FAST, "--json"]
    result = invoke(*args, input="hi\nand again\n")
    assert result.exit_code == (130 if command == "generate" else 0), result.output
    cut = json.loads(result.stdout.splitlines()[-1])
    assert cut["interrupted"] and cut["stop_reason"] == "interrupted", cut
    assert (cut["new_tokens"], cut["prefill_tokens"], cut["reused_tokens"]) == (0, 0, 0)
    if command == "chat":
        first = json.loads(result.stdout.splitlines()[0])
        assert cut["prompt_tokens"] > first["prompt_tokens"] + first["new_tokens"]
    calls.clear()
    result = invoke(*args[:-1], input="hi\nand again\n")  # the stats line says so
    assert "Traceback" not in result.output and "error" not in result.stderr, result.output
    stats = [ln for ln in result.stderr.splitlines() if " · " in ln][-1]  # (chat: after "> ")
    assert re.search(r"(^|> )prompt \d+ tokens( \(0 reused\))? · interrupted during prefill "
                     r"\(0 stored\)$", stats), stats


def interrupt_third_chunk(monkeypatch) -> list[int]:
    """Ctrl-C as the third model step begins (the first reply's third prefill chunk)."""
    from infer.engine import Session

    real, calls = Session._forward, []

    def forward(self, ids, *args, **kwargs):
        calls.append(len(ids))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, ids, *args, **kwargs)

    monkeypatch.setattr(Session, "_forward", forward)
    return calls


def plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


LONG = ["--ctx", "8k", "--prefill-chunk", "512"]


def test_long_prefill_shows_a_bar_on_a_terminal_and_ctrl_c_exits_130(tiny_ckpt, monkeypatch):
    interrupt_third_chunk(monkeypatch)
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich takes stderr (and stdout) as terminals
    result = invoke("generate", tiny_ckpt, "word " * 5000, *FAST, *LONG)
    assert result.exit_code == 130, result.output
    err = plain(result.stderr)
    assert "prefill" in err and "1,024 of 5,0" in err and "Ctrl-C stops" in err
    assert "interrupted during prefill" in err.strip().splitlines()[-1]
    assert "Traceback" not in result.output


def test_no_prefill_bar_when_stderr_is_not_a_terminal(tiny_ckpt, monkeypatch):
    calls = interrupt_third_chunk(monkeypatch)
    result = invoke("generate", tiny_ckpt, "word " * 5000, *FAST, *LONG)
    assert result.exit_code == 130 and len(calls) == 3, result.output
    assert " of 5," not in result.stderr and "Ctrl-C stops" not in result.stderr


def test_json_prefill_tokens_of_an_interrupted_prefill_are_those_prefilled(tiny_ckpt,
                                                                          monkeypatch):
    interrupt_third_chunk(monkeypatch)
    result = invoke("generate", tiny_ckpt, "word " * 5000, *FAST, *LONG, "--json")
    assert result.exit_code == 130, result.output
    obj = json.loads(result.stdout)
    assert obj["interrupted"] is True and obj["prompt_tokens"] > 5000
    assert obj["prefill_tokens"] == 2 * 512  # the two chunks before the Ctrl-C


def test_chat_ctrl_c_in_a_long_prefill_keeps_the_session(tiny_ckpt, monkeypatch):
    interrupt_third_chunk(monkeypatch)
    monkeypatch.setenv("FORCE_COLOR", "1")
    result = invoke("chat", tiny_ckpt, *FAST, *LONG, "--no-think", "--json",
                    input="word " * 5000 + "\nhello\n")
    assert result.exit_code == 0, result.output
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert first["interrupted"] and first["new_tokens"] == 0
    assert "1,024 of 5,0" in plain(result.stderr)
    # the two chunks prefilled before the Ctrl-C stayed cached and are reused
    assert second["reused_tokens"] == 1024 and second["new_tokens"] >= 1


@pytest.mark.parametrize("argv,stdin", reply_command_params(
    (["generate", "--help"], None, "help")))
def test_output_to_a_full_device_is_one_line_exit_1(argv, stdin, tiny_ckpt, tmp_path,
                                                    monkeypatch, capsys):
    """`infer ... > /dev/full`: every write to stdout fails with ENOSPC (at the flush)."""
    import io
    import os
    import sys

    from cli import main

    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full (Linux)")
    (tmp_path / "t.txt").write_text(TEXT)
    argv = [a.replace("{ckpt}", str(tiny_ckpt)).replace("{file}", str(tmp_path / "t.txt"))
            for a in argv]
    full = open("/dev/full", "w")  # noqa: SIM115 - closed below, after main
    monkeypatch.setattr(sys, "stdout", full)
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    try:
        with pytest.raises(SystemExit) as info:
            main(argv)
    finally:
        monkeypatch.undo()
        try:
            full.close()
        except OSError:  # what the command left in the buffer cannot be flushed either
            pass
    err = capsys.readouterr().err
    assert info.value.code == 1, err
    assert "Traceback" not in err and "Exception" not in err, err
    # one error (in a chat it follows the "> " prompt on stderr), the first reply's: a chat ends
    assert err.count("error:") == 1, err
    assert "error: cannot write output: No space left on device\n" in err, err
    assert err.count("> ") <= 1, err
