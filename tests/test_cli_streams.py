"""The `infer` command line at its input and output edges: a closed or full stdout, stderr that
cannot be written, stdin from a terminal, Ctrl-C during prefill and during the start-up imports,
the prefill bar, help and version, and which modules the early paths import; through typer's
test runner (and real processes where a pipe must be real) on a tiny random checkpoint."""

from __future__ import annotations

import json
import re

import pytest
from cli_helpers import FAST, TEXT, invoke

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


def test_help_names_the_arguments():
    for command, names in (("generate", "MODEL PROMPT"), ("summarize", "FILE"),
                           ("chat", "MODEL")):
        result = invoke(command, "--help")
        usage = next(line for line in result.stdout.splitlines() if "Usage:" in line)
        assert f"[OPTIONS] {names}" in usage and "{" not in usage, usage
    assert "UTF-32" in invoke("summarize", "--help").stdout


def test_help_panels_in_one_order_and_flags_without_a_type():
    orders = {}
    for command in ("", "generate", "summarize", "chat", "bench"):
        result = invoke(*filter(None, [command, "--help"]))
        assert result.exit_code == 0, result.output
        assert "<bool>" not in result.stdout, command
        orders[command] = [p for p in re.findall(r"─ (\w+) ─", result.stdout)
                           if p in ("Engine", "Sampling", "Output")]
    assert orders["bench"] == ["Engine", "Output"]
    for command in ("generate", "summarize", "chat"):
        assert orders[command] == ["Engine", "Sampling", "Output"], command
    assert "--no-think" in invoke("generate", "--help").stdout  # the flag pairs are still shown


def test_version(capsys):
    from importlib.metadata import version

    from cli import main

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"infer {version('infer')}\n"


# ---------------------------------------------------------------------------- start-up and stdout

# The `infer` console script as pip writes it for `infer = "cli:main"`, run as from a terminal
# (Python's own SIGINT handler), after a finder that sends the process a SIGINT when one module
# is about to be imported: a Ctrl-C at that point of the start-up.
CTRL_C_AT_IMPORT = """
import os
import signal
import sys

class CtrlC:
    def __init__(self, module):
        self.module = module

    def find_spec(self, name, path=None, target=None):
        if name == self.module:
            os.kill(os.getpid(), signal.SIGINT)

signal.signal(signal.SIGINT, signal.default_int_handler)
sys.meta_path.insert(0, CtrlC(sys.argv.pop(1)))
from cli import main
sys.exit(main())
"""


@pytest.mark.parametrize("module", ["typer", "torch", "tokenizers", "triton"])
def test_ctrl_c_during_the_start_up_imports_exits_130_quietly(module, tiny_ckpt):
    """Ctrl-C in the imports: typer's before `main` runs, torch, tokenizers and triton's (~2 s)
    in the command, which imports them as it needs them: exit 130, one line."""
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.run([sys.executable, "-c", CTRL_C_AT_IMPORT, module, "generate",
                           str(tiny_ckpt), "P", *FAST], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).parents[1])
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", "interrupted\n"), proc.stderr


def test_ctrl_c_in_an_extension_module_import_exits_130(monkeypatch, capsys):
    """A Ctrl-C inside a pybind11 module's initialization (triton's) reaches us as ImportError
    "initialization failed", caused by the KeyboardInterrupt: still exit 130, one line."""
    import typer

    from infer.ui.console import errors

    def init():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            raise ImportError("initialization failed") from e

    with pytest.raises(typer.Exit) as info, errors(debug=False, as_json=True):
        init()
    assert info.value.exit_code == 130
    out, err = capsys.readouterr()
    assert err == "interrupted\n"
    assert json.loads(out) == {"error": "interrupted", "exit_code": 130}
    with pytest.raises(typer.Exit) as info, errors(debug=False):
        raise ImportError("no module named x")  # any other ImportError: a runtime failure
    assert info.value.exit_code == 1


HEAVY = ("torch", "triton", "tokenizers", "safetensors", "huggingface_hub", "jinja2", "numpy")
HEAVY_AFTER = f"""
import sys
from cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("heavy:" + ",".join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)
"""


