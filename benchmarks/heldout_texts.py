"""The training / held-out split of the public-domain texts, shared by the small-model benchmarks.

Rule: each ``*.txt`` file of the folder (sorted by name; CRLF read as LF) is cut at the last
heading line that starts at or before ``HELD_OUT_FROM`` (95 %) of its characters. Everything from
that heading to the end is held out; everything before it is training text. So at least 5 % of
every file is held out, and the cut falls at a chapter (or section) boundary. A heading is a line
that is ``CHAPTER <roman>[.]``, ``<roman>. <TITLE>`` or ``<roman>.`` alone, or a line underlined
in reStructuredText (the next line is only ``=``, ``-``, ``~`` or ``^``, at least 3 of them). A
file without a heading before the mark is cut at the last blank line before it.

On ``shared/data/texts`` this holds out (``tests/test_train_small.py`` checks the first lines):

- ``adventures_of_sherlock_holmes.txt``: from "XII. THE ADVENTURE OF THE COPPER BEECHES" (the
  last story, 9.5 % of the file);
- ``pep-0498-literal-string-interpolation.txt``: from the section "Examples from Python's source
  code" (9.0 %);
- ``pride_and_prejudice.txt``: from "CHAPTER LVIII." (chapters LVIII to LXI, 6.0 %);
- ``war_and_peace.txt``: from "CHAPTER X" of the First Epilogue (its chapters X to XVI and the
  whole Second Epilogue, 5.3 %).

About 62k of the 1.09M tokens are held out.
"""

from __future__ import annotations

import re
from pathlib import Path

HELD_OUT_FROM = 0.95  # the cut is the last heading at or before this fraction of a file
EOS_ID = 151643  # <|endoftext|>: separates documents in a token stream

_HEADING = re.compile(r"^(?:CHAPTER [IVXLC]+\.?|[IVXLC]+\.(?: [A-Z].*)?)$")
_UNDERLINE = re.compile(r"^(?:=+|-+|~+|\^+)$")


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8").replace("\r\n", "\n")


def text_files(folder: str | Path) -> list[Path]:
    """The ``*.txt`` files of ``folder``, sorted by name.

    Raises:
        ValueError: the folder does not exist or holds no ``.txt`` file.
    """
    files = sorted(Path(folder).glob("*.txt"))
    if not files:
        raise ValueError(f"no .txt files in {folder}: pass --texts, a folder of plain texts "
                         "(shared/data/texts)")
    return files


def cut_point(text: str) -> int:
    """Character offset where the held-out part of ``text`` starts (see the module docstring)."""
    mark = int(len(text) * HELD_OUT_FROM)
    lines = text.split("\n")
    best, best_blank, offset = None, None, 0
    for i, line in enumerate(lines):
        if offset > mark:
            break
        stripped = line.rstrip()
        nxt = lines[i + 1].rstrip() if i + 1 < len(lines) else ""
        if _HEADING.match(stripped) or (stripped and len(nxt) >= 3 and _UNDERLINE.match(nxt)):
            best = offset
        if not stripped and offset > 0:
            best_blank = offset
        offset += len(line) + 1
    cut = best if best is not None else best_blank
    return cut if cut is not None else mark


def split_text(text: str) -> tuple[str, str]:
    """(training part, held-out part) of one file's text; their concatenation is ``text``."""
    cut = cut_point(text)
    return text[:cut], text[cut:]


def train_texts(folder: str | Path) -> list[str]:
    """The training part of each text file of ``folder`` (sorted by file name)."""
    return [split_text(_read(p))[0] for p in text_files(folder)]


def held_out_texts(folder: str | Path) -> list[str]:
    """The held-out part of each text file of ``folder`` (sorted by file name): never trained
    on; the evaluations of ``train_small_qwen3.py`` and ``int8_kl.py`` read these."""
    return [split_text(_read(p))[1] for p in text_files(folder)]


def _pieces(text: str, size: int = 1 << 15) -> list[str]:
    """``text`` cut after blank lines into pieces of about ``size`` characters (joined: text)."""
    out, start = [], 0
    while start < len(text):
        end = text.find("\n\n", start + size)
        end = len(text) if end < 0 else end + 2
        out.append(text[start:end])
        start = end
    return out


def token_stream(texts: list[str], tokenizer) -> list[int]:
    """The texts' plain-text token ids, one document after another, each followed by
    ``EOS_ID``. Each text is encoded in pieces cut at blank lines (in parallel, with the
    tokenizer's ``encode_batch``); the ids equal whole-text encoding up to the pre-tokenizer's
    split of a run of whitespace at a piece boundary."""
    ids: list[int] = []
    for text in texts:
        for piece in tokenizer.encode_batch(_pieces(text)):
            ids.extend(piece)
        ids.append(EOS_ID)
    return ids
