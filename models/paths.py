"""Paths a user typed: ``~`` and ``~user`` expanded as the shell does (``expand_user``), and a
loop of symbolic links told apart from a missing path (``check_symlink_loop``).

``Path.expanduser`` raises RuntimeError for a ``~user`` naming no user on this system; every path
a user hands to ``infer`` or its tools (a text file, a MODEL folder, the random checkpoint's
``--out``) goes through ``expand_user`` instead, so that such a path stays as typed and is reported
as the missing path it is. Here, below ``infer``, so that ``models`` never imports the command
line's ``infer.ui``.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


def expand_user(path: str | Path) -> Path:
    """``Path(path).expanduser()``, except that a ``~user`` naming no user on this system (where
    ``expanduser`` raises RuntimeError) stays as it is: a path that does not exist, reported as
    one (``no such file: ~bob/notes.txt``)."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        return Path(path)


def is_symlink_loop(path: str | Path) -> bool:
    """Whether ``path`` runs into a loop of symbolic links (``ln -s a b; ln -s b a``, or a link
    to itself, there or on the way): ``Path.exists`` says False there, as for a missing path."""
    try:
        os.stat(path)
    except OSError as e:
        return e.errno == errno.ELOOP
    return False


def check_symlink_loop(path: str | Path, what: str) -> None:
    """Raise ValueError when ``path`` runs into a loop of symbolic links (``is_symlink_loop``),
    which would otherwise read as a missing path. ``what`` names what to give instead (``a text
    file``)."""
    if is_symlink_loop(path):
        raise ValueError(f"{path} is a symlink loop (a symbolic link that leads back to itself): "
                         f"give {what}")
