"""Helpers the CLI tests share (``test_cli``, ``test_cli_edges``, ``test_bench``): the fast flags,
running a command in-process with typer's runner, and checking a result (one JSON object, or one
error line with its exit code). The tokenizer fixtures live in ``conftest.py``."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from cli import app


def invoke(*args, input=None):
    return CliRunner().invoke(app, [str(a) for a in args], input=input)


def assert_one_line_error(result, code: int, *needles: str) -> None:
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    for needle in needles:
        assert needle in lines[0]
    assert "Traceback" not in result.output


FAST = ["--ctx", "1k", "--device", "cpu", "--max-new-tokens", "3", "--temperature", "1",
        "--seed", "0"]
TEXT = "The cat sat on the mat.\nIt was a sunny day, and the cat was happy.\n"


def ok_json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # exactly one JSON document on stdout
