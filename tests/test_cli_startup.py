"""The `infer` command line before a model is read: help and version, and Ctrl-C during the
start-up imports; through typer's test runner (and real processes where the start-up must be real)
on a tiny random checkpoint. Which modules the early paths import is in ``test_cli_imports.py``,
the input and output edges in ``test_cli_streams.py``."""

from __future__ import annotations

import json
import re

import pytest
from cli_helpers import FAST, invoke

pytestmark = pytest.mark.usefixtures("cli_tokenizer_once")


def test_help_names_the_arguments():
    for command, names in (("generate", "MODEL PROMPT"), ("summarize", "FILE"),
                           ("chat", "MODEL")):
        result = invoke(command, "--help")
        usage = next(line for line in result.stdout.splitlines() if "Usage:" in line)
        assert f"[OPTIONS] {names}" in usage and "{" not in usage, usage
    assert "UTF-32" in invoke("summarize", "--help").stdout


@pytest.mark.parametrize("command", ["", "generate", "summarize", "chat", "bench"])
def test_h_is_help(command):
    short, long = (invoke(*filter(None, [command, flag])) for flag in ("-h", "--help"))
    assert short.exit_code == long.exit_code == 0, short.output
    assert short.stdout == long.stdout and "Usage:" in short.stdout


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


def kept_line_breaks(lines: list[str], width: int) -> list[str]:
    """The lines of wrapped prose whose next line's first word would have fit on them: a line
    break kept from the source text, not made by the wrap (rich wraps greedily)."""
    return [a for a, b in zip(lines, lines[1:], strict=False)
            if a and b and len(a) + 1 + len(b.split()[0]) <= width]


def help_prose(out: str) -> list[tuple[list[str], int]]:
    """The prose of a rendered --help as (lines, width) blocks: each paragraph of the text
    under the usage line, and each entry of the Commands panel (its help column)."""
    lines = out.splitlines()
    width = max(len(line) for line in lines)
    start = next(i for i, line in enumerate(lines) if "Usage:" in line) + 1
    end = next(i for i, line in enumerate(lines) if line.startswith("╭"))
    blocks, para = [], []
    for line in [*lines[start:end], ""]:
        if line.strip():
            para.append(line.strip())
        elif para:
            blocks.append((para, width - 2))
            para = []
    if "─ Commands ─" in out:
        panel = lines[next(i for i, ln in enumerate(lines) if "─ Commands ─" in ln) + 1:]
        col = None
        for row in panel:
            if row.startswith("╰"):
                break
            inner = row[1:-1]
            m = re.match(r" (\S+)(\s+)(\S)", inner)
            if m:
                col = m.start(3)
                blocks.append(([], len(inner) - col - 1))
            blocks[-1][0].append(inner[col:].rstrip())
    return blocks


@pytest.mark.parametrize("command", ["", "generate", "summarize", "chat", "bench"])
def test_help_prose_wraps_at_the_width_only(command, monkeypatch):
    """At 80 columns every line of help prose is wrapped by rich, none broken where the source
    broke it: typer keeps the line breaks of a docstring's later paragraphs, and of the first
    one in the Commands list (summarize's entry and chat's second paragraph were broken)."""
    monkeypatch.setenv("COLUMNS", "80")
    result = invoke(*filter(None, [command, "--help"]))
    assert result.exit_code == 0, result.output
    for lines, width in help_prose(result.stdout):
        assert kept_line_breaks(lines, width) == [], (lines, width)


def test_version(capsys):
    from importlib.metadata import version

    from cli import main

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"infer {version('infer')}\n"


# The `infer` console script as pip writes it for `infer = "cli:main"`, run as from a terminal
# (Python's own SIGINT handler), that sends the process a SIGINT when one module is about to be
# imported (a finder), or a function named NAME, given as `NAME()`, is first called (a profile
# hook): one Ctrl-C at that point of the start-up.
CTRL_C_AT = """
import os
import signal
import sys

class CtrlC:
    def __init__(self, where):
        self.where = where

    def press(self):
        self.where = None  # once
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGINT)

    def find_spec(self, name, path=None, target=None):
        if name == self.where:
            self.press()

    def on_call(self, frame, event, arg):
        if event == "call" and frame.f_code.co_name + "()" == self.where:
            self.press()

signal.signal(signal.SIGINT, signal.default_int_handler)
ctrl_c = CtrlC(sys.argv.pop(1))
sys.meta_path.insert(0, ctrl_c)
if ctrl_c.where.endswith("()"):
    sys.setprofile(ctrl_c.on_call)
from cli import main
sys.exit(main())
"""

