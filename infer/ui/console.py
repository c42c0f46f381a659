"""The command line's consoles and its error/exit plumbing.

Owns where output goes and how failures end a command. ``UI`` holds the two rich consoles (the
reply on stdout, or on stderr under ``--json``; everything else on stderr). ``errors`` turns an
exception into one line on stderr (plus ``{"error", "exit_code"}`` on stdout with ``--json``) and
an exit code: 2 bad input, 1 runtime failure, 130 Ctrl-C (before the command's work began, its
result cut before it began: ``infer.ui.startup``), 0 for a closed stdout. Writes to stdout go
through ``CheckedOutput``, so that a stdout that cannot be written (a full disk, ``> /dev/full``) is
told apart from other OSErrors: ``error: cannot write output: <reason>``, exit 1; so is a stdout
closed from the start (``>&-``): ``cannot write output: standard output is closed``. A stderr
closed from the start (``2>&-``) is devnull instead (``devnull_stderr``): its text is dropped.
``click_exceptions`` finds the click exceptions typer raises, for ``entry``. Used by ``cli.py``
and the rest of ``infer/ui/``; no tensor math here.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import traceback
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape

from infer.errors import NonFiniteLogits
from infer.ui.output_encoding import json_line
from infer.ui.startup import Startup, not_begun
from models.hub import HubUnreachableError

if TYPE_CHECKING:
    from infer.ui.options import Options

# Runtime failures (exit 1) whose message already says what happened and what to do.
KNOWN_FAILURES: tuple[type[BaseException], ...] = (HubUnreachableError, NonFiniteLogits,
                                                    MemoryError)


class OutputError(Exception):
    """Standard output cannot be written: a full disk or ``/dev/full`` (ENOSPC), an I/O error.

    ``str()`` is the one-line message, ``cannot write output: <reason>``. A closed pipe is not
    one: it stays a BrokenPipeError (the reader chose to stop; the command exits 0 quietly)."""

    def __init__(self, error: OSError):
        super().__init__(f"cannot write output: {error.strerror or error}")


class CheckedOutput:
    """A text stream (stdout) whose ``write`` and ``flush`` raise OutputError for an OSError other
    than BrokenPipeError; every other attribute is the stream's."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        return self._checked(self.stream.write, text)

    def flush(self) -> None:
        self._checked(self.stream.flush)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)

    @staticmethod
    def _checked(call, *args):
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise OutputError(e) from e


def checked_stdout() -> CheckedOutput:
    """``sys.stdout`` as a CheckedOutput (itself when it is one already).

    Raises:
        OutputError: there is no stdout (the command started with it closed, ``>&-``, and Python
            set ``sys.stdout`` to None): the output would be lost, as ``print`` and rich drop it.
    """
    out = sys.stdout
    if out is None:
        raise OutputError(OSError(errno.EBADF, "standard output is closed"))
    return out if isinstance(out, CheckedOutput) else CheckedOutput(out)


def devnull_stderr():
    """A text stream on devnull for ``sys.stderr`` when there is none: the command started with
    stderr closed (``2>&-``) and Python set ``sys.stderr`` to None, which ``print_error``, rich's
    ``Console(stderr=True)`` and tracebacks would fail on; the side channel's text is dropped and
    the reply on stdout and the exit code stand. File descriptor 2, if closed too, becomes devnull,
    so that a file opened later does not take it (and get what C code writes to stderr).
    None when ``sys.stderr`` is there (nothing to do); the caller closes the stream."""
    if sys.stderr is not None:
        return None
    fd = os.open(os.devnull, os.O_WRONLY)
    try:
        os.fstat(2)
    except OSError:  # fd 2 is closed
        if fd != 2:
            os.dup2(fd, 2)
            os.close(fd)
            fd = 2
    return open(fd, "w", encoding="utf-8", closefd=fd != 2)  # noqa: SIM115 - the caller closes


class StdoutConsole(Console):
    """The rich console on stdout: a closed pipe raises BrokenPipeError, which ``errors`` turns
    into a quiet exit 0, where rich's default exits 1 (``SystemExit(1)``)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True  # drop what is still buffered
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


class SideStream:
    """``sys.stderr`` (looked up at each call: tests swap it) as the side channel it is: a write
    or flush that fails with an OSError other than a closed pipe (a full disk, ``2>/dev/full``)
    is dropped, so the reply or the ``--json`` object on stdout, and the exit code, still tell.
    A BrokenPipeError goes on to the console's ``on_broken_pipe``."""

    def write(self, text: str) -> int:
        return self._tried(lambda: sys.stderr.write(text), len(text))

    def flush(self) -> None:
        self._tried(sys.stderr.flush, None)

    def __getattr__(self, name: str):
        return getattr(sys.stderr, name)

    @staticmethod
    def _tried(call, dropped):
        try:
            return call()
        except BrokenPipeError:
            raise
        except OSError:
            return dropped


