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

# Each command producing a reply, plain and --json (argv with {ckpt}/{file} placeholders, stdin,
# id): for tests that run every command under one condition (a stream closed, a full device).
REPLY_COMMANDS = [
    (["generate", "{ckpt}", "hi", *FAST], None, "generate"),
    (["generate", "{ckpt}", "hi", *FAST, "--json"], None, "generate-json"),
    (["summarize", "{file}", "--model", "{ckpt}", *FAST], None, "summarize"),
    (["summarize", "{file}", "--model", "{ckpt}", *FAST, "--json"], None, "summarize-json"),
    (["chat", "{ckpt}", *FAST, "--no-think"], "hi\nagain\n", "chat"),
    (["chat", "{ckpt}", *FAST, "--no-think", "--json"], "hi\nagain\n", "chat-json"),
]


def reply_command_params(*extra: tuple) -> list:
    """``REPLY_COMMANDS`` and ``extra`` (argv, stdin, id) as ``pytest.param``s of
    ``("argv", "stdin")``."""
    import pytest

    return [pytest.param(argv, stdin, id=name) for argv, stdin, name in (*REPLY_COMMANDS, *extra)]


def ok_json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # exactly one JSON document on stdout
