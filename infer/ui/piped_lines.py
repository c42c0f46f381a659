"""Chat's piped standard input: one line at a time, decoded as ``infer.ui.textio`` decodes a file.

A byte-order mark at the start of the stream picks UTF-8, UTF-16 LE/BE or UTF-32 LE/BE (textio's
``detect_encoding``); without one the bytes are UTF-8. Python's own ``sys.stdin`` decodes with the
locale's encoding, so a UTF-16 file piped in was NUL bytes on every line. The stream is read as
it arrives (one ``read1`` at a time: a chat answers a line before the next is written to the
pipe, so reading never waits for more than the line it returns), lines end at the encoding's
``\\n``, ``\\r\\n`` or ``\\r`` (old Mac files), and each is decoded on its own with
``decode_counted``: invalid sequences become U+FFFD and are counted, as a file's are. A
terminal keeps ``input()`` (line editing): ``piped_lines`` gives None for it.
"""

from __future__ import annotations

import sys
from typing import BinaryIO

from infer.ui.textio import (
    CHUNK_BYTES,
    MAX_INPUT_BYTES,
    STDIN_NAME,
    bom_undecided,
    decode_counted,
    detect_encoding,
)


class PipedLines:
    """The lines of a binary stream, decoded after its byte-order mark (``readline``, the
    interface ``rich.console.Console.input(stream=...)`` reads)."""

    def __init__(self, stream: BinaryIO, limit: int = MAX_INPUT_BYTES):
        """``stream``: the binary stream (``sys.stdin.buffer``); ``limit``: the most bytes one
        line may hold."""
        self._read = getattr(stream, "read1", stream.read)
        self._limit = limit
        self._buf = bytearray()
        self._eof = False
        self.encoding: str | None = None  # the codec, once the first line is asked for
        self.replaced = 0  # invalid byte sequences in the last line readline returned
        self._after_cr = False  # the last line ended at a \r whose next code unit was not read

    def readline(self) -> str:
        """The next line ending in ``\\n`` whatever its line end (none on a last line that lacks
        one); ``""`` at the end.
        Sets ``replaced``.

        Raises:
            ValueError: a line is longer than ``limit`` bytes (``yes | tr -d '\\n'``).
        """
        if self.encoding is None:
            while bom_undecided(self._buf) and self._fill():
                pass
            self.encoding, bom_len = detect_encoding(self._buf)
            del self._buf[:bom_len]
        newline = "\n".encode(self.encoding)  # b"\n", b"\n\0", b"\0\n", b"\n\0\0\0", ...
        width = len(newline)
        if self._after_cr:  # the last line ended at a \r returned at once: a \n now is its \r\n
            while len(self._buf) < width and self._fill():
                pass
            if self._buf[:width] == newline:
                del self._buf[:width]
            self._after_cr = False
        start, ended = 0, True
        while (end := _line_end(self._buf, newline, "\r".encode(self.encoding), start)) < 0:
            if len(self._buf) > self._limit:
                raise ValueError(
                    f"a line of {STDIN_NAME} is longer than {self._limit / (1 << 20):g} MiB, the "
                    "most a chat message may hold: send lines of text")
            start = len(self._buf) - len(self._buf) % width
            if not self._fill():  # the end of the stream: the rest is the last line
                end, ended = len(self._buf), False
                break
        text, self.replaced = decode_counted(bytes(self._buf[:end]), self.encoding)
        crlf = "\r\n".encode(self.encoding)
        if self._buf[end:end + len(crlf)] == crlf:
            del self._buf[:end + len(crlf)]
        else:  # a \n, or a \r: if a \n comes right after it (not read yet), it is this line's
            self._after_cr = self._buf[end:end + width] != newline and ended
            del self._buf[:end + width]
        return text + "\n" if ended else text

    def _fill(self) -> bool:
        """Append what one read returns to the buffer; False at the end of the stream."""
        if not self._eof:
            chunk = self._read(CHUNK_BYTES)
            self._buf += chunk  # (a bytearray: appending a long line's chunks is linear)
            self._eof = not chunk
        return not self._eof


def _line_end(data: bytearray, newline: bytes, cr: bytes, start: int) -> int:
    """Where the first line of ``data`` ends (its ``\\n``, or a ``\\r``: old Mac line ends; a
    ``\\r\\n`` ends at its ``\\r``) from ``start`` on, or -1."""
    ends = [i for i in (_find_aligned(data, newline, start), _find_aligned(data, cr, start))
            if i >= 0]
    return min(ends, default=-1)


def _find_aligned(data: bytearray, newline: bytes, start: int) -> int:
    """Where ``newline`` starts in ``data`` from ``start`` at a multiple of its length (a UTF-16
    ``\\n`` is two bytes at an even offset), or -1."""
    i = data.find(newline, start)
    while i >= 0 and i % len(newline):
        i = data.find(newline, i + 1)
    return i


def piped_lines() -> PipedLines | None:
    """Standard input as ``PipedLines``; None when it is a terminal (``input()`` reads it, with line
    editing) or has no binary buffer under it (a replaced ``sys.stdin``)."""
    stdin = sys.stdin
    if stdin is None or stdin.isatty() or not hasattr(stdin, "buffer"):
        return None
    return PipedLines(stdin.buffer)
