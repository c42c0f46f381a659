"""Output to a stream whose encoding cannot write every character (``PYTHONIOENCODING=ascii``,
a C or Latin-1 locale): text is written with ``?`` for what the encoding lacks, and JSON with
``\\uXXXX`` escapes (still the same object), instead of a ``UnicodeEncodeError`` in the middle of
a reply, which the commands would report as bad input. JSON escapes lone surrogates on any
stream: the undecodable bytes of a path or an argument (Python's ``surrogateescape``), which no
UTF-8 stream can write and which a lenient one would write as bytes that are not UTF-8."""

from __future__ import annotations

import codecs
import json
import re
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

_SURROGATE = re.compile("[\ud800-\udfff]")


def json_line(obj, stream) -> str:
    """``obj`` as one line of JSON (with its ``\\n``) for ``stream``: other characters than
    ASCII as they are where the stream writes UTF, else as ``\\uXXXX``; lone surrogates always
    escaped (module notes)."""
    text = json.dumps(obj, ensure_ascii=False)
    if not writes_utf(stream) or _SURROGATE.search(text):
        text = json.dumps(obj, ensure_ascii=True)
    return text + "\n"
