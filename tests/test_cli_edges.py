"""The `infer` command line under bad input (exit codes, one-line errors, the hub's errors, chat
commands), through typer's test runner on a tiny random checkpoint on the CPU. The errors under
``--json`` are in ``test_cli_json_errors.py``, the context rule in ``test_cli_context.py``, the
input and output edges in ``test_cli_streams.py``, the start-up in ``test_cli_startup.py``, the
package layout in ``test_cli_layout.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import FAST, assert_one_line_error, invoke, ok_json

pytestmark = pytest.mark.usefixtures("cli_tokenizer_once")

# ---------------------------------------------------------------------------- new-user trial


@pytest.mark.parametrize("argv,needle", [
    (["generate", "M", "P", "--kv-cache", "fp8"], "'fp8' is not one of"),
    (["generate", "M", "P", "--attention", "flash"], "--attention"),
    (["generate", "M", "P", "--max-new-tokens", "abc"], "--max-new-tokens"),
    (["generate", "M", "P", "--no-such-flag"], "No such option: --no-such-flag"),
    (["generate", "M"], "Missing argument 'PROMPT'"),
    (["frobnicate"], "No such command"),
    (["summarize", "M", "book.txt"], "summarize takes one FILE, and the model with --model (-m)"),
    (["generate", "--version"], "--version goes before the command: "),
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


def test_chat_commands_and_double_slash(tiny_ckpt, tok):
    result = invoke("chat", tiny_ckpt, *FAST, "--no-think", "--json",
                    input="/stats extra\n/foo bar\n//etc/hosts\n/STATS\n/help\n/Quit\nnot sent\n")
    assert result.exit_code == 0, result.output
    # the banner, the warnings of /stats extra and /foo, and /help itself (not a warning)
    assert result.stderr.count("/help shows this") == 4
    assert "unknown command /help" not in result.stderr
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


def test_raw_encodes_special_token_strings_as_plain_text_as_its_help_says(tiny_ckpt, tok):
    text = "<|im_start|>user\nhi<|im_end|>"
    obj = ok_json(invoke("generate", tiny_ckpt, text, "--raw", *FAST, "--json"))
    assert obj["prompt_tokens"] == len(tok.encode(text)) > 6  # not the control ids: 5
    assert tok.added_tokens["<|im_start|>"] not in tok.encode(text)
    help_text = " ".join(invoke("generate", "--help").stdout.replace("│", " ").split())
    assert ("without the chat template (special-token strings such as <|im_start|> in it are "
            "encoded as plain text)") in help_text


@pytest.mark.parametrize("flag", [["--system", "be brief"], ["--think"]])
def test_raw_with_a_chat_template_flag_is_refused(tiny_ckpt, flag):
    result = invoke("generate", tiny_ckpt, "hi", "--raw", *flag, *FAST)
    assert_one_line_error(result, 2, f"{flag[0]} has no effect with --raw", "drop one of them")


def test_speculate_on_with_a_presence_penalty_says_it_is_off(tiny_ckpt):
    result = invoke("generate", tiny_ckpt, "hi", *FAST, "--speculate", "on",
                    "--presence-penalty", "1")
    assert result.exit_code == 0, result.output
    assert "note: --speculate on does nothing with --presence-penalty" in result.stderr
    quiet = invoke("generate", tiny_ckpt, "hi", *FAST, "--speculate", "on")
    assert "presence" not in quiet.stderr


def _with_generation_config(ckpt, folder: Path, text: str,
                            name: str = "generation_config.json") -> Path:
    """``folder``: ``ckpt``'s files linked, with ``text`` as its ``name`` (generation_config.json
    unless said)."""
    folder.mkdir()
    for f in Path(ckpt).iterdir():
        if f.name != name:
            (folder / f.name).symlink_to(f.resolve())
    (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize("extra,words", [
    ({"hidden_act": "gelu"}, "hidden_act must be \"silu\""),
    ({"use_sliding_window": True, "sliding_window": 512, "max_window_layers": 0},
     "use_sliding_window true with sliding_window 512")])
def test_a_config_infer_would_run_wrongly_is_a_one_line_error(tiny_ckpt, tmp_path, extra, words):
    """Another activation, or a sliding window shorter than --ctx (1k): refused before the
    weights load; with --ctx at most the window the sliding model runs (full attention is it)."""
    config = {**json.loads((Path(tiny_ckpt) / "config.json").read_text()), **extra}
    folder = _with_generation_config(tiny_ckpt, tmp_path / "odd", json.dumps(config),
                                     name="config.json")
    assert_one_line_error(invoke("generate", str(folder), "hi", *FAST), 2, words)
    if "sliding_window" in extra:
        assert invoke("generate", str(folder), "hi", *FAST, "--ctx", "512").exit_code == 0


def test_speculate_on_with_the_files_presence_penalty_says_it_is_off(tiny_ckpt, tmp_path):
    """The penalty from generation_config.json (no flag) turns speculation off too: said."""
    folder = _with_generation_config(tiny_ckpt, tmp_path / "penalized", '{"presence_penalty": 1.5}')
    result = invoke("generate", str(folder), "hi", *FAST, "--speculate", "on")
    assert result.exit_code == 0, result.output
    assert ("note: --speculate on does nothing with the presence penalty of "
            f"{folder / 'generation_config.json'} (1.5;") in result.stderr
    assert "--presence-penalty 0 drops it" in result.stderr
    for flags in (["--presence-penalty", "0"], ["--speculate", "auto"]):
        quiet = invoke("generate", str(folder), "hi", *FAST, "--speculate", "on", *flags)
        assert quiet.exit_code == 0 and "presence" not in quiet.stderr, quiet.stderr


def test_a_disabled_top_k_in_generation_config_decodes_greedily_too(tiny_ckpt, tmp_path):
    """vLLM's ``top_k: -1`` (off) was refused even for --temperature 0: now it is no filter."""
    folder = _with_generation_config(tiny_ckpt, tmp_path / "vllm", '{"top_k": -1}')
    for temperature in ("0", "1"):
        obj = ok_json(invoke("generate", str(folder), "hi", *FAST, "--temperature", temperature,
                             "--json"))
        assert obj["sampling"]["top_k"] == 0


