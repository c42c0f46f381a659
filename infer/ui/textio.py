"""Read the text a user hands to ``infer``: a file, or ``-`` for standard input.

Encodings: a byte-order mark picks UTF-8, UTF-16 LE/BE or UTF-32 LE/BE; without one the bytes are
read as UTF-8. Invalid sequences become U+FFFD and are counted (the caller warns with the count).
Line endings (``\\r\\n``, ``\\r``) become ``\\n``. Empty, whitespace-only and binary input (NUL
characters, or mostly undecodable bytes: ``mostly_invalid``) and missing files raise ``ValueError``
saying what to fix.
Text that is already a ``str`` (a command-line argument, a chat line) may hold the lone surrogates
Python decodes invalid bytes to (surrogateescape): ``replace_surrogates`` turns them into U+FFFD.
A standard input closed from the start (``<&-``) raises ``ValueError`` (``require_stdin``); a
``~user`` of no such user reads as the missing path it is (``models.paths.expand_user``).
``bom_undecided`` and ``decode_counted`` serve a reader of a stream a line at a time (chat's piped
input, ``infer/ui/piped_lines.py``).
"""

from __future__ import annotations

import codecs
import contextlib
import re
import sys
from pathlib import Path
from typing import BinaryIO

from models.paths import check_symlink_loop, expand_user

# Longest BOMs first: the UTF-32 LE BOM starts with the UTF-16 LE one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)

# Above this fraction of replaced characters the input is taken as binary, not as damaged text.
MAX_REPLACED_FRACTION = 0.25
# Input is read in chunks and refused past this size: 128k tokens are about 0.5 MiB of English
# text, so 64 MiB is far beyond any context and ~20 times War and Peace, which summarize splits
# in parts; /dev/zero or `yes |` cannot exhaust the memory.
MAX_INPUT_BYTES = 64 << 20
CHUNK_BYTES = 1 << 20
STDIN_NAME = "<stdin>"  # how standard input is named in messages


# Runs of surrogateescape'd bytes (U+DC80-U+DCFF), and any other lone surrogate.
_ESCAPED_RUN = re.compile("[\udc80-\udcff]+")
_SURROGATE = re.compile("[\ud800-\udfff]")


def replace_surrogates(text: str) -> tuple[str, int]:
    """Replace the lone surrogates in ``text`` with U+FFFD, counting invalid byte sequences.

    Python decodes invalid UTF-8 in ``argv`` and (in a C/UTF-8 locale) in ``stdin`` with
    surrogateescape: each bad byte becomes a lone surrogate U+DC80-U+DCFF, which the tokenizer
    rejects. Each run of such bytes is decoded again as a file would be (``errors="replace"``), so
    the count matches ``decode_text``'s for the same bytes; any other lone surrogate counts one.

    Returns:
        ``(text, n_replaced)``: the text with only valid characters, and how many invalid byte
        sequences were replaced (0 and ``text`` itself when there were none).
    """
    if not _SURROGATE.search(text):
        return text, 0
    count = 0

    def bytes_again(m: re.Match) -> str:
        nonlocal count
        fixed = m.group().encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        count += fixed.count("\ufffd")
        return fixed

    text = _ESCAPED_RUN.sub(bytes_again, text)
    text, n_other = _SURROGATE.subn("\ufffd", text)
    return text, count + n_other


