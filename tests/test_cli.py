"""The `infer` command line through typer's test runner, on a tiny random checkpoint on the CPU.

Replies are sampled with a fixed seed, so two runs on the same prompt give the same text: that is
how the input-decoding tests check that every encoding reaches the model as the same prompt.
"""

from __future__ import annotations

import codecs
import json
import re

import pytest
from cli_helpers import assert_one_line_error, invoke

from cli import SUMMARY_PROMPT

FAST = ["--ctx", "1k", "--device", "cpu", "--max-new-tokens", "3", "--temperature", "1",
        "--seed", "0"]
TEXT = "The cat sat on the mat.\nIt was a sunny day, and the cat was happy.\n"


@pytest.fixture(scope="module")
def tok(tiny_ckpt):
    from models.tokenizer import Qwen3Tokenizer

    return Qwen3Tokenizer.from_folder(tiny_ckpt)


@pytest.fixture(autouse=True)
def _tokenizer_loaded_once(tok, tiny_ckpt, monkeypatch):
    """Reading tokenizer.json takes about a second: hand the CLI the module's tokenizer (it is
    immutable once built) instead of reading it again on every invocation."""
    from models.tokenizer import Qwen3Tokenizer

    real = Qwen3Tokenizer.from_folder.__func__

    def from_folder(cls, folder):
        return tok if str(folder) == str(tiny_ckpt) else real(cls, folder)

    monkeypatch.setattr(Qwen3Tokenizer, "from_folder", classmethod(from_folder))


def ok_json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # exactly one JSON document on stdout


def summary_ids(tok, text: str) -> list[int]:
    messages = [{"role": "user", "content": SUMMARY_PROMPT.format(text=text)}]
    return tok.chat_ids(messages, enable_thinking=False)


# ---------------------------------------------------------------------------- generate


def test_generate_streams_text_then_stats(tiny_ckpt, tok):
    result = invoke("generate", tiny_ckpt, "Hello there", *FAST)
    assert result.exit_code == 0, result.output
    n_prompt = len(tok.chat_ids([{"role": "user", "content": "Hello there"}],
                                enable_thinking=False))
    stats = result.stderr.strip().splitlines()[-1]
    assert f"prompt {n_prompt} tokens" in stats and "tok/s decode" in stats
    assert "first token" in stats and "new tokens" in stats
    assert result.stdout.strip()  # the sampled text went to stdout, the stats did not
    assert "prompt" not in result.stdout


def test_generate_json_is_parseable_and_matches_the_text_stream(tiny_ckpt, tok):
    obj = ok_json(invoke("generate", tiny_ckpt, "Hello there", *FAST, "--json"))
    result = invoke("generate", tiny_ckpt, "Hello there", *FAST)  # same seed, no --json
    assert obj["prompt_tokens"] == len(tok.chat_ids([{"role": "user", "content": "Hello there"}],
                                                    enable_thinking=False))
    assert 1 <= obj["new_tokens"] <= 3 and obj["stop_reason"] in ("length", "stop")
    assert obj["ctx"] == 1024 and obj["kv_cache"] == "bf16" and obj["device"] == "cpu"
    assert obj["cache_dtype"] == "float32"  # what a bf16 cache holds on the CPU
    assert obj["ttft_s"] > 0 and obj["interrupted"] is False
    for key in ("reused_tokens", "decode_tokens_per_s", "ceiling_tokens_per_s", "thinking"):
        assert key in obj
    assert obj["text"] == result.stdout.strip()


def test_json_rounds_times_to_ms_and_rates_to_a_tenth(tiny_ckpt):
    obj = ok_json(invoke("generate", tiny_ckpt, "Hello there", *FAST, "--max-new-tokens", "5",
                         "--json"))
    for key in ("load_s", "ttft_s", "decode_s"):
        assert obj[key] == round(obj[key], 3), (key, obj[key])
    assert obj["decode_tokens_per_s"] == round(obj["decode_tokens_per_s"], 1)
    assert obj["ttft_s"] > 0 and obj["prompt_tokens"] > 0  # counts are untouched ints
    from infer.ui.records import rounded

    assert rounded({"ttft_s": 0.22424760900003093, "decode_tokens_per_s": 177.04449,
                    "fraction_of_ceiling": 0.7812345, "ceiling_tokens_per_s": None,
                    "new_tokens": 3}) == {
        "ttft_s": 0.224, "decode_tokens_per_s": 177.0, "fraction_of_ceiling": 0.781,
        "ceiling_tokens_per_s": None, "new_tokens": 3}