@pytest.mark.parametrize("command,stdin", [
    (["generate", "{ckpt}", "hi"], None), (["chat", "{ckpt}", "--no-think"], "hi\nagain\n")])
def test_a_repetition_penalty_in_generation_config_is_noted_as_not_applied(
        tiny_ckpt, tmp_path, command, stdin):
    """Once per run (chat: two turns, one note), on stderr: --json's stdout stays JSON."""
    folder = _with_generation_config(tiny_ckpt, tmp_path / "penalty",
                                     '{"repetition_penalty": 1.05, "frequency_penalty": 0}')
    args = [str(folder) if a == "{ckpt}" else a for a in command]
    for json_flag in ([], ["--json"]):
        result = invoke(*args, *FAST, *json_flag, input=stdin)
        assert result.exit_code == 0, result.output
        note = (f"note: {folder / 'generation_config.json'} sets repetition_penalty 1.05, which "
                "infer does not apply: the replies are sampled without it")
        assert result.stderr.count(note) == 1 and "frequency" not in result.stderr
        if json_flag:  # every stdout line a JSON object (chat: one a turn), no note
            assert all(json.loads(line) for line in result.stdout.splitlines())
            assert "does not apply" not in result.stdout
    quiet = invoke("generate", tiny_ckpt, "hi", *FAST)
    assert "does not apply" not in quiet.stderr


def test_a_string_do_sample_in_generation_config_is_a_one_line_error(tiny_ckpt, tmp_path):
    """``"do_sample": "false"`` (a string) would read as sampling on: refused, naming the file;
    with ``--temperature`` (which replaces what it decides) the reply runs."""
    folder = _with_generation_config(tiny_ckpt, tmp_path / "stringly",
                                     '{"do_sample": "false", "temperature": 0.6}')
    no_temperature = [a for a in FAST if a not in ("--temperature", "1")]
    result = invoke("generate", str(folder), "hi", *no_temperature)
    assert_one_line_error(result, 2, "generation_config.json: do_sample must be true or false")
    assert invoke("generate", str(folder), "hi", *FAST).exit_code == 0