class StderrConsole(Console):
    """The rich console on stderr (``SideStream``): when its reader goes away (``2>&1 >out.json |
    head``) it goes quiet and the command goes on, since stdout (the reply, the ``--json``
    object) may still be read; rich's default would exit 1 there, and a BrokenPipeError would
    end the command as a closed stdout does. A stderr that cannot be written drops the text."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        quiet_stream(sys.stderr)  # later writes (warnings, the error line) go nowhere too


class UI:
    """The two consoles: ``text`` gets the reply, ``err`` everything else (stderr); ``startup``:
    how far ``command`` got before its work began (``infer.ui.startup``)."""

    def __init__(self, opts: Options, command: str = ""):
        self.opts = opts
        self.startup = Startup(command)
        self.out = StdoutConsole(file=checked_stdout(), highlight=False, soft_wrap=True)
        self.err = StderrConsole(file=SideStream(), highlight=False, soft_wrap=True)
        self.text = self.err if opts.json else self.out

    def warn(self, msg: str) -> None:
        self.err.print(f"[yellow]warning:[/] {escape(msg)}")

    def note(self, msg: str) -> None:
        """One line of information on stderr (not a warning: nothing is wrong)."""
        self.err.print(f"[dim]note: {escape(msg)}[/]")

    def emit_json(self, obj: dict) -> None:
        self.out.file.write(json_line(obj, self.out.file))
        self.out.file.flush()

    def status(self, msg: str):
        return self.err.status(msg) if self.err.is_terminal else nullcontext()


def print_json(obj: dict) -> None:
    """One JSON object as one line on stdout (OutputError if stdout cannot be written)."""
    out = checked_stdout()
    out.write(json_line(obj, out))
    out.flush()


def print_error_json(obj: dict) -> None:
    """The ``--json`` copy of an error on stdout, if stdout can take it: when it cannot (full, or
    its reader gone) the line on stderr and the exit code stand alone."""
    try:
        print_json(obj)
    except (OutputError, BrokenPipeError):
        quiet_stdout()


def print_error(msg: str, code: int, as_json: bool) -> None:
    """The one-line error on stderr; with ``--json`` also ``{"error", "exit_code"}`` on stdout.
    A stderr that cannot be written (``2>/dev/full``) leaves the exit code to tell."""
    with contextlib.suppress(OSError):
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"[bold red]error:[/] {escape(msg)}")
    if as_json:
        print_error_json({"error": msg, "exit_code": code})


def error_message(e: BaseException, debug: bool) -> tuple[str, bool]:
    """``(one-line message, is bad input)`` for an exception (bad input: exit 2, else 1; a file
    or folder the OS would not let us reach is bad input).

    A runtime failure we expect and word for the user (``KNOWN_FAILURES``) reads as its message
    alone; any other one is named by its class, with the ``--debug`` hint."""
    bad_input = isinstance(e, (ValueError, NotImplementedError, FileNotFoundError,
                               PermissionError))
    msg = " ".join(str(e).split()) or type(e).__name__
    if isinstance(e, PermissionError) and e.filename is not None:  # a folder on the way that may
        # not be searched, say: the OS's wording, not Python's "[Errno 13]"
        msg = (f"cannot access {e.filename}: permission denied (check the permissions of it and "
               "of the folders above it)")
    if isinstance(e, RuntimeError) and "can't allocate memory" in msg:  # torch's CPU allocator
        e, msg = MemoryError(), f"out of host memory: {msg}"
    if not bad_input and not isinstance(e, KNOWN_FAILURES):
        msg = f"{type(e).__name__}: {msg}"
        if not debug:
            msg += " (run with --debug for the traceback)"
    return msg, bad_input


def quiet_stdout() -> None:
    """After a BrokenPipeError or an OutputError: point stdout at devnull so the interpreter's flush
    at exit does not fail again (the Python docs' note on SIGPIPE, library/signal.html)."""
    quiet_stream(sys.stdout)


def quiet_stream(stream) -> None:
    """Point ``stream``'s file descriptor at devnull (``quiet_stdout``; stderr when its reader is
    gone); nothing for a stream without one (tests)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (tests)
        pass


@contextmanager
def errors(debug: bool, as_json: bool = False, ui: UI | None = None):
    """Turn exceptions into one line on stderr and an exit code (2 bad input, 1 runtime, 130
    Ctrl-C); with ``as_json`` also one ``{"error", "exit_code"}`` object on stdout. A Ctrl-C
    before the work of ``ui``'s command began is its result cut before it began instead
    (``infer.ui.startup.not_begun``). A closed stdout (BrokenPipeError) exits 0 quietly; one that
    cannot be written (OutputError) exits 1 with ``error: cannot write output: <reason>`` and no
    JSON."""
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except BrokenPipeError:
        quiet_stdout()
        raise typer.Exit(0) from None
    except OutputError as e:
        if debug:
            traceback.print_exc(file=sys.stderr)
        print_error(str(e), 1, as_json=False)
        quiet_stdout()
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        _interrupted(as_json, ui)
    except Exception as e:  # noqa: BLE001 - the CLI boundary: every error becomes one line
        if is_ctrl_c(e):
            _interrupted(as_json, ui)
        if debug:
            traceback.print_exc(file=sys.stderr)
        msg, bad_input = error_message(e, debug)
        print_error(msg, 2 if bad_input else 1, as_json)
        raise typer.Exit(2 if bad_input else 1) from None


def is_ctrl_c(e: BaseException) -> bool:
    """Whether ``e`` is a Ctrl-C: a KeyboardInterrupt, or one in an extension module's import
    (torch, triton are imported by the commands), which pybind11 raises as ImportError
    "initialization failed" caused by the KeyboardInterrupt."""
    return isinstance(e, KeyboardInterrupt) or (isinstance(e, ImportError)
                                                and isinstance(e.__cause__, KeyboardInterrupt))


def _interrupted(as_json: bool, ui: UI | None = None):
    """Ctrl-C: before the work of ``ui``'s command began, ``not_begun``'s report; else
    ``interrupted`` on stderr (and the JSON error object). Exit code 130."""
    if ui is not None and ui.startup.stage is not None:
        not_begun(ui)
    Console(stderr=True, highlight=False).print("[yellow]interrupted[/]")
    if as_json:
        print_error_json({"error": "interrupted", "exit_code": 130})
    raise typer.Exit(130) from None


def click_exceptions():
    """The click exception module typer raises from (typer >= 0.22 vendors click)."""
    import typer.core

    vendored = getattr(typer.core, "_click", None)
    if vendored is not None:
        return vendored.exceptions
    import click.exceptions

    return click.exceptions

