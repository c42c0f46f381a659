"""How text input reaches the model through the `infer` command line (typer's test runner, a tiny
random checkpoint on the CPU): summarize of a file, of stdin, of every text encoding; invalid
bytes replaced with a warning; bad files and prompts longer than the context as one-line errors.

Replies are sampled with a fixed seed, so two runs on the same prompt give the same text: that is
how the input-decoding tests check that every encoding reaches the model as the same prompt.
"""

from __future__ import annotations

import codecs
import json

import pytest
from cli_helpers import FAST, TEXT, assert_one_line_error, invoke, ok_json

from infer.summary_prompts import SUMMARY_PROMPT

pytestmark = pytest.mark.usefixtures("cli_tokenizer_once")


def summary_ids(tok, text: str) -> list[int]:
    messages = [{"role": "user", "content": SUMMARY_PROMPT.format(text=text)}]
    return tok.chat_ids(messages, enable_thinking=False)


# ---------------------------------------------------------------------------- summarize


@pytest.fixture(scope="module")
def plain_summary(tiny_ckpt, tmp_path_factory):
    path = tmp_path_factory.mktemp("plain") / "story.txt"
    path.write_text(TEXT, encoding="utf-8")
    return ok_json(invoke("summarize", path, "--model", tiny_ckpt, *FAST, "--json"))


def test_summarize_file(plain_summary, tok):
    assert plain_summary["prompt_tokens"] == len(summary_ids(tok, TEXT))
    assert plain_summary["input_chars"] == len(TEXT) and plain_summary["replaced_bytes"] == 0
    assert plain_summary["split"] is False  # one reply: the key is there, false
    assert plain_summary["command"] == "summarize"


def test_summarize_batch_on_a_text_that_fits_says_it_does_nothing(tiny_ckpt, tmp_path,
                                                                  plain_summary):
    """``--batch`` sets how many parts decode together; a text that fits makes no parts: a note,
    and the same reply as without it."""
    path = tmp_path / "story.txt"
    path.write_text(TEXT, encoding="utf-8")
    result = invoke("summarize", path, "--model", tiny_ckpt, *FAST, "--json", "--batch", "4")
    assert result.exit_code == 0, result.output
    assert "note: --batch 4 does nothing: the text fits in the context of 1,024 tokens" in \
        result.stderr
    assert json.loads(result.stdout)["text"] == plain_summary["text"]


@pytest.mark.parametrize("flags, note", [
    (["--part-tokens", "64"], "note: --part-tokens 64 does nothing: the text fits"),
    (["--batch", "2", "--part-tokens", "64"],
     "note: --batch 2 and --part-tokens 64 do nothing: the text fits"),
])
def test_summarize_part_flags_on_a_text_that_fits_say_they_do_nothing(tiny_ckpt, tmp_path,
                                                                      plain_summary, flags,
                                                                      note):
    """``--part-tokens`` (like ``--batch``) acts only on parts: on a text that fits, a note and
    the same reply as without it."""
    path = tmp_path / "story.txt"
    path.write_text(TEXT, encoding="utf-8")
    result = invoke("summarize", path, "--model", tiny_ckpt, *FAST, "--json", *flags)
    assert result.exit_code == 0, result.output
    assert note in result.stderr
    assert json.loads(result.stdout)["text"] == plain_summary["text"]


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
    assert "warning: 1 invalid byte sequence in the prompt was replaced" in result.stderr
    assert "warning: 2 invalid byte sequences in --system were replaced" in result.stderr
    messages = [{"role": "system", "content": "be \ufffd\ufffd"},
                {"role": "user", "content": "caf\ufffd"}]
    assert obj["prompt_tokens"] == len(tok.chat_ids(messages, enable_thinking=False))


@pytest.mark.parametrize("system", ["   ", "", " \t\n"])
@pytest.mark.parametrize("command", ["generate", "chat"])
def test_blank_system_prompt_is_refused_as_a_blank_prompt_is(tiny_ckpt, command, system):
    """A whitespace-only (or empty) --system was sent to the model as a system message (or, when
    empty, dropped without a word), while a whitespace-only prompt is refused: exit 2, one line,
    before any model work (chat reads no message)."""
    args = [command, tiny_ckpt, *(["hi"] if command == "generate" else []), "--system", system]
    result = invoke(*args, *FAST, input="hi\n")
    assert_one_line_error(result, 2, "--system is empty: give some text, or leave --system out")
    refused = invoke(*args, *FAST, "--json", input="hi\n")
    assert refused.exit_code == 2
    assert json.loads(refused.stdout) == {"exit_code": 2, "error": "--system is empty: give "
                                          "some text, or leave --system out"}


def test_chat_line_with_invalid_utf8_is_replaced_with_a_warning(tiny_ckpt, tok):
    """A few invalid bytes in a line of text: replaced, with a warning. (Mostly invalid, as
    ``caf\\xe9 \\xff`` is, the line is binary: ``test_cli_chat_input.py``.)"""
    result = invoke("chat", tiny_ckpt, *FAST, "--no-think", "--json",
                    input=b"caf\xe9 au lait \xff\n/exit\n")
    assert result.exit_code == 0, result.output
    assert "warning: 2 invalid byte sequences in the message were replaced" in result.stderr
    obj = json.loads(result.stdout.splitlines()[0])
    ids = tok.chat_ids([{"role": "user", "content": "caf\ufffd au lait \ufffd"}],
                       enable_thinking=False)
    assert obj["prompt_tokens"] == len(ids) and "error" not in obj


