"""How a count reads in a message or a stats line: ``counted(1, "token")`` is "1 token",
``counted(1234, "token")`` "1,234 tokens". One home for the plural, imported by the messages of
the engine (``infer/fits.py``) and the command line's lines (``infer/ui/``); ``--json`` keeps
plain numbers."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None, *, grouped: bool = True) -> str:
    """``n`` and ``noun``, singular for exactly 1 and ``plural`` (default ``noun + "s"``)
    otherwise; ``grouped``: thousands separated by commas (``1,234``), else digits alone."""
    number = f"{n:,}" if grouped else str(n)
    return f"{number} {noun if n == 1 else plural or noun + 's'}"