def test_generate_prompt_from_stdin_and_raw(tiny_ckpt, tok):
    from_arg = ok_json(invoke("generate", tiny_ckpt, "Tell me a story", *FAST, "--json"))
    from_stdin = ok_json(invoke("generate", tiny_ckpt, "-", *FAST, "--json",
                                input="Tell me a story"))
    assert from_stdin["text"] == from_arg["text"]
    assert from_stdin["prompt_tokens"] == from_arg["prompt_tokens"]
    raw = ok_json(invoke("generate", tiny_ckpt, "Tell me a story", *FAST, "--json", "--raw",
                         "--kv-cache", "int8", "--page-size", "16", "--prefill-chunk", "4"))
    assert raw["prompt_tokens"] == len(tok.encode("Tell me a story"))
    assert raw["kv_cache"] == "int8" and raw["page_size"] == 16 and raw["cache_dtype"] == "int8"


def test_generate_interrupted_reply_exits_130(tiny_ckpt, monkeypatch):
    def interrupt(self, piece):
        raise KeyboardInterrupt

    monkeypatch.setattr("infer.ui.render.ReplyView._add", interrupt)
    result = invoke("generate", tiny_ckpt, "Hello", *FAST)
    assert result.exit_code == 130
    assert "stop: interrupted" in result.stderr


# ---------------------------------------------------------------------------- summarize


@pytest.fixture(scope="module")
def plain_summary(tiny_ckpt, tmp_path_factory):
    path = tmp_path_factory.mktemp("plain") / "story.txt"
    path.write_text(TEXT, encoding="utf-8")
    return ok_json(invoke("summarize", path, "--model", tiny_ckpt, *FAST, "--json"))


def test_summarize_file(plain_summary, tok):
    assert plain_summary["prompt_tokens"] == len(summary_ids(tok, TEXT))
    assert plain_summary["input_chars"] == len(TEXT) and plain_summary["replaced_bytes"] == 0
    assert plain_summary["command"] == "summarize"


@pytest.mark.parametrize("raw", [
    pytest.param(codecs.BOM_UTF8 + TEXT.encode(), id="utf8-bom"),
    pytest.param(TEXT.encode("utf-16"), id="utf16"),
    pytest.param(codecs.BOM_UTF16_LE + TEXT.replace("\n", "\r\n").encode("utf-16-le"),
                 id="utf16le-crlf"),
    pytest.param(codecs.BOM_UTF16_BE + TEXT.encode("utf-16-be"), id="utf16be"),
    pytest.param(TEXT.replace("\n", "\r").encode(), id="cr-endings"),
])
def test_summarize_encodings_reach_the_model_as_the_same_text(raw, tiny_ckpt, tmp_path,
                                                              plain_summary):
    path = tmp_path / "story.txt"
    path.write_bytes(raw)
    obj = ok_json(invoke("summarize", path, "--model", tiny_ckpt, *FAST, "--json"))
    assert obj["prompt_tokens"] == plain_summary["prompt_tokens"]
    assert obj["text"] == plain_summary["text"]  # same prompt + same seed = same reply


def test_summarize_stdin(tiny_ckpt, plain_summary):
    raw = codecs.BOM_UTF8 + TEXT.replace("\n", "\r\n").encode()
    obj = ok_json(invoke("summarize", "-", "--model", tiny_ckpt, *FAST, "--json", input=raw))
    assert obj["prompt_tokens"] == plain_summary["prompt_tokens"]
    assert obj["text"] == plain_summary["text"]


def test_summarize_invalid_bytes_warns_with_the_count(tiny_ckpt, tmp_path, tok):
    path = tmp_path / "damaged.txt"
    path.write_bytes(TEXT.encode() + b"bad \xff\xfe byte and \xc3( end\n")
    result = invoke("summarize", path, "--model", tiny_ckpt, *FAST, "--json")
    obj = ok_json(result)
    assert "warning: 3 invalid byte sequences" in result.stderr
    assert obj["replaced_bytes"] == 3
    text = TEXT + "bad \ufffd\ufffd byte and \ufffd( end\n"
    assert obj["prompt_tokens"] == len(summary_ids(tok, text))


