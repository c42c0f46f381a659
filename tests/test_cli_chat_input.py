"""How piped chat input reaches the model through the `infer` command line (typer's test runner,
a tiny random checkpoint on the CPU): a file in UTF-16 or UTF-32 with a byte-order mark, as
summarize and generate - read it. The line reader itself is tested in ``test_piped_lines.py``;
a UTF-8 BOM, CRLF lines and NUL bytes in ``test_cli_input.py`` and ``test_cli.py``."""

from __future__ import annotations

import json

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
