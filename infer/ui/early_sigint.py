"""Ctrl-C in the process's start-up, before a command's own code runs: exit at once, one line.

From ``cli.py``'s first line to the first line of a command (under its ``errors``) no handler of
ours would see a Ctrl-C: the imports of typer and rich, cli's command definitions, typer's building
of the app and its parse of the arguments. ``sigint_exits(True)`` makes SIGINT run
``exit_on_ctrl_c`` there (``interrupted`` on stderr, with ``--json`` the error object on stdout,
exit code 130); ``cli.py`` turns it on for its module and for ``main``'s parse, and each command
turns it off as its ``errors`` block begins. From then on a Ctrl-C before the work began is the
command's (``infer.ui.startup``). ``json_wanted`` tells whether ``--json`` was given, for this
handler and for ``main``'s usage errors, before the arguments are parsed.

NOTE: only the standard library here: ``cli.py`` imports this module before typer, so that the
handler is on during typer's import (``infer/__init__.py`` and ``infer/ui/__init__.py`` import
nothing heavy).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading


def json_wanted(args: list[str]) -> bool:
    """Whether ``--json`` is among the command line's ``args`` (before a ``--``), as a flag."""
    return "--json" in (args[:args.index("--")] if "--" in args else args)


def exit_on_ctrl_c(signum, frame) -> None:
    """SIGINT before a command's own code runs (``sigint_exits``): one line and exit code 130
    (SIGINT's), at once; with ``--json`` also the error object ``errors`` prints for a Ctrl-C, on
    stdout.

    ``os._exit`` rather than a KeyboardInterrupt, which the module being imported may swallow or
    turn into another error (a pybind11 module such as triton's raises ImportError
    "initialization failed"), and which typer's parser turns into a silent exit 130; nothing is
    written or open yet that would need closing. Not the command's own interrupted object
    (``infer.ui.startup.not_begun``): the arguments are not parsed yet, and the modules that make
    it may be the ones being imported."""
    with contextlib.suppress(OSError):  # no stderr: exit all the same
        os.write(2, b"interrupted\n")
    if json_wanted(sys.argv[1:]):
        with contextlib.suppress(OSError):  # no stdout (closed, full): the exit code tells
            os.write(1, b'{"error": "interrupted", "exit_code": 130}\n')
    os._exit(130)


def sigint_exits(on: bool) -> None:
    """``on``: SIGINT runs ``exit_on_ctrl_c``, unless it is ignored (a background job) or handled
    by whoever runs cli (a host program, a test harness), or this is not the main thread (where
    no handler can be set). Off: Python's handler (KeyboardInterrupt) again, if it was ours."""
    if threading.current_thread() is not threading.main_thread():
        return
    if on and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, exit_on_ctrl_c)
    elif not on and signal.getsignal(signal.SIGINT) is exit_on_ctrl_c:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def ignore_sigint_at_exit() -> None:
    """The process is ending (its command's result is out): a later SIGINT is ignored, so that a
    second Ctrl-C (``timeout -s INT`` signals the process and its group: two in a few ms) does
    not print a traceback from inside the interpreter's exit (torch's atexit callbacks). Only
    for the process's own entry (``cli.main`` without ``argv``), in the main thread."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
