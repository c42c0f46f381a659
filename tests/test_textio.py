"""infer.textio: encodings, line endings, replaced bytes and the input errors of summarize."""

from __future__ import annotations

import codecs
import io

import pytest

from infer.textio import decode_text, detect_encoding, read_text_input

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
    (codecs.BOM_UTF8, "whitespace"),
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


def test_dash_reads_stdin():
    stream = io.BytesIO(codecs.BOM_UTF8 + TEXT.replace("\n", "\r\n").encode())
    assert read_text_input("-", stdin=stream) == (TEXT, 0)
    with pytest.raises(ValueError, match="<stdin> is empty"):
        read_text_input("-", stdin=io.BytesIO(b""))