def test_invalid_utf8_in_the_prompt_and_system_is_replaced_with_a_warning(tiny_ckpt, tok):
    # argv as Python decodes b"caf\xe9" (surrogateescape): the tokenizer rejects lone surrogates
    result = invoke("generate", tiny_ckpt, "caf\udce9", "--system", "be \udcff\udcfe", *FAST,
                    "--json")
    obj = ok_json(result)
    assert "warning: 1 invalid byte sequences in the prompt were replaced" in result.stderr
    assert "warning: 2 invalid byte sequences in --system were replaced" in result.stderr
    messages = [{"role": "system", "content": "be \ufffd\ufffd"},
                {"role": "user", "content": "caf\ufffd"}]
    assert obj["prompt_tokens"] == len(tok.chat_ids(messages, enable_thinking=False))


def test_chat_line_with_invalid_utf8_is_replaced_with_a_warning(tiny_ckpt, tok):
    result = invoke("chat", tiny_ckpt, *FAST, "--no-think", "--json",
                    input=b"caf\xe9 \xff\n/exit\n")
    assert result.exit_code == 0, result.output
    assert "warning: 2 invalid byte sequences in the message were replaced" in result.stderr
    obj = json.loads(result.stdout.splitlines()[0])
    ids = tok.chat_ids([{"role": "user", "content": "caf\ufffd \ufffd"}], enable_thinking=False)
    assert obj["prompt_tokens"] == len(ids) and "error" not in obj


@pytest.mark.parametrize("raw,needle", [
    (b"", "is empty"),
    (codecs.BOM_UTF8, "is empty"),
    (codecs.BOM_UTF32_LE, "is empty"),
    (b"  \r\n\t \n", "only whitespace"),
    ("\n \n".encode("utf-16"), "only whitespace"),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)), "binary"),
])
def test_summarize_bad_files_exit_2(raw, needle, tiny_ckpt, tmp_path):
    path = tmp_path / "input.txt"
    path.write_bytes(raw)
    result = invoke("summarize", path, "--model", tiny_ckpt, *FAST)
    assert_one_line_error(result, 2, needle, str(path))


def test_summarize_missing_file_and_empty_stdin_exit_2(tiny_ckpt, tmp_path):
    assert_one_line_error(invoke("summarize", tmp_path / "nope.txt", "--model", tiny_ckpt),
                          2, "no such file")
    assert_one_line_error(invoke("summarize", "-", "--model", tiny_ckpt, input=b""),
                          2, "<stdin> is empty")


def test_prompt_longer_than_ctx_gives_both_counts(tiny_ckpt, tmp_path, tok):
    text = "word " * 200
    path = tmp_path / "long.txt"
    path.write_text(text)
    n = len(summary_ids(tok, text.replace("\r\n", "\n")))
    assert n > 128
    result = invoke("summarize", path, "--model", tiny_ckpt, "--ctx", "128", "--device", "cpu")
    assert_one_line_error(result, 2, f"prompt is {n} tokens", "context of 128 tokens", "--ctx")