@pytest.mark.parametrize("first", ["hi", "/exit"])
def test_a_byte_order_mark_before_piped_chat_input_is_dropped(tiny_ckpt, tok, first):
    """``infer chat MODEL < file`` with a file saved with a UTF-8 BOM: the first message (or
    command) is what follows the mark; a mark later in the input is text."""
    result = invoke("chat", tiny_ckpt, *FAST, "--no-think", "--json",
                    input=codecs.BOM_UTF8 + f"{first}\n\ufeffyo\n".encode())
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    if first == "/exit":
        assert records == []
        return
    ids = tok.chat_ids([{"role": "user", "content": "hi"}], enable_thinking=False)
    assert records[0]["prompt_tokens"] == len(ids) and "error" not in records[0]
    plain = invoke("chat", tiny_ckpt, *FAST, "--no-think", "--json", input=b"hi\nyo\n")
    second = json.loads(plain.stdout.splitlines()[1])
    assert records[1]["prompt_tokens"] > second["prompt_tokens"]  # the same first reply


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
    if needle != "binary":
        assert "give a file holding some text" in result.stderr


def test_summarize_missing_file_and_empty_stdin_exit_2(tiny_ckpt, tmp_path):
    assert_one_line_error(invoke("summarize", tmp_path / "nope.txt", "--model", tiny_ckpt),
                          2, "no such file")
    assert_one_line_error(invoke("summarize", "-", "--model", tiny_ckpt, input=b""),
                          2, "<stdin> is empty: pipe some text in")
    assert_one_line_error(invoke("generate", tiny_ckpt, "-", input=b""),
                          2, "<stdin> is empty: pipe some text in")


def test_prompt_longer_than_ctx_gives_both_counts(tiny_ckpt, tmp_path, tok):
    text = "word " * 200
    path = tmp_path / "long.txt"
    path.write_text(text)
    n = len(summary_ids(tok, text.replace("\r\n", "\n")))
    assert n > 128
    result = invoke("summarize", path, "--model", tiny_ckpt, "--ctx", "128", "--device", "cpu")
    assert_one_line_error(result, 2, f"prompt is {n:,} tokens", "context of 128 tokens", "--ctx")


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
    assert_one_line_error(result, 2, f"prompt is {n:,} tokens", f"reply up to {max_new:,}",
                          f"context of {ctx:,} tokens", f"--ctx {need_k}k", "--max-new-tokens")
    flags[3] = 256 if n < 256 else 512
    small = invoke(*args, *flags, "--max-new-tokens", 0, "--json", input=text)
    obj = ok_json(small)
    assert obj["prompt_tokens"] == n and obj["stop_reason"] in ("context", "stop")


@pytest.mark.parametrize("argv,needle", [
    (["summarize", "~no-such-user-infer/notes.txt", "--model", "{ckpt}"],
     "no such file: ~no-such-user-infer/notes.txt"),
    (["generate", "~no-such-user-infer/model", "hi"],
     "model folder ~no-such-user-infer/model does not exist"),
], ids=["summarize", "generate"])
def test_a_home_of_no_such_user_is_a_missing_path(argv, needle, tiny_ckpt):
    """``~user`` of no such user: Path.expanduser raised RuntimeError, ``error: RuntimeError:
    Could not determine home directory.`` and exit 1."""
    argv = [a.replace("{ckpt}", str(tiny_ckpt)) for a in argv]
    assert_one_line_error(invoke(*argv, *FAST), 2, needle)


@pytest.mark.parametrize("command", ["generate", "summarize", "chat", "bench"])
@pytest.mark.parametrize("loop", ["pair", "self", "on-the-way"])
def test_a_symlink_loop_is_reported_as_one(command, loop, tiny_ckpt, tmp_path):
    """A MODEL or FILE path that is a loop of symbolic links: it was ``model folder ... does not
    exist`` / ``no such file: ...``, as ``Path.exists`` is False there."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b if loop != "self" else a)
    if loop != "self":
        b.symlink_to(a)
    path = a / "x" if loop == "on-the-way" else a
    argv = {"generate": ["generate", path, "hi"], "summarize": ["summarize", path, "--model",
            tiny_ckpt], "chat": ["chat", path], "bench": ["bench", path]}[command]
    result = invoke(*argv, *FAST[:4], input="hi\n")
    assert_one_line_error(result, 2, f"{path} is a symlink loop")
    assert "does not exist" not in result.stderr and "no such file" not in result.stderr


def test_summarize_given_a_model_folder_as_file_says_how(tiny_ckpt, tmp_path):
    """`infer summarize MODEL -m MODEL` (MODEL first, as in generate, chat and bench): the error
    says FILE comes first and the model by --model (`summarize MODEL FILE`, a usage error:
    ``test_cli_edges.test_main_prints_usage_errors_as_one_line``)."""
    assert_one_line_error(invoke("summarize", tiny_ckpt, "--model", tiny_ckpt), 2,
                          "is a model folder: give the text FILE to summarize first")
    assert_one_line_error(invoke("summarize", tmp_path, "--model", tiny_ckpt), 2,
                          "is a folder: give a text file")
    # an empty FILE was Path(""), the current folder: ". is a folder"
    assert_one_line_error(invoke("summarize", "", "--model", tiny_ckpt), 2,
                          "error: FILE is empty: give a text file, or - to read standard input")
