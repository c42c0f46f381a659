"""infer.ui.textio: encodings, line endings, replaced bytes and the input errors of summarize."""

from __future__ import annotations

import codecs
import io

import pytest

from infer.ui import textio
from infer.ui.textio import decode_text, detect_encoding, read_text_input

TEXT = "Caf\u00e9 na\u00efve \u201cquoted\u201d \u2014 \u65e5\u672c\u8a9e\nsecond line\n"


@pytest.mark.parametrize("encoding,bom", [
    ("utf-8", b""),
    ("utf-8", codecs.BOM_UTF8),
    ("utf-16-le", codecs.BOM_UTF16_LE),
    ("utf-16-be", codecs.BOM_UTF16_BE),
    ("utf-32-le", codecs.BOM_UTF32_LE),
    ("utf-32-be", codecs.BOM_UTF32_BE),
])
def test_encodings_round_trip(tmp_path, encoding, bom):
    path = tmp_path / "in.txt"
    path.write_bytes(bom + TEXT.encode(encoding))
    assert detect_encoding(path.read_bytes()) == (encoding, len(bom))
    text, n_replaced = read_text_input(path)
    assert text == TEXT  # the BOM is gone, nothing replaced
    assert n_replaced == 0


def test_python_utf16_codec_output(tmp_path):
    # Python's "utf-16" codec writes a BOM in the machine's byte order.
    path = tmp_path / "in.txt"
    path.write_text(TEXT, encoding="utf-16")
    assert read_text_input(path) == (TEXT, 0)


@pytest.mark.parametrize("newline", ["\r\n", "\r", "\n"])
def test_line_endings_become_newlines(newline):
    raw = TEXT.replace("\n", newline).encode("utf-16")
    text, _ = decode_text(raw)
    assert text == TEXT
    assert "\r" not in text


def test_invalid_bytes_counted_and_replaced():
    raw = b"good text " * 5 + b"\xff" + b"more \xc3(" + b"end \xe2\x82"
    text, n_replaced = decode_text(raw)
    assert n_replaced == 3
    assert text.count("\ufffd") == 3
    assert text.startswith("good text") and "more " in text and text.endswith("end \ufffd")


def test_existing_replacement_characters_are_not_counted():
    raw = ("already \ufffd here " * 3).encode("utf-8") + b"\xff"
    text, n_replaced = decode_text(raw)
    assert n_replaced == 1
    assert text.count("\ufffd") == 4


def test_odd_trailing_byte_in_utf16_is_counted():
    raw = "some text here".encode("utf-16") + b"\x41"
    text, n_replaced = decode_text(raw)
    assert n_replaced == 1 and text.startswith("some text here")


@pytest.mark.parametrize("raw,needle", [
    (b"", "empty"),
    (b" \n\t\r\n  ", "whitespace"),
    (codecs.BOM_UTF8, "is empty"),
    (codecs.BOM_UTF16_BE, "is empty"),
    ("  \n".encode("utf-16"), "whitespace"),
    (b"PK\x03\x04\x00\x00\x08\x00text", "binary"),
    (b"abc" + bytes(range(128, 256)), "binary"),
])
def test_bad_content_is_a_value_error(tmp_path, raw, needle):
    path = tmp_path / "bad.bin"
    path.write_bytes(raw)
    with pytest.raises(ValueError, match=needle) as info:
        read_text_input(path)
    assert str(path) in str(info.value)


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        read_text_input(tmp_path / "nope.txt")
    with pytest.raises(ValueError, match="is a folder"):
        read_text_input(tmp_path)


def test_home_of_no_such_user_is_a_missing_file():
    with pytest.raises(ValueError, match="no such file: ~no-such-user-infer/x.txt"):
        read_text_input("~no-such-user-infer/x.txt")


def test_dash_reads_stdin():
    stream = io.BytesIO(codecs.BOM_UTF8 + TEXT.replace("\n", "\r\n").encode())
    assert read_text_input("-", stdin=stream) == (TEXT, 0)
    with pytest.raises(ValueError, match="<stdin> is empty"):
        read_text_input("-", stdin=io.BytesIO(b""))