@pytest.mark.parametrize("command", ["generate", "summarize"])
def test_prompt_plus_reply_longer_than_ctx_is_an_error(command, tiny_ckpt, tok):
    """A prompt that fits alone but not with --max-new-tokens: exit 2 naming both counts, and
    the suggested --ctx holds both (max-new-tokens 0 = no limit: runs until the context is full).
    """
    text = "word " * 60
    ids = (summary_ids(tok, text) if command == "summarize" else
           tok.chat_ids([{"role": "user", "content": text}], enable_thinking=False))
    n, ctx, max_new = len(ids), 1024, 2000
    assert n < ctx < n + max_new
    args = ((command, "-", "--model", tiny_ckpt) if command == "summarize"
            else (command, tiny_ckpt, "-"))
    flags = ["--device", "cpu", "--ctx", ctx, "--seed", "0", "--temperature", "1"]
    result = invoke(*args, *flags, "--max-new-tokens", max_new, input=text)
    need_k = -(-(n + max_new) // 1024)
    assert_one_line_error(result, 2, f"prompt is {n} tokens", f"reply up to {max_new}",
                          f"context of {ctx} tokens", f"--ctx {need_k}k", "--max-new-tokens")
    flags[3] = 256 if n < 256 else 512
    small = invoke(*args, *flags, "--max-new-tokens", 0, "--json", input=text)
    obj = ok_json(small)
    assert obj["prompt_tokens"] == n and obj["stop_reason"] in ("context", "stop")


# ---------------------------------------------------------------------------- flags and errors


@pytest.mark.parametrize("flags,needle", [
    (["--ctx", "32q"], "invalid context size"),
    (["--ctx", "0"], "at least 1 token"),
    (["--page-size", "48"], "page size"),
    (["--temperature", "-1"], "temperature"),
    (["--top-p", "0"], "top-p"),
    (["--prefill-chunk", "0"], "prefill chunk"),
    (["--device", "tpu"], "device"),
])
def test_bad_flag_values_exit_2(flags, needle, tiny_ckpt):
    result = invoke("generate", tiny_ckpt, "hi", *flags)
    assert_one_line_error(result, 2, needle)


@pytest.mark.parametrize("flags", [["--kv-cache", "fp8"], ["--attention", "flash"],
                                   ["--max-new-tokens", "many"], ["--no-such-flag"]])
def test_usage_errors_exit_2(flags, tiny_ckpt):
    result = invoke("generate", tiny_ckpt, "hi", *flags)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""


@pytest.mark.parametrize("ctx", ["32k", "32K", "32768"])
def test_ctx_spellings(ctx, tiny_ckpt):
    obj = ok_json(invoke("generate", tiny_ckpt, "hi", *FAST, "--json", "--ctx", ctx,
                         "--max-new-tokens", "1"))
    assert obj["ctx"] == 32768


def test_unknown_model_suggests_a_local_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    result = invoke("generate", "no-such-owner-xyz/no-such-model", "hi", "--device", "cpu")
    assert_one_line_error(result, 2, "no-such-owner-xyz/no-such-model", "local folder")


def test_runtime_failure_exits_1_with_traceback_only_under_debug(tiny_ckpt, monkeypatch):
    def boom(self, *args, **kwargs):
        raise RuntimeError("the device fell over")

    monkeypatch.setattr("infer.engine.Engine.__init__", boom)
    result = invoke("generate", tiny_ckpt, "hi", *FAST)
    assert_one_line_error(result, 1, "RuntimeError: the device fell over", "--debug")
    result = invoke("generate", tiny_ckpt, "hi", *FAST, "--debug")
    assert result.exit_code == 1
    assert "Traceback" in result.stderr and "the device fell over" in result.stderr


def test_bad_input_traceback_only_under_debug(tiny_ckpt, tmp_path):
    result = invoke("summarize", tmp_path / "nope.txt", "--model", tiny_ckpt, "--debug")
    assert result.exit_code == 2
    assert "Traceback" in result.stderr and "no such file" in result.stderr


# ---------------------------------------------------------------------------- chat


def test_chat_scripted_session(tiny_ckpt):
    result = invoke("chat", tiny_ckpt, *FAST, "--no-think",
                    input="hello\n/stats\n/reset\n/stats\n/exit\n")
    assert result.exit_code == 0, result.output
    err = result.stderr
    assert "(0 reused)" in err and "tok/s decode" in err  # the stats line after the reply
    assert "conversation cleared" in err
    cached = [line for line in err.splitlines() if "tokens cached" in line]
    assert len(cached) == 2
    assert "context: 0 of 1024 tokens cached" in cached[1]  # /reset freed the conversation
    assert "context: 0 of" not in cached[0]


def test_chat_second_turn_reuses_the_cache_json_lines(tiny_ckpt):
    result = invoke("chat", tiny_ckpt, *FAST, "--json", "--system", "Be brief.",
                    input="hello\nand again\n")  # EOF after the second turn ends the chat
    assert result.exit_code == 0, result.output
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert first["reused_tokens"] == 0
    assert 0 < second["reused_tokens"] < second["prompt_tokens"]
    assert second["reused_tokens"] <= first["prompt_tokens"] + first["new_tokens"]


def test_chat_ctrl_c_stops_the_reply_and_keeps_the_session(tiny_ckpt, monkeypatch):
    from infer.ui.render import ReplyView

    real_add, calls = ReplyView._add, []

    def interrupt_first_reply(self, piece):
        calls.append(piece)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real_add(self, piece)

    monkeypatch.setattr(ReplyView, "_add", interrupt_first_reply)
    result = invoke("chat", tiny_ckpt, *FAST, "--json", input="hello\nagain\n/exit\n")
    assert result.exit_code == 0, result.output
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert first["interrupted"] and first["stop_reason"] == "interrupted"
    assert not second["interrupted"] and second["new_tokens"] >= 1
    assert second["reused_tokens"] > 0


@pytest.mark.parametrize("think", ["--think", "--no-think"])
def test_chat_after_ctrl_c_reuses_the_whole_partial_reply(tiny_ckpt, monkeypatch, think):
    """The interrupted reply stays in the conversation as the model wrote it: the next turn
    reuses every cached token (prompt + partial reply), and so does the one after it (the
    template never renders the partial reply again)."""
    from infer.ui.render import ReplyView

    real_add, calls = ReplyView._add, []

    def interrupt_first_reply(self, piece):
        calls.append(piece)
        if len(calls) == 4:  # a few tokens in
            raise KeyboardInterrupt
        return real_add(self, piece)

    monkeypatch.setattr(ReplyView, "_add", interrupt_first_reply)
    args = ["--ctx", "1k", "--device", "cpu", "--temperature", "1", "--seed", "0",
            "--max-new-tokens", "6", "--json", think]
    result = invoke("chat", tiny_ckpt, *args, input="hello\nagain\nonce more\n/exit\n")
    assert result.exit_code == 0, result.output
    first, second, third = (json.loads(line) for line in result.stdout.splitlines())
    assert first["interrupted"] and first["new_tokens"] == 4
    cached = first["prompt_tokens"] + first["new_tokens"]
    assert second["reused_tokens"] == cached, (first, second)
    assert not second["interrupted"]
    # <|im_end|>, "\n" close the partial reply; the third turn re-renders only from turn two on
    assert third["reused_tokens"] >= cached + 2, (second, third)


def test_chat_ctrl_c_or_ctrl_d_at_the_prompt_exits_cleanly(tiny_ckpt, monkeypatch):
    assert invoke("chat", tiny_ckpt, *FAST, input="").exit_code == 0  # Ctrl-D: EOF

    def ctrl_c(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("rich.console.Console.input", ctrl_c)
    result = invoke("chat", tiny_ckpt, *FAST)
    assert result.exit_code == 0, result.output
    assert "error" not in result.stderr


def test_chat_too_long_message_is_an_error_but_the_chat_goes_on(tiny_ckpt):
    result = invoke("chat", tiny_ckpt, "--ctx", "64", "--device", "cpu", "--max-new-tokens", "2",
                    input="word " * 100 + "\n/unknown\nhi\n/exit\n")
    assert result.exit_code == 2, result.output  # piped: the failed turn shows in the exit code
    assert "longer than the context of 64 tokens" in result.stderr
    assert "unknown command /unknown" in result.stderr
    assert "(0 reused)" in result.stderr  # "hi" was answered after the error


def test_attention_backends_agree_through_the_cli(tiny_ckpt):
    # Under pytest on the CPU the Triton kernels run in the interpreter (conftest.py). Seeded
    # sampling, not greedy: the tiny model's greedy reply is blank lines, a weak comparison.
    args = ["generate", tiny_ckpt, "Hello there", *FAST, "--json", "--page-size", "16"]
    ref = ok_json(invoke(*args, "--attention", "reference"))
    tri = ok_json(invoke(*args, "--attention", "triton"))
    assert (ref["attention"], tri["attention"]) == ("reference", "triton")
    assert tri["text"] and tri["text"] == ref["text"] and tri["new_tokens"] == ref["new_tokens"]


def test_triton_attention_on_the_cpu_without_the_interpreter_exits_2(tiny_ckpt, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    result = invoke("generate", tiny_ckpt, "hi", *FAST, "--attention", "triton")
    assert_one_line_error(result, 2, "needs a CUDA GPU", "--attention reference")


@pytest.mark.gpu
@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_summarize_on_the_gpu(kv_cache, tiny_ckpt_factory, tokenizer_dir, tmp_path):
    ckpt = tiny_ckpt_factory(tokenizer=str(tokenizer_dir), dtype="bfloat16")
    path = tmp_path / "story.txt"
    path.write_text(TEXT * 50)
    obj = ok_json(invoke("summarize", path, "--model", ckpt, "--ctx", "4k", "--device", "cuda",
                         "--kv-cache", kv_cache, "--max-new-tokens", "16", "--seed", "0",
                         "--json"))
    assert obj["device"].startswith("cuda") and obj["attention"] == "triton"
    assert obj["kv_cache"] == kv_cache and obj["prompt_tokens"] > 500
    assert obj["new_tokens"] >= 1 and obj["ttft_s"] > 0


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
                    input="/stats extra\n/foo bar\n//etc/hosts\n/quit\nnot sent\n")
    assert result.exit_code == 0, result.output
    assert "/stats takes no argument" in result.stderr
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


@pytest.mark.parametrize("module", ["typer", "torch", "triton"])
def test_ctrl_c_during_the_start_up_imports_exits_130_quietly(module):
    """Ctrl-C in the ~2 s of imports before `main` runs (torch, triton): exit 130, one line."""
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.run([sys.executable, "-c", CTRL_C_AT_IMPORT, module, "generate", "M", "P"],
                          capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).parents[1])
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", "interrupted\n"), proc.stderr


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
