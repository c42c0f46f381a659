"""``infer.ui.piped_lines.PipedLines``: chat's piped standard input, a line at a time, decoded after
its byte-order mark as ``infer.ui.textio`` decodes a file (no model, no CLI; the chat through
the command line is in ``test_cli_chat_input.py``)."""

from __future__ import annotations

import io
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from infer.ui.piped_lines import PipedLines

TEXT = "一 héllo\r\n\n/exit\nlast"  # U+4E00 is 00 4E in UTF-16 LE: a NUL right after the BOM
LINES = ["一 héllo\n", "\n", "/exit\n", "last"]  # a \r\n line ends in \n as the others


class Trickle(io.RawIOBase):
    """A stream whose every read returns one byte (a slow pipe)."""

    def __init__(self, data: bytes):
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def read1(self, n: int = -1) -> bytes:
        return self._data.read(1)


def all_lines(lines: PipedLines) -> list[str]:
    out = []
    while line := lines.readline():
        out.append(line)
    return out


@pytest.mark.parametrize("codec,bom", [
    ("utf-8", ""), ("utf-8", "\ufeff"), ("utf-16-le", "\ufeff"), ("utf-16-be", "\ufeff"),
    ("utf-32-le", "\ufeff"), ("utf-32-be", "\ufeff")])
@pytest.mark.parametrize("slow", [False, True], ids=["whole", "byte-by-byte"])
def test_lines_are_decoded_after_the_byte_order_mark(codec, bom, slow):
    data = (bom + TEXT).encode(codec)
    lines = PipedLines(Trickle(data) if slow else io.BytesIO(data))
    assert all_lines(lines) == LINES
    assert lines.encoding == codec and lines.replaced == 0
    assert lines.readline() == ""  # and at the end it stays there


def test_invalid_sequences_are_replaced_and_counted_per_line():
    lines = PipedLines(io.BytesIO(b"caf\xe9 \xff\n\xef\xbf\xbd ok\nend\xe9"))
    assert (lines.readline(), lines.replaced) == ("caf\ufffd \ufffd\n", 2)
    assert (lines.readline(), lines.replaced) == ("\ufffd ok\n", 0)  # a U+FFFD that was there
    assert (lines.readline(), lines.replaced) == ("end\ufffd", 1)
    odd = PipedLines(io.BytesIO("\ufeffhi\n".encode("utf-16-le") + b"x"))  # a byte short
    assert odd.readline() == "hi\n"
    assert (odd.readline(), odd.replaced) == ("\ufffd", 1)


@pytest.mark.parametrize("data", [b"", b"\xff\xfe", b"\xef\xbb\xbf", b"\x00\x00\xfe\xff"])
def test_empty_input_or_only_a_byte_order_mark_is_the_end(data):
    assert PipedLines(io.BytesIO(data)).readline() == ""


def test_a_line_longer_than_the_limit_is_refused():
    lines = PipedLines(io.BytesIO(b"short\n" + b"x" * 100), limit=10)
    assert lines.readline() == "short\n"
    with pytest.raises(ValueError, match="a line of <stdin> is longer than"):
        lines.readline()


def test_each_line_is_returned_as_it_arrives_from_a_pipe():
    """A chat answers a line before the next is written: reading one must not wait for more."""
    r, w = os.pipe()
    with os.fdopen(r, "rb") as stream, os.fdopen(w, "wb", buffering=0) as writer, \
            ThreadPoolExecutor(1) as pool:
        lines = PipedLines(stream)
        try:
            # a \r ends its line at once (it waited for the next byte: was it a \r\n's?), and
            # the \n of a \r\n split across writes is not an empty line
            sent = ["一 first\n", "second\r", "\nthird\r", "fourth\r\n"]
            for i, text in enumerate(sent):
                writer.write((("\ufeff" if i == 0 else "") + text).encode("utf-16-le"))
                want = text.lstrip("\n").rstrip("\r\n") + "\n"
                assert pool.submit(lines.readline).result(timeout=30) == want
        finally:
            writer.close()  # a readline that blocked: the end of the stream frees it


@pytest.mark.parametrize("codec", ["utf-8", "utf-16-le", "utf-32-be"])
@pytest.mark.parametrize("slow", [False, True], ids=["whole", "byte-by-byte"])
def test_old_mac_line_ends_split_lines_too(codec, slow):
    """``printf 'hi\\rthere\\r'``: a \\r alone ends a line (it was one message); a \\r\\n is one
    line end, also when a slow pipe brings its \\n in the next read."""
    bom = "" if codec == "utf-8" else "\ufeff"
    data = (bom + "hi\rthere\r\r\nnext\r\nlast\r").encode(codec)
    lines = PipedLines(Trickle(data) if slow else io.BytesIO(data))
    assert all_lines(lines) == ["hi\n", "there\n", "\n", "next\n", "last\n"]
