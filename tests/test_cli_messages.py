"""How the `infer` command line words what it says: a bad flag value names the flag the user typed
(the library names its parameter), token counts read grouped (``131,072``), through typer's
test runner on a tiny random checkpoint on the CPU."""

from __future__ import annotations

import json
import re

import pytest
from cli_helpers import FAST, assert_one_line_error, invoke

pytestmark = pytest.mark.usefixtures("cli_tokenizer_once")


ENGINE_VALUES = [("--ctx", "0"), ("--ctx", "32q"), ("--page-size", "48"),
                 ("--prefill-chunk", "0"), ("--device", "tpu"), ("--device", "cuda:x")]
SAMPLING_VALUES = [("--temperature", "-1"), ("--top-p", "0"), ("--top-k", "-1"),
                   ("--min-p", "2"), ("--presence-penalty", "3"), ("--seed", "-1")]


@pytest.mark.parametrize("command,flag,value", [
    *(("generate", f, v) for f, v in ENGINE_VALUES + SAMPLING_VALUES),
    *(("bench", f, v) for f, v in ENGINE_VALUES),  # bench takes the engine flags only
])
def test_a_bad_flag_value_names_the_flag(command, flag, value, tiny_ckpt):
    """The CLI user typed --page-size, not page_size or "page size": the error starts with the
    flag (and gives the value), exit 2."""
    args = [tiny_ckpt, "hi"] if command == "generate" else [tiny_ckpt]
    device = [] if flag == "--device" else ["--device", "cpu"]
    result = invoke(command, *args, *device, flag, value)
    assert_one_line_error(result, 2, f"error: {flag} must be", value)


