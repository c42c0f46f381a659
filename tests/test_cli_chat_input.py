"""How piped chat input reaches the model through the `infer` command line (typer's test runner,
a tiny random checkpoint on the CPU): a file in UTF-16 or UTF-32 with a byte-order mark, and
binary input, as summarize and generate - read them. The line reader itself is tested in
``test_piped_lines.py``; a UTF-8 BOM, CRLF lines and NUL bytes in ``test_cli_input.py`` and
``test_cli.py``."""

from __future__ import annotations

import json
import random

import pytest
from cli_helpers import FAST, invoke

pytestmark = pytest.mark.usefixtures("cli_tokenizer_once")

MESSAGE = "héllo 一"  # U+4E00 is 00 4E in UTF-16 LE: a NUL byte right after the BOM


def records(result) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_chat_reads_utf16_and_utf32_with_a_byte_order_mark(codec, tiny_ckpt, tok):
    """``infer chat MODEL < u16.txt``: every line was refused as NUL bytes (and the first warned
    of invalid bytes), exit 2, and the /exit in the file never seen. Now the lines are the same
    messages and commands as in UTF-8: one reply, the same as to the UTF-8 file's, then /exit."""
    text = f"{MESSAGE}\r\n/exit\nnever read\n"
    args = ["chat", tiny_ckpt, *FAST, "--no-think", "--json"]
    result = invoke(*args, input=("\ufeff" + text).encode(codec))
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr and "error" not in result.stderr, result.stderr
    (reply,) = records(result)
    ids = tok.chat_ids([{"role": "user", "content": MESSAGE}], enable_thinking=False)
    assert reply["prompt_tokens"] == len(ids) and "error" not in reply
    (utf8,) = records(invoke(*args, input=text.encode()))
    assert (reply["text"], reply["new_tokens"]) == (utf8["text"], utf8["new_tokens"])


def test_chat_refuses_binary_lines_as_it_refuses_nul_bytes(tiny_ckpt):
    """Random bytes piped in: the lines without NUL bytes were sent to the model as messages,
    with only a warning that bytes were replaced. Now a line that is mostly invalid UTF-8 is
    refused as ``decode_text`` refuses such a file: one error per line, no warning, no reply, the
    chat goes on (the text after it is answered), exit 2."""
    # (no \r: it ends a line too, and a short run between two could be valid text)
    junk = random.Random(0).randbytes(4096).replace(b"\x00", b"").replace(b"\r", b"")
    lines = junk.count(b"\n") + 1
    args = ["chat", tiny_ckpt, *FAST, "--no-think", "--json"]
    every_byte = bytes(range(1, 256)).replace(b"\n", b"").replace(b"\r", b"")  # and 128 invalid
    result = invoke(*args, input=junk + b"\n" + every_byte + b"\nhi\n")
    assert result.exit_code == 2, result.output
    *errors, reply = records(result)
    assert [e["turn"] for e in errors] == list(range(1, lines + 2))
    assert all(e["error"].startswith("the message is not valid UTF-8 (") for e in errors)
    assert all(e["error"].endswith(" characters; binary input?): send text, or convert it "
                                   "first, e.g. iconv -f latin1 -t utf-8") for e in errors)
    assert reply["command"] == "chat" and "error" not in reply
    assert "warning" not in result.stderr and result.stderr.count("binary input?") == lines + 1


@pytest.mark.parametrize("line,codec,binary", [
    (b"\xe9t\xe9", "utf-8", True),  # 2 of 3 characters replaced
    (b"caf\xe9 \xff", "utf-8", True),  # 2 of 6: more than a quarter
    (b"caf\xe9 au lait \xff", "utf-8", False),  # 2 of 14: text with damage, sent with a warning
    # a lone surrogate: 1 of 4 characters (not more than a quarter)
    ("\ufeff\u00e9t\u00e9".encode("utf-16-le") + b"\x00\xd8", "utf-16-le", False),
    ("\ufeff\u00e9t".encode("utf-16-be") + b"\xd8\x00", "utf-16-be", True),  # 1 of 3
])
def test_chat_draws_the_binary_line_where_generate_does(line, codec, binary, tiny_ckpt):
    """A message is binary by the rule ``generate -`` (and summarize) applies to a whole input:
    more than a quarter of its characters replaced (``textio.mostly_invalid``)."""
    chat = invoke("chat", tiny_ckpt, *FAST, "--no-think", "--json",
                  input=line + "\n".encode(codec))
    generate = invoke("generate", tiny_ckpt, "-", *FAST, "--json", input=line)
    assert (chat.exit_code, generate.exit_code) == ((2, 2) if binary else (0, 0)), chat.output
    (obj,) = records(chat)
    if binary:
        assert obj["error"].startswith(f"the message is not valid {codec.upper()} (")
        assert "binary input?" in obj["error"] and "binary file" in generate.stdout
        assert "warning" not in chat.stderr
    else:
        assert "error" not in obj and "invalid byte sequence" in chat.stderr
