"""The `infer` command line through typer's test runner, on a tiny random checkpoint on the CPU:
generate, flags and errors, chat. How text input reaches the model (files, encodings, stdin,
invalid bytes, the context rule) is in ``test_cli_input.py``.

Replies are sampled with a fixed seed, so two runs on the same prompt give the same text.
"""

from __future__ import annotations

import json

import pytest
from cli_helpers import FAST, TEXT, assert_one_line_error, invoke, ok_json

pytestmark = pytest.mark.usefixtures("cli_tokenizer_once")


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
                    "new_tokens": 3, "mean_accepted": 6.333333333333333}) == {
        "ttft_s": 0.224, "decode_tokens_per_s": 177.0, "fraction_of_ceiling": 0.781,
        "ceiling_tokens_per_s": None, "new_tokens": 3, "mean_accepted": 6.333}


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


# ---------------------------------------------------------------------------- flags and errors


@pytest.mark.parametrize("flags,needle", [
    (["--ctx", "32q"], "--ctx must be a token count"),
    (["--ctx", "0"], "at least 1 token"),
    (["--page-size", "48"], "--page-size must be"),
    (["--temperature", "-1"], "--temperature must be"),
    (["--temperature", "4e38"], "--temperature must be a number from 0 to 100"),
    (["--top-p", "0"], "--top-p must be"),
    (["--prefill-chunk", "0"], "--prefill-chunk must be"),
    (["--device", "tpu"], "--device must be"),
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


def test_out_of_host_memory_says_so(tiny_ckpt, monkeypatch):
    """torch's CPU allocator failing (a RuntimeError) and mmap refusing the weights (which read
    as a corrupt file before): exit 1, one line that says memory ran out, no --debug hint."""
    def no_memory(self, *args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] data. DefaultCPUAllocator: can't "
                           "allocate memory: you tried to allocate 8589934592 bytes.")

    monkeypatch.setattr("infer.engine.Engine.__init__", no_memory)
    result = invoke("generate", tiny_ckpt, "hi", *FAST)
    assert_one_line_error(result, 1, "error: out of host memory: [enforce fail")
    assert "--debug" not in result.stderr and "RuntimeError" not in result.stderr
    monkeypatch.undo()

    def no_mmap(*args, **kwargs):
        raise OSError("unable to mmap 1192135096 bytes from file: Cannot allocate memory (12)")

    monkeypatch.setattr("models.checkpoint_folder.safe_open", no_mmap)
    result = invoke("generate", tiny_ckpt, "hi", *FAST)
    assert_one_line_error(result, 1, "out of memory mapping", "model.safetensors")
    assert "not a valid safetensors file" not in result.stderr


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
    assert "context: 0 of 1,024 tokens cached" in cached[1]  # /reset freed the conversation
    assert "context: 0 of" not in cached[0]
    # the last reply's numbers, before and after /reset (it clears the conversation, not them)
    assert "tok/s decode" in cached[0] and "tok/s decode" in cached[1]
    assert "no reply yet" not in err


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
    error = next(ln for ln in result.stderr.splitlines() if "does not fit" in ln)
    assert "error: the message does not fit:" in error and "context's 64 are" in error
    assert "/reset" not in error  # nothing to clear yet: no /reset hint
    assert "unknown command /unknown" in result.stderr
    assert "(0 reused)" in result.stderr  # "hi" was answered after the error


def test_chat_error_after_a_reply_suggests_reset(tiny_ckpt):
    result = invoke("chat", tiny_ckpt, "--ctx", "64", "--device", "cpu", "--max-new-tokens", "2",
                    input="hi\n" + "word " * 100 + "\n")
    error = next(ln for ln in result.stderr.splitlines() if "does not fit" in ln)
    assert ", /reset, or restart" in error  # a conversation is cached: clearing it makes room


def test_chat_piped_crlf_lines_and_nul_bytes(tiny_ckpt):
    """CRLF lines are the same messages as LF ones (input() keeps the \\r); a message with NUL
    bytes is refused as generate refuses such input, and the chat goes on."""
    crlf = invoke("chat", tiny_ckpt, *FAST, "--json", "--no-think", input="hi\r\n")
    lf = invoke("chat", tiny_ckpt, *FAST, "--json", "--no-think", input="hi\n")
    assert crlf.exit_code == lf.exit_code == 0, crlf.output
    assert json.loads(crlf.stdout)["prompt_tokens"] == json.loads(lf.stdout)["prompt_tokens"]
    result = invoke("chat", tiny_ckpt, *FAST, "--json", "--no-think", input="a\x00b\nhi\n")
    assert result.exit_code == 2, result.output
    bad, reply = (json.loads(line) for line in result.stdout.splitlines())
    assert bad == {"error": "the message contains NUL bytes (binary input?): send text",
                   "turn": 1}
    assert reply["command"] == "chat" and reply["reused_tokens"] == 0


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
    # the step was captured in the start-up warm-up, before the reply
    assert obj["warm_up_s"] > 0 and obj["graph_capture_s"] > 0