def test_the_device_flag_is_case_insensitive(tiny_ckpt):
    """--device CPU as --device cpu (--ctx 32K is accepted too); an unknown one is still refused
    with the same message."""
    fast = [a for a in FAST if a not in ("--device", "cpu")]
    result = invoke("generate", tiny_ckpt, "hi", *fast, "--device", "CPU", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["device"] == "cpu"
    assert_one_line_error(invoke("generate", tiny_ckpt, "hi", *fast, "--device", "TPU"), 2,
                          "error: --device must be cuda, cuda:N or cpu, got 'TPU'")


@pytest.mark.parametrize("command", ["generate", "summarize", "chat", "bench"])
@pytest.mark.parametrize("value,want", [("INT8", "int8"), ("Bf16", "bf16")])
def test_the_kv_cache_flag_is_case_insensitive(command, value, want, tiny_ckpt, tmp_path,
                                               capsys):
    """--kv-cache INT8 was refused ('INT8' is not one of 'bf16', 'int8') while --ctx 32K and
    --device CPU are accepted: every command takes it in any case, as the lower-case value; an
    unknown one is still refused with the same message."""
    text = tmp_path / "text.txt"
    text.write_text("The cat sat on the mat.\n")
    args = {"generate": ["generate", tiny_ckpt, "hi", *FAST],
            "summarize": ["summarize", text, "--model", tiny_ckpt, *FAST],
            "chat": ["chat", tiny_ckpt, *FAST],
            "bench": ["bench", tiny_ckpt, "--ctx", "1k", "--device", "cpu", "--lengths", "16",
                      "--tokens", "2"]}[command]
    result = invoke(*args, "--kv-cache", value, "--json", input="hi\n")
    assert result.exit_code == 0, result.output
    obj = json.loads(result.stdout.splitlines()[0])
    assert obj["kv_cache"] == want and obj["cache_dtype"] == ("int8" if want == "int8" else
                                                              "float32")
    from cli import main

    with pytest.raises(SystemExit) as info:  # a usage error: main() words it as one line
        main([str(a) for a in args] + ["--kv-cache", "FP8"])
    out, err = capsys.readouterr()
    assert info.value.code == 2 and out == "", out
    (line,) = err.splitlines()
    assert line.startswith("error: Invalid value for '--kv-cache': 'FP8' is not one of "
                           "'bf16', 'int8'. (see ") and line.endswith(f" {command} --help)"), err


@pytest.mark.parametrize("value", ["REFERENCE", "Reference"])
def test_the_attention_flag_is_case_insensitive(value, tiny_ckpt):
    """--attention REFERENCE runs the reference backend, as --kv-cache INT8 is int8; an unknown
    backend is still refused, naming the flag."""
    result = invoke("generate", tiny_ckpt, "hi", *FAST, "--attention", value, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["attention"] == "reference"
    bad = invoke("generate", tiny_ckpt, "hi", *FAST, "--attention", "FLASH")
    assert bad.exit_code == 2 and "'FLASH' is not one of" in bad.output, bad.output


@pytest.mark.parametrize("value,on", [("ON", True), ("On", True), ("OFF", False)])
def test_the_speculate_flag_is_case_insensitive(value, on, tiny_ckpt):
    """--speculate ON is on (it notes that a presence penalty turns it off, which only on does),
    OFF is off; an unknown value is still refused."""
    result = invoke("generate", tiny_ckpt, "hi", *FAST, "--speculate", value,
                    "--presence-penalty", "1")
    assert result.exit_code == 0, result.output
    note = "note: --speculate on does nothing with --presence-penalty"
    assert (note in result.stderr) == on, result.stderr
    bad = invoke("generate", tiny_ckpt, "hi", *FAST, "--speculate", "MAYBE")
    assert bad.exit_code == 2 and "'MAYBE' is not one of" in bad.output, bad.output


@pytest.mark.parametrize("kw,words", [
    ({"page_size": 48}, "page_size must be one of 16, 32, 64, 128, got 48"),
    ({"ctx": 0}, "ctx must be"), ({"prefill_chunk": 0}, "prefill_chunk must be"),
    ({"device": "tpu"}, "device must be cuda, cuda:N or cpu"),
])
def test_the_library_names_the_parameter(kw, words):
    """From Python the same check names the keyword the caller passed."""
    from infer.config import EngineConfig
    from infer.errors import OptionError

    with pytest.raises(OptionError) as info:
        EngineConfig("m", **kw)
    assert str(info.value).startswith(words)
    assert not str(info.value).startswith("--")


@pytest.mark.parametrize("args,words", [
    (["--lengths", "200k"], "a prompt of 204,800 tokens plus 128 new tokens (--tokens) is "
                            "beyond the largest context the model supports (131,072 tokens)"),
    (["--lengths", "4k,100000", "--ctx", "64k"], "a prompt of 100,000 tokens plus 128 new "
                                                 "tokens (--tokens) does not fit in --ctx 65,536"),
    (["--ctx", "4k", "--tokens", "100000"], "--ctx 4,096 leaves no room for a prompt and "
                                            "100,000 new tokens"),
])
def test_bench_length_errors_group_their_token_counts(args, words, tiny_ckpt):
    """Token counts in bench's errors read as in the other commands' (``131,072``): no
    ``--lengths 131072`` (nor ``--lengths 131,072``, which reads as two lengths)."""
    result = invoke("bench", tiny_ckpt, "--device", "cpu", *args)
    line = result.stderr.strip().splitlines()[-1]  # after the note when --ctx turns YaRN on
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert line.startswith("error: ") and words in line, line


@pytest.mark.parametrize("case,words", [
    ("ctx", "--ctx 1,022,976 is beyond the largest context this checkpoint supports, 131,072 "
            "tokens (40,960 native positions, 131,072 with YaRN factor 4 over 32,768): lower "
            "--ctx to at most 131,072 (128k)"),
    ("part-tokens", "longer than the context of 2,048 tokens, and cannot be summarized in "
                    "parts: --ctx 2,048 is too small to summarize a text in parts with part "
                    "summaries of 1,500 tokens (--part-tokens): raise --ctx to at least "),
    ("final", "the final summary's budget (1,900 tokens, --max-new-tokens) does not fit in the "
              "context of 2,048 tokens next to its combining prompt and the part summaries (up "
              "to 64 tokens each, --part-tokens): lower --max-new-tokens to at most 1,"),
    ("host", "--ctx 131,072 with --kv-cache bf16 (float32 on the CPU) does not fit in host "
             "memory"),
])
def test_context_and_capacity_errors_group_their_token_counts(case, words, tiny_ckpt, texts_dir,
                                                               monkeypatch):
    """--ctx past the checkpoint (models/context.py), a summary in parts that cannot fit
    (infer/summary_prompts.py, infer/ui/summary_view.py) and the host-memory check
    (infer/capacity.py) read their counts grouped, as check_fits' messages do."""
    import infer.capacity

    text = texts_dir / "pep-0498-literal-string-interpolation.txt"  # ~6,500 tokens
    summarize = ["summarize", text, "--model", tiny_ckpt, "--device", "cpu", "--ctx", "2k"]
    args = {"ctx": ["generate", tiny_ckpt, "hi", "--device", "cpu", "--ctx", "1022976"],
            "part-tokens": [*summarize, "--part-tokens", "1500"],
            "final": [*summarize, "--part-tokens", "64", "--max-new-tokens", "1900"],
            "host": ["generate", tiny_ckpt, "hi", "--device", "cpu", "--ctx", "128k"]}[case]
    monkeypatch.setattr(infer.capacity, "available_host_bytes", lambda: 64 << 20)
    result = invoke(*args)
    line = result.stderr.strip().splitlines()[-1]  # after the note when --ctx turns YaRN on
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert line.startswith("error: ") and words in line, line
    if case == "host":  # the largest contexts that fit: grouped too
        assert re.search(r"largest context that fits is \d{1,3}(,\d{3})* tokens", line), line


def test_a_summary_prompt_as_long_as_the_context_is_not_called_longer(tiny_ckpt, tmp_path):
    """summarize at --ctx equal to the prompt said "the prompt is 7,401 tokens, longer than the
    context of 7,401": it is split (no room for a reply token) and is worded so."""
    path = tmp_path / "text.txt"
    path.write_text("word " * 300, encoding="utf-8")
    flags = ["summarize", path, "--model", tiny_ckpt, "--device", "cpu"]
    first = invoke(*flags, "--ctx", "64", "--no-split")
    n = int(re.search(r"the prompt is ([\d,]+) tokens", first.stderr).group(1).replace(",", ""))
    result = invoke(*flags, "--ctx", n, "--part-tokens", "1500")
    assert_one_line_error(result, 2, f"the prompt is {n:,} tokens, which leaves no room for a "
                          f"reply in the context of {n:,} tokens, and cannot be summarized in "
                          "parts")