# Where cli's start-up runs before a command's own code: its command definitions, typer's building
# of the app (`get_command`) and its parse of the arguments (`make_context`).
BEFORE_THE_COMMAND = ["shared_options()", "get_command()", "make_context()"]


@pytest.mark.parametrize("module", ["typer", *BEFORE_THE_COMMAND, "torch", "numpy",
                                    "tokenizers", "triton", "triton.language.standard"])
def test_ctrl_c_during_the_start_up_imports_exits_130_quietly(module, tiny_ckpt):
    """Ctrl-C in the imports: typer's before `main` runs, torch, tokenizers and triton's (~2 s)
    in the command, which imports them as it needs them: exit 130, one line. In the middle of
    torch's import (numpy's, inside it) the KeyboardInterrupt was swallowed (the command ran on,
    exit 0), killed the process from C++ (exit 134) or became an ImportError (exit 1); it is now
    held back until the import is done (``sigint_deferred``). In typer's, before `main`, --json
    printed no object: now the error object, as the arguments are not parsed yet. So between
    typer's import and the command's first line, where it printed a traceback (cli's command
    definitions, typer building the app) or nothing (typer's parse: a silent exit 130). From
    torch's on it is the reply's that never began (``infer.ui.startup``): before the load, or in
    it (triton's import is part of the engine's load). With --json, the reply's object, whose
    header is null before the config was made (nothing imports torch again to make it). In the
    middle of triton's import (``triton.language.standard``, triton 3's layout) the
    KeyboardInterrupt left it half-imported, and the object's header, importing it again, failed
    with an AttributeError (exit 1): held back until it is done, as torch's."""
    import subprocess
    import sys
    from pathlib import Path

    def run(*flags):
        return subprocess.run([sys.executable, "-c", CTRL_C_AT, module, "generate",
                               str(tiny_ckpt), "P", *FAST, *flags], capture_output=True,
                              text=True, timeout=60, cwd=Path(__file__).parents[1])

    proc = run()
    line = {"typer": "interrupted\n", **dict.fromkeys(BEFORE_THE_COMMAND, "interrupted\n")}.get(
        module, "interrupted before loading the model\n")
    if module.startswith("triton"):
        line = r"prompt \d+ tokens · interrupted while loading the model\n"
    assert (proc.returncode, proc.stdout) == (130, ""), proc.stderr
    assert re.fullmatch(line, proc.stderr), proc.stderr
    if module in ("torch", "numpy"):
        proc = run("--json")
        obj = json.loads(proc.stdout)
        assert proc.returncode == 130 and (obj["interrupted"], obj["model"]) == (True, None)
    if module.startswith("triton"):  # (it was an AttributeError, exit 1: the docstring)
        proc = run("--json")
        obj = json.loads(proc.stdout)
        assert proc.returncode == 130 and obj["interrupted"] and obj["load_s"] is None
        assert obj["model"] == str(tiny_ckpt) and obj["prompt_tokens"] > 0
    if module == "typer" or module in BEFORE_THE_COMMAND:  # the error object
        proc = run("--json")
        assert (proc.returncode, proc.stderr) == (130, "interrupted\n"), proc.stderr
        assert json.loads(proc.stdout) == {"error": "interrupted", "exit_code": 130}
        proc = run("--", "--json")  # an argument after --, not the flag
        assert (proc.returncode, proc.stdout) == (130, ""), proc.stdout


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


# The process's exit after its command: an atexit callback (registered after cli's imports, so it
# runs before torch's) that sends the process two SIGINTs, as `timeout -s INT` does (the process
# and its group: two in a few ms).
CTRL_C_AT_EXIT = """
import atexit
import os
import signal
import sys
import time

def two_ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)

signal.signal(signal.SIGINT, signal.default_int_handler)
from cli import main
atexit.register(two_ctrl_c)
main()
"""


def test_ctrl_c_while_the_process_exits_prints_nothing(tiny_ckpt):
    """Two Ctrl-Cs after the command's result, while the interpreter exits, printed ``Exception
    ignored in atexit callback ... KeyboardInterrupt`` with a traceback (a new user's
    ``timeout -s INT``): ignored now (``ignore_sigint_at_exit``), the reply and exit code kept."""
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.run([sys.executable, "-c", CTRL_C_AT_EXIT, "generate", str(tiny_ckpt), "P",
                           *FAST, "--json"], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).parents[1])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["new_tokens"] >= 1
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr, proc.stderr


def test_an_in_process_main_leaves_sigint_alone(capsys):
    """``main(argv)`` (a host program, the tests) does not ignore SIGINT after its command."""
    import signal

    from cli import main

    with pytest.raises(SystemExit):
        main(["--version"])
    assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
