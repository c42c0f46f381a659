"""The `infer` command line under bad input and at its edges (exit codes, one-line errors, JSON
errors, the context rule, closed or full outputs, Ctrl-C, the prefill bar, help, start-up, the
package layout), through typer's test runner on a tiny random checkpoint on the CPU."""

from __future__ import annotations

import json
import re

import pytest
from cli_helpers import FAST, TEXT, assert_one_line_error, invoke, ok_json

pytestmark = pytest.mark.usefixtures("cli_tokenizer_once")

# ---------------------------------------------------------------------------- new-user trial


@pytest.mark.parametrize("argv,needle", [
    (["generate", "M", "P", "--kv-cache", "fp8"], "'fp8' is not one of"),
    (["generate", "M", "P", "--attention", "flash"], "--attention"),
    (["generate", "M", "P", "--max-new-tokens", "abc"], "--max-new-tokens"),
    (["generate", "M", "P", "--no-such-flag"], "No such option: --no-such-flag"),
    (["generate", "M"], "Missing argument 'PROMPT'"),
    (["frobnicate"], "No such command"),
])
def test_main_prints_usage_errors_as_one_line(argv, needle, capsys):
    from cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], err
    assert "--help" in lines[0] and "╭" not in err and "Value error" not in err


def test_main_keeps_help_and_exit_codes(capsys, monkeypatch):
    import cli

    with pytest.raises(SystemExit) as info:
        cli.main(["generate", "--help"])
    assert info.value.code == 0 and "Usage" in capsys.readouterr().out

    def interrupted(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr("infer.ui.prepare.prepare", interrupted)
    with pytest.raises(SystemExit) as info:
        cli.main(["generate", "M", "P"])
    assert info.value.code == 130
    with pytest.raises(SystemExit) as info:  # a typer.Exit code comes through
        cli.main(["generate", "M", "   "])
    assert info.value.code == 2


@pytest.mark.parametrize("argv,where", [
    (["bench", "M", "--speculate=on"], "infer bench --help"),  # a flag given a value
    (["generate", "M", "hi", "--speculate"], "infer generate --help"),  # a value missing
])
def test_parser_errors_name_the_command(argv, where, capsys, monkeypatch):
    import cli

    monkeypatch.setattr("sys.argv", ["/usr/local/bin/infer"])
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1 and err[0].endswith(f"(see {where})"), err


def test_pyproject_script_is_main():
    from pathlib import Path

    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert '\ninfer = "cli:main"\n' in text.split("[project.scripts]")[1]


@pytest.mark.parametrize("args,code,needles", [
    (["--seed", "99999999999999999999999"], 2, ["seed must be an integer from 0 to"]),
    (["--device", "cuda:1"], 2, ["cuda:1"]),
])
def test_clear_flag_messages(args, code, needles, tiny_ckpt, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert_one_line_error(invoke("generate", tiny_ckpt, "hi", *args), code, *needles)


def test_empty_model_is_named():
    assert_one_line_error(invoke("generate", "", "Hi", "--device", "cpu"), 2, "MODEL is empty")


def test_triton_without_gpu_errors_without_the_cpu_warning(tiny_ckpt, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    result = invoke("generate", tiny_ckpt, "hi", "--attention", "triton")
    assert_one_line_error(result, 2, "--attention triton needs a CUDA GPU")


def test_ctx_past_max_position_embeddings_turns_yarn_on_and_says_so(tiny_ckpt):
    ok = invoke("generate", tiny_ckpt, "hi", *FAST, "--max-new-tokens", "1", "--ctx", "40960")
    assert ok.exit_code == 0 and "YaRN" not in ok.stderr, ok.output
    result = invoke("generate", tiny_ckpt, "hi", *FAST, "--max-new-tokens", "1", "--ctx", "41k")
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if "YaRN" in line]
    assert len(notes) == 1 and notes[0].startswith("note:") and "40960" in notes[0]
    assert "factor 1.5 over 32768" in notes[0] and "warning" not in result.stderr


@pytest.mark.parametrize("ctx", ["3000000", "99999999999k", "131073"])
def test_ctx_beyond_the_checkpoint_is_bad_input_naming_the_largest(tiny_ckpt, ctx):
    result = invoke("generate", tiny_ckpt, "hi", "--device", "cpu", "--ctx", ctx)
    assert_one_line_error(result, 2, "beyond the largest context", "131072")


def _connect_error(msg: str = "[Errno -2] Name or service not known"):
    """What huggingface_hub raises when the hub cannot be reached and nothing is cached: a
    LocalEntryNotFoundError whose text starts with the HTTP client's error, which is its cause."""
    import importlib
    import importlib.util

    from huggingface_hub.errors import LocalEntryNotFoundError

    httpx = importlib.import_module(next(m for m in ("httpx", "httpx2")
                                         if importlib.util.find_spec(m)))
    cause = httpx.ConnectError(msg)
    e = LocalEntryNotFoundError(f"Got: ConnectError: {msg}\nAn error happened while trying to "
                                "locate the files on the Hub. Please check your internet "
                                "connection and try again.")
    e.__cause__ = cause
    return e


@pytest.mark.parametrize("error", ["connection", "hub"])
def test_unreachable_hub_exits_1_and_suggests_a_folder(error, monkeypatch, tmp_path):
    """A network failure is a runtime failure (exit 1) in one clean line: no exception class
    names, no --debug hint, what to do (check the network, or pass a local folder)."""
    import huggingface_hub

    def fail(*args, **kw):
        if error == "connection":
            raise ConnectionError("Failed to establish a new connection")
        raise _connect_error()

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)
    result = invoke("generate", "Qwen/Qwen3-0.6B", "hi", "--device", "cpu")
    assert_one_line_error(result, 1, "Qwen/Qwen3-0.6B", "check the network", "local folder")
    line = result.stderr.strip()
    for raw in ("HubUnreachableError", "ConnectError", "ConnectionError", "Got:", "Errno",
                "--debug"):
        assert raw not in line, line
    if error == "hub":
        assert "name or service not known" in line


def test_offline_hub_not_cached_exits_2_in_the_same_style(monkeypatch, tmp_path):
    """HF_HUB_OFFLINE=1 and not cached: bad input (exit 2), one line of the same shape as the
    unreachable hub's, saying what to do (unset HF_HUB_OFFLINE, or pass a local folder)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)
    result = invoke("generate", "Qwen/Qwen3-0.6B", "hi", "--device", "cpu")
    assert_one_line_error(result, 2, "cannot fetch Qwen/Qwen3-0.6B from the Hugging Face hub: ",
                          "not in the HF cache", "unset HF_HUB_OFFLINE", "local folder")


def test_chat_piped_prompts_go_to_stderr(tiny_ckpt):
    result = invoke("chat", tiny_ckpt, *FAST, "--no-think", input="hello\n/exit\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip()  # the reply
    assert not any(line.startswith(">") for line in result.stdout.splitlines()), result.stdout
    assert result.stderr.count("> ") >= 2  # one prompt per line read


# ---------------------------------------------------------------------------- second trial


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
    assert failed["turn"] == 2 and "longer than the context of 64 tokens" in failed["error"]
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


def test_chat_commands_and_double_slash(tiny_ckpt, tok):
    result = invoke("chat", tiny_ckpt, *FAST, "--no-think", "--json",
                    input="/stats extra\n/foo bar\n//etc/hosts\n/STATS\n/Quit\nnot sent\n")
    assert result.exit_code == 0, result.output
    assert "/stats takes no argument" in result.stderr
    assert "unknown command" not in result.stderr.replace("unknown command /foo", "")
    assert "context: " in result.stderr  # /STATS is /stats
    assert "unknown command /foo" in result.stderr and "/quit" in result.stderr
    (reply,) = (json.loads(line) for line in result.stdout.splitlines())  # /quit ended the chat
    ids = tok.chat_ids([{"role": "user", "content": "/etc/hosts"}], enable_thinking=False)
    assert reply["prompt_tokens"] == len(ids)


def test_max_new_tokens_negative_says_zero_is_allowed(tiny_ckpt):
    result = invoke("generate", tiny_ckpt, "hi", "--device", "cpu", "--max-new-tokens", "-1")
    assert_one_line_error(result, 2, "--max-new-tokens must be an integer >= 0 (0 = no limit)",
                          "-1")


def test_prompt_filling_the_context_leaves_no_room(tiny_ckpt, tok):
    n = len(tok.chat_ids([{"role": "user", "content": "hi"}], enable_thinking=False))
    result = invoke("generate", tiny_ckpt, "hi", "--device", "cpu", "--ctx", n,
                    "--max-new-tokens", "0")
    assert_one_line_error(result, 2, f"the prompt is {n} tokens, which leaves no room for a "
                          f"reply in the context of {n} tokens", f"--ctx {-(-(n + 1) // 1024)}k")


def test_no_limit_reply_fills_the_context_and_no_more(tiny_ckpt, tok):
    """One rule: prompt + reply <= ctx, with --max-new-tokens 0 as with a budget (64 is refused
    for a 1-token prompt at --ctx 64, so no limit must not give 64 either)."""
    flags = ["--raw", "--ctx", "64", "--page-size", "16", "--device", "cpu", "--seed", "0",
             "--temperature", "1", "--top-k", "0", "--top-p", "1", "--json"]
    assert len(tok.encode("Hello")) == 1
    refused = invoke("generate", tiny_ckpt, "Hello", *flags, "--max-new-tokens", "64")
    assert refused.exit_code == 2 and "65 tokens" in json.loads(refused.stdout)["error"]
    budget = ok_json(invoke("generate", tiny_ckpt, "Hello", *flags, "--max-new-tokens", "63"))
    assert budget["new_tokens"] <= 63
    free = ok_json(invoke("generate", tiny_ckpt, "Hello", *flags, "--max-new-tokens", "0"))
    assert free["prompt_tokens"] + free["new_tokens"] <= 64, free["new_tokens"]
    assert free["stop_reason"] in ("context", "stop")


def test_check_fits_past_the_largest_context():
    from infer.fits import check_fits

    top = 131072  # Qwen3's largest context (YaRN factor 4 over 32768): models/context.py
    check_fits(top - 1, top, max_ctx=top)  # fits: no error
    with pytest.raises(ValueError) as info:  # war_and_peace.txt at 32k, with --no-split
        check_fits(774_000, 32768, 1024, max_ctx=top)
    msg = str(info.value)
    assert "774000 tokens" in msg and f"largest context this model supports ({top}" in msg
    assert "shorten" in msg and "--ctx" not in msg
    with pytest.raises(ValueError) as info:  # the prompt fits alone, not with the reply
        check_fits(top - 100, 32768, 1000, max_ctx=top)
    msg = str(info.value)
    assert "largest context" in msg and "--max-new-tokens to at most 100" in msg
    assert "--ctx" not in msg
    with pytest.raises(ValueError) as info:  # within the model's reach: suggest a --ctx
        check_fits(100_000, 32768, max_ctx=top)
    assert f"--ctx {-(-100_001 // 1024)}k" in str(info.value)
    with pytest.raises(ValueError, match="supports \\(262144 tokens\\)"):  # Qwen3-4B-2507
        check_fits(300_000, 262144, max_ctx=262144)


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


# ---------------------------------------------------------------------------- layout


def test_presentation_lives_in_infer_ui_and_never_imports_cli():
    """DESIGN.md: the engine never imports ``infer/ui/`` or ``cli.py``; ``infer/ui/`` never
    imports ``cli.py`` (no circle)."""
    import ast
    from pathlib import Path

    root = Path(__file__).parents[1] / "infer"

    def imported(path: Path) -> set[str]:
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{a.name}" for a in node.names)
        return names

    for path in root.rglob("*.py"):
        names = imported(path)
        assert "cli" not in names and not any(n.startswith("cli.") for n in names), path
        if "ui" not in path.relative_to(root).parts:
            assert not any(n == "infer.ui" or n.startswith("infer.ui.") for n in names), path
    for gone in ("console", "render", "repl", "textio"):
        assert not (root / f"{gone}.py").exists()


def test_shared_options_needs_opts_and_no_clash():
    from infer.ui.options import Options, shared_options

    def no_opts(model: str):
        pass

    def clash(model: str, ctx: str = "1k", *, opts: Options):
        pass

    with pytest.raises(TypeError, match="opts: Options"):
        shared_options()(no_opts)
    with pytest.raises(TypeError, match="ctx"):
        shared_options()(clash)


@pytest.mark.parametrize("speculate", ["off", "on"])
def test_non_finite_logits_exit_1_with_one_line(tiny_ckpt, monkeypatch, speculate):
    """Weights that are finite but overflow (here: logits forced to NaN) must not print `!!!!`
    with exit 0: the sampler's guard stops the reply with a runtime error."""
    import torch

    from models.qwen3 import Qwen3ForCausalLM

    real = Qwen3ForCausalLM.compute_logits

    def nan_logits(self, hidden):
        return real(self, hidden) * torch.nan

    monkeypatch.setattr(Qwen3ForCausalLM, "compute_logits", nan_logits)
    result = invoke("generate", tiny_ckpt, "hi", *FAST, "--speculate", speculate)
    assert result.exit_code == 1, result.output
    assert "non-finite (NaN or inf) logits" in result.stderr
    assert "NonFiniteLogits" not in result.stderr and "Traceback" not in result.output
