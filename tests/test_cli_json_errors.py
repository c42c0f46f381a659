"""The `infer` command line's errors under ``--json``: the one-line error on stderr and one JSON
object on stdout (bad input exit 2, a runtime failure exit 1, a usage error through ``main``), and
a chat's failed turn as a line of its own, the chat going on; through typer's test runner on a tiny
random checkpoint on the CPU. The errors without ``--json``: ``test_cli_edges.py``."""

from __future__ import annotations

import json

import pytest
from cli_helpers import FAST, invoke

pytestmark = pytest.mark.usefixtures("cli_tokenizer_once")


def error_json(result, code: int, *needles: str) -> dict:
    """--json and an error: the one-line error on stderr and one JSON object on stdout."""
    assert result.exit_code == code, result.output
    obj = json.loads(result.stdout)
    assert obj["exit_code"] == code
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == f"error: {obj['error']}", result.stderr
    for needle in needles:
        assert needle in obj["error"]
    return obj


def test_json_errors_print_one_object_on_stdout(tiny_ckpt, monkeypatch):
    error_json(invoke("generate", tiny_ckpt, "   ", "--json"), 2, "prompt is empty")
    error_json(invoke("generate", tiny_ckpt, "hi", "--json", "--device", "cpu", "--ctx", "8"),
               2, "context of 8 tokens")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    error_json(invoke("generate", "no-such-owner-xyz/m", "hi", "--json", "--device", "cpu"), 2,
               "no-such-owner-xyz/m")

    def boom(self, *args, **kwargs):
        raise RuntimeError("the device fell over")

    monkeypatch.setattr("infer.engine.Engine.__init__", boom)
    error_json(invoke("generate", tiny_ckpt, "hi", *FAST, "--json"), 1,
               "RuntimeError: the device fell over")
    assert invoke("generate", tiny_ckpt, "hi", *FAST).stdout == ""  # no JSON without --json


def test_json_usage_errors_through_main(capsys):
    from cli import main

    with pytest.raises(SystemExit) as info:
        main(["generate", "M", "P", "--json", "--kv-cache", "fp8"])
    assert info.value.code == 2
    out, err = capsys.readouterr()
    obj = json.loads(out)
    assert obj["exit_code"] == 2 and "fp8" in obj["error"] and "--help" in obj["error"]
    assert err.strip() == f"error: {obj['error']}"
    with pytest.raises(SystemExit):
        main(["generate", "M", "P", "--kv-cache", "fp8"])
    assert capsys.readouterr().out == ""


def test_chat_json_failed_turn_is_a_line_and_piped_chat_exits_2(tiny_ckpt):
    result = invoke("chat", tiny_ckpt, "--ctx", "64", "--device", "cpu", "--max-new-tokens", "2",
                    "--json", input="hi\n" + "word " * 100 + "\nhello\n")
    assert result.exit_code == 2, result.output
    first, failed, third = (json.loads(line) for line in result.stdout.splitlines())
    assert first["new_tokens"] >= 1 and third["new_tokens"] >= 1
    assert failed["turn"] == 2 and "the context's 64 are left" in failed["error"]
    assert f"error: {failed['error']}" in result.stderr
    assert third["reused_tokens"] > 0  # the failed message was dropped, the cache kept


def test_chat_runtime_failure_in_a_turn_exits_1_at_the_end(tiny_ckpt, monkeypatch):
    from infer.ui.render import ReplyView

    real_run, calls = ReplyView.run, []

    def fail_first(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("out of memory")
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(ReplyView, "run", fail_first)
    result = invoke("chat", tiny_ckpt, *FAST, "--ctx", "64", "--json",
                    input="hi\n" + "word " * 100 + "\nhello\n")
    assert result.exit_code == 1, result.output  # a runtime failure wins over bad input
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line.get("turn") for line in lines] == [1, 2, None]
    assert "RuntimeError: out of memory" in lines[0]["error"]
    assert lines[2]["reused_tokens"] == 0 and lines[2]["new_tokens"] >= 1