@pytest.mark.parametrize("argv", [
    ["--help"], ["--version"], ["generate", "--help"], ["summarize", "--help"],
    ["generate", "M", "P", "--no-such-flag"], ["generate", "M", " "],
    ["summarize", "{missing}", "--model", "M"], ["summarize", "-", "--part-tokens", "0"],
], ids=["help", "version", "generate-help", "summarize-help", "bad-flag", "empty-prompt",
        "missing-file", "bad-part-tokens"])
def test_help_version_and_early_errors_import_no_heavy_module(argv, tmp_path):
    """`infer --help`, `--version` and the errors found before the model is read take ~0.15 s:
    torch, triton, tokenizers, safetensors, huggingface_hub, jinja2 are imported by the commands
    as they need them (they took ~1.5 s before every --help)."""
    import subprocess
    import sys
    from pathlib import Path

    argv = [a.replace("{missing}", str(tmp_path / "no.txt")) for a in argv]
    proc = subprocess.run([sys.executable, "-c", HEAVY_AFTER, *argv], capture_output=True,
                          text=True, timeout=60, cwd=Path(__file__).parents[1])
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1] == "heavy:", proc.stderr  # the heavy modules imported


IMPORTED_AFTER = """
import sys
from cli import main
try:
    main(sys.argv[2:])
except SystemExit:
    pass
print("imported:" + ",".join(m for m in sys.argv[1].split(",") if m in sys.modules),
      file=sys.stderr)
"""


def imported_after(argv: list[str], modules: tuple[str, ...]) -> str:
    """Which of ``modules`` an ``infer`` run with ``argv`` (a fresh process) has imported."""
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.run([sys.executable, "-c", IMPORTED_AFTER, ",".join(modules), *argv],
                          capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parents[1])
    assert proc.returncode == 0, proc.stderr
    return proc.stderr.splitlines()[-1].removeprefix("imported:")


def test_help_imports_no_command_module():
    """Each command imports its own modules (the reply view, the chat loop, summarize's) when it
    runs: `infer --help` needs none of them."""
    modules = ("infer.summarize", "infer.ui.oneshot", "infer.ui.render", "infer.ui.repl",
               "infer.ui.summary_view", "rich.progress", "rich.live")
    assert imported_after(["--help"], modules) == ""


def test_generate_imports_no_sympy(tiny_ckpt):
    """A whole `infer generate` (load, prefill, decode) imports neither sympy (through
    torch.fx.experimental.symbolic_shapes: ~0.3 s, as Module.to_empty did) nor torch._dynamo."""
    modules = ("sympy", "torch.fx.experimental.symbolic_shapes", "torch._dynamo")
    assert imported_after(["generate", str(tiny_ckpt), "hi", *FAST], modules) == ""


def test_first_torch_import_runs_without_gc_then_freezes():
    """``import_torch``: a fresh process's first ``import torch`` with the cyclic collector
    paused, its objects frozen after, the collector on again; a second call changes nothing."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import gc, sys; from infer.ui.prepare import import_torch; "
            "assert 'torch' not in sys.modules; full = gc.get_stats()[2]['collections']; "
            "t = import_torch(); n = gc.get_freeze_count(); "
            "print(t is sys.modules['torch'], n > 10000, gc.isenabled(), "
            "gc.get_stats()[2]['collections'] == full, import_torch() is t, "
            "gc.get_freeze_count() == n)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).parents[1], check=True).stdout
    assert out.split() == ["True"] * 6


@pytest.mark.parametrize("argv,stdin", [
    (["generate", "{ckpt}", "hi", *FAST], None),
    (["generate", "{ckpt}", "hi", *FAST, "--json"], None),
    (["summarize", "{file}", "--model", "{ckpt}", *FAST], None),
    (["summarize", "{file}", "--model", "{ckpt}", *FAST, "--json"], None),
    (["chat", "{ckpt}", *FAST, "--no-think"], "hi\nagain\n"),
    (["chat", "{ckpt}", *FAST, "--no-think", "--json"], "hi\nagain\n"),
    (["generate", "--help"], None),
], ids=["generate", "generate-json", "summarize", "summarize-json", "chat", "chat-json", "help"])
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