def detect_encoding(data: bytes) -> tuple[str, int]:
    """Return ``(codec name, BOM length in bytes)``; ``("utf-8", 0)`` when there is no BOM."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            return name, len(bom)
    return "utf-8", 0


def bom_undecided(head: bytes) -> bool:
    """Whether more bytes could change what ``detect_encoding`` says of a stream that starts with
    ``head``: ``head`` is shorter than a BOM it begins (``b""``, ``b"\\xff\\xfe"``, which UTF-32 LE
    continues with two NULs, ...). A stream read as it arrives reads on until this is False."""
    return any(len(bom) > len(head) and bom.startswith(head) for bom, _ in _BOMS)


def decode_counted(body: bytes, encoding: str) -> tuple[str, int]:
    """Decode ``body`` (no BOM) with ``encoding``, invalid sequences as U+FFFD.

    Returns:
        ``(text, n_replaced)``: the text, and how many invalid byte sequences were replaced (the
        U+FFFD characters that were in the input are not counted).
    """
    text = body.decode(encoding, errors="replace")
    # U+FFFD that were in the input decode the same both ways; the rest were inserted.
    return text, text.count("\ufffd") - body.decode(encoding, errors="ignore").count("\ufffd")


def mostly_invalid(text: str, n_replaced: int) -> bool:
    """Whether ``text``, decoded with ``n_replaced`` invalid byte sequences replaced, is taken as
    binary rather than as damaged text: more than ``MAX_REPLACED_FRACTION`` of its characters
    were replaced (a file, or one chat message)."""
    return n_replaced > MAX_REPLACED_FRACTION * len(text)


def _give_text(name: str) -> str:
    """What to do about an input without text, for the error message about ``name``."""
    return "pipe some text in" if name == STDIN_NAME else "give a file holding some text"


def decode_text(data: bytes, name: str = "<input>") -> tuple[str, int]:
    """Decode raw bytes to text with ``\\n`` line endings.

    Args:
        data: the raw file contents.
        name: how to call the input in error messages (a path or ``<stdin>``).

    Returns:
        ``(text, n_replaced)``: the decoded text without BOM, and how many invalid byte sequences
        were replaced with U+FFFD (0 for clean input).

    Raises:
        ValueError: the input is empty, whitespace-only or binary.
    """
    if not data:
        raise ValueError(f"{name} is empty: {_give_text(name)}")
    encoding, bom_len = detect_encoding(data)
    body = data[bom_len:]
    if not body:
        raise ValueError(f"{name} is empty (it holds only a byte-order mark): "
                         f"{_give_text(name)}")
    text, n_replaced = decode_counted(body, encoding)
    if "\x00" in text:
        raise ValueError(
            f"{name} looks like a binary file (it contains NUL bytes): give a text file "
            "(UTF-8, or UTF-16 or UTF-32 with a byte-order mark)")
    if mostly_invalid(text, n_replaced):
        raise ValueError(
            f"{name} looks like a binary file ({n_replaced} of {len(text)} characters are not "
            f"valid {encoding.upper()}): if it is text in another encoding, convert it first, "
            "e.g. iconv -f latin1 -t utf-8")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise ValueError(f"{name} holds only whitespace: {_give_text(name)}")
    return text, n_replaced


def read_text_input(path_or_dash: str | Path, stdin: BinaryIO | None = None) -> tuple[str, int]:
    """Read a text file, or standard input when ``path_or_dash`` is ``"-"``.

    Args:
        path_or_dash: a file path, or ``"-"`` for standard input.
        stdin: the binary stream to read for ``"-"`` (default ``sys.stdin.buffer``).

    Returns:
        ``(text, n_replaced)`` as ``decode_text`` returns them.

    Raises:
        ValueError: the file is missing, a symlink loop, a folder or cannot be read, or its
            content is empty, whitespace-only or binary; ``"-"`` with standard input closed.
    """
    if str(path_or_dash) == "-":
        if stdin is None:
            require_stdin("- reads the text from it", "pipe the text in, or give a file")
        stream = stdin if stdin is not None else sys.stdin.buffer
        return decode_text(read_capped(stream, STDIN_NAME), STDIN_NAME)
    if not str(path_or_dash):  # Path("") is ".", the current folder
        raise ValueError("FILE is empty: give a text file, or - to read standard input")
    path = expand_user(path_or_dash)
    check_symlink_loop(path, "a text file, or - to read standard input")
    if not path.exists():
        raise ValueError(f"no such file: {path} (give a text file, or - to read standard input)")
    if path.is_dir():
        model_folder = False
        with contextlib.suppress(PermissionError):  # a folder we may not search: "a folder"
            model_folder = (path / "config.json").is_file()
        if model_folder:
            raise ValueError(f"{path} is a model folder: give the text FILE to summarize first, "
                             "and the model with --model (-m)")
        raise ValueError(f"{path} is a folder: give a text file")
    try:
        with path.open("rb") as f:
            data = read_capped(f, str(path))
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    return decode_text(data, str(path))


def require_stdin(why: str, fix: str) -> None:
    """Raise ValueError ``standard input is closed (<why>): <fix>`` when there is no standard
    input: the command started with it closed (``<&-``) and Python set ``sys.stdin`` to None."""
    if sys.stdin is None:
        raise ValueError(f"standard input is closed ({why}): {fix}")


def read_capped(stream: BinaryIO, name: str, limit: int | None = None) -> bytes:
    """Read a binary stream to its end in chunks, refusing binary or endless input early.

    Args:
        stream: the open binary stream (a file, a device, a pipe).
        name: how to call it in error messages.
        limit: most bytes accepted (default ``MAX_INPUT_BYTES``).

    Returns:
        All the bytes.

    Raises:
        ValueError: the first chunk holds NUL bytes without a UTF-16/UTF-32 byte-order mark
            (binary, e.g. /dev/zero), or the input exceeds ``limit`` (e.g. ``yes |``).
    """
    limit = MAX_INPUT_BYTES if limit is None else limit
    chunks: list[bytes] = []
    total = 0
    # A terminal: at most one raw read per call (a line, or b"" at Ctrl-D). ``read(n)`` would
    # keep reading past the first Ctrl-D until n bytes or a second one.
    tty = getattr(stream, "isatty", None)
    read = stream.read1 if tty is not None and tty() and hasattr(stream, "read1") \
        else stream.read
    while chunk := read(min(CHUNK_BYTES, limit + 1 - total)):
        if not chunks and b"\x00" in chunk and detect_encoding(chunk)[0] == "utf-8":
            raise ValueError(
                f"{name} looks like a binary file (it contains NUL bytes): give a text file "
                "(UTF-8, or UTF-16 or UTF-32 with a byte-order mark)")
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise ValueError(
                f"{name} is larger than {limit / (1 << 20):g} MiB, the most text infer reads "
                "(War and Peace is 3.1 MiB; summarize splits a text in parts up to this size): "
                "give a smaller file")
    return b"".join(chunks)
