"""Output to a stream whose encoding cannot write every character (``PYTHONIOENCODING=ascii``,
a C or Latin-1 locale): text is written with ``?`` for what the encoding lacks, and JSON with
``\\uXXXX`` escapes (still the same object), instead of a ``UnicodeEncodeError`` in the middle of
a reply, which the commands would report as bad input."""

from __future__ import annotations

import codecs
import sys


def writes_utf(stream) -> bool:
    """Whether ``stream`` encodes text as UTF-8/16/32 (every character), or has no encoding of
    its own (a test's capture, a bytes-free writer)."""
    encoding = getattr(stream, "encoding", None)
    if not encoding:
        return True
    try:
        return codecs.lookup(encoding).name.startswith("utf")
    except LookupError:
        return False


def replace_unencodable() -> None:
    """Set ``errors="replace"`` on ``sys.stdout`` and ``sys.stderr`` where their encoding is not a
    UTF one (and they can be reconfigured)."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None and not writes_utf(stream) and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
