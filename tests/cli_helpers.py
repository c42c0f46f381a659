"""Helpers the CLI tests share (``test_cli``, ``test_bench``): run a command in-process with typer's
runner, and check that a result is one error line with its exit code."""

from __future__ import annotations

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
