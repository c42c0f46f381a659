"""Output to streams whose encoding cannot write every character (``infer/ui/output_encoding.py``):
text with ``?`` in place of what it lacks, JSON with ``\\uXXXX`` escapes; a real process with
``PYTHONIOENCODING=ascii`` replies and exits 0 (it printed part of the reply, then a raw codec
error with exit 2)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import FAST

from infer.ui.console import print_json
from infer.ui.output_encoding import json_line, replace_unencodable, writes_utf

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("encoding, utf", [("utf-8", True), ("UTF8", True), ("utf-16-le", True),
                                           ("ascii", False), ("latin-1", False),
                                           ("no-such-codec", False), (None, True)])
def test_writes_utf(encoding, utf):
    class Stream:
        pass

    stream = Stream()
    stream.encoding = encoding
    assert writes_utf(stream) is utf


def test_unencodable_text_is_replaced_and_json_escaped(monkeypatch):
    out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    replace_unencodable()
    assert (out.errors, err.errors) == ("replace", "strict")  # UTF left alone
    out.write("caf\u00e9 \u00b7 \n")
    print_json({"text": "caf\u00e9 \u65e5\u672c"})
    out.flush()
    text = out.buffer.getvalue().decode("ascii")
    assert text.startswith("caf? ? ")
    assert json.loads(text.splitlines()[-1]) == {"text": "caf\u00e9 \u65e5\u672c"}  # lossless


@pytest.mark.parametrize("json_flag", [False, True])
def test_ascii_output_in_a_real_process(tiny_ckpt, json_flag):
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run(
        [sys.executable, "-c", "from cli import main; main()", "generate", str(tiny_ckpt),
         "\u65e5\u672c\u8a9e", *FAST, *(["--json"] if json_flag else [])],
        capture_output=True, timeout=120, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr.decode("ascii", "replace")
    assert b"error" not in proc.stderr and b"Traceback" not in proc.stderr
    proc.stdout.decode("ascii")  # every byte ASCII
    proc.stderr.decode("ascii")
    if json_flag:
        assert json.loads(proc.stdout)["new_tokens"] == 3
    else:
        assert b"? 3 new tokens" in proc.stderr  # the stats line's middle dots


def test_lone_surrogates_are_escaped_on_any_stream():
    """An undecodable byte of an argument or a path (``\\udcff`` under surrogateescape): a strict
    UTF-8 stdout raised UnicodeEncodeError (a traceback), a lenient one wrote a raw 0xFF."""
    utf8 = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    line = json_line({"model": "/tmp/d\udcff", "text": "caf\u00e9"}, utf8)
    assert line == '{"model": "/tmp/d\\udcff", "text": "caf\\u00e9"}\n'
    assert json_line({"text": "caf\u00e9"}, utf8) == '{"text": "caf\u00e9"}\n'  # UTF: as it is


def test_an_undecodable_argument_with_json_on_a_strict_utf8_stdout(tiny_ckpt):
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run(
        [sys.executable.encode(), b"-c", b"from cli import main; main()", b"generate",
         str(tiny_ckpt).encode(), b"hi", b"--bogus\xff", b"--json"],
        capture_output=True, timeout=120, cwd=ROOT, env=env)
    assert proc.returncode == 2, proc.stderr
    assert json.loads(proc.stdout.decode("utf-8")) == {
        "error": "No such option: --bogus\udcff (see -c generate --help)", "exit_code": 2}
    assert b"Traceback" not in proc.stderr