class _Endless:
    """A stream that never ends (like /dev/zero or `yes |`); counts the bytes handed out."""

    def __init__(self, pattern: bytes):
        self.pattern, self.given = pattern, 0

    def read(self, n: int = -1) -> bytes:
        assert n > 0, "an endless stream must be read in bounded chunks"
        self.given += n
        return (self.pattern * (n // len(self.pattern) + 1))[:n]


def test_endless_zeros_are_binary_after_one_chunk():
    stream = _Endless(b"\x00")
    with pytest.raises(ValueError, match="binary"):
        read_text_input("-", stdin=stream)
    assert stream.given <= textio.CHUNK_BYTES


def test_dev_zero_is_binary():
    with pytest.raises(ValueError, match="binary.*UTF-8, or UTF-16 or UTF-32 with a byte-order"):
        read_text_input("/dev/zero")


def test_endless_text_stops_at_the_cap(monkeypatch):
    monkeypatch.setattr(textio, "MAX_INPUT_BYTES", 3 << 20)
    stream = _Endless(b"y\n")
    with pytest.raises(ValueError, match=r"larger than 3 MiB, the most text infer reads"):
        read_text_input("-", stdin=stream)
    assert stream.given <= (3 << 20) + 1


def test_utf16_with_bom_passes_the_nul_check_and_cap_is_inclusive(tmp_path, monkeypatch):
    data = codecs.BOM_UTF16_LE + ("hello world\n" * 1000).encode("utf-16-le")
    monkeypatch.setattr(textio, "MAX_INPUT_BYTES", len(data))
    monkeypatch.setattr(textio, "CHUNK_BYTES", 4096)  # several chunks
    path = tmp_path / "u16.txt"
    path.write_bytes(data)
    assert read_text_input(path) == ("hello world\n" * 1000, 0)
    path.write_bytes(data + b"x\x00")
    with pytest.raises(ValueError, match="larger than"):
        read_text_input(path)


def test_replace_surrogates_counts_like_decode_text():
    import os

    raw = b"a\xf0\x9f\x98 b\xff\xfe c\xc3( caf\xe9, then some clean text to decode"
    text, n = textio.replace_surrogates(os.fsdecode(raw))  # as argv is decoded (surrogateescape)
    assert (text, n) == decode_text(raw)
    assert n == 5 and "\ufffd" in text
    assert textio.replace_surrogates("x\ud800y") == ("x\ufffdy", 1)  # a lone non-escape surrogate
    assert textio.replace_surrogates("caf\u00e9 \ufffd") == ("caf\u00e9 \ufffd", 0)


def test_terminal_input_ends_at_one_ctrl_d():
    """On a terminal a line then Ctrl-D on a line of its own ends the input (the note says so):
    ``read_capped`` takes one raw read at a time there, where ``read(n)`` would wait past the
    first Ctrl-D for a second one."""
    import os
    import pty
    import re
    import select
    import sys
    import time

    code = ("import sys; from infer.ui.textio import read_capped; "
            "print('GOT', len(read_capped(sys.stdin.buffer, '<stdin>')), flush=True)")
    pid, fd = pty.fork()
    if pid == 0:  # the child: stdin, stdout and stderr are the terminal
        os.execvp(sys.executable, [sys.executable, "-c", code])
    out = b""
    try:
        time.sleep(1.0)  # the child imports and starts reading
        os.write(fd, b"hello\n")
        time.sleep(0.3)
        os.write(fd, b"\x04")  # one Ctrl-D at the start of a line
        deadline = time.time() + 30
        while not re.search(rb"GOT \d+\r?\n", out) and time.time() < deadline:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    out += os.read(fd, 4096)
                except OSError:
                    break
    finally:
        if not re.search(rb"GOT \d+\r?\n", out):
            os.write(fd, b"\x04")  # let a child that waits for a second one end
        os.waitpid(pid, 0)
        os.close(fd)
    assert b"GOT 6" in out, out
