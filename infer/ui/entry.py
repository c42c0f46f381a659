"""The ``infer`` entry point's own plumbing: typer's app run outside its standalone mode.

``run_app`` is what ``cli.main`` does: it runs the app with ``standalone_mode=False`` so that
typer's usage errors (bad flags, unknown options, missing arguments) come back to us and print as
one line on stderr, ``error: <message> (see infer CMD --help)``, exit 2, instead of click's usage
block. It also owns the process's streams around the app: stdout is ``checked_stdout`` (a write
that fails is told apart from other OSErrors), a stderr closed from the start is devnull, a reader
that goes away ends the command quietly (exit 0). The commands' own errors are ``errors`` in
``infer/ui/console.py``; this module sees only what escapes them and typer's own output. It takes
the app as an argument: nothing here imports ``cli.py``.
"""

from __future__ import annotations

import os
import sys

import typer

from infer.ui.console import (
    OutputError,
    checked_stdout,
    click_exceptions,
    devnull_stderr,
    print_error,
    quiet_stdout,
)
from infer.ui.early_sigint import json_wanted, sigint_exits
from infer.ui.output_encoding import replace_unencodable


def _command_named(app: typer.Typer, args: list[str]) -> str:
    """``infer CMD`` for the first command name among ``args`` (a parser error, such as a flag
    without its value, carries no context to name it), else ``infer``."""
    root = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    root = "infer" if not root or root.startswith("-") else root  # python -c: no name
    names = typer.main.get_command(app).commands
    sub = next((a for a in args if a in names), None)
    return f"{root} {sub}" if sub else root


def run_app(app: typer.Typer, argv: list[str] | None = None) -> None:
    """Run ``app`` on ``argv`` (None: ``sys.argv[1:]``), with its usage errors as one line on
    stderr; always ends in ``sys.exit``.

    Bad flags, unknown options and missing arguments print ``error: <message> (see ... --help)``
    and exit 2 (with ``--json`` among the arguments, also ``{"error", "exit_code"}`` on stdout);
    help, ``typer.Exit`` codes and Ctrl-C (130) behave as typer's standalone mode. A closed stdout
    (``| head``, also for ``--help`` and ``--version``) exits 0 quietly; one that cannot be
    written (``> /dev/full``) prints ``error: cannot write output: <reason>`` and exits 1 (the
    commands do the same through ``errors``; here for typer's own output, such as ``--help``), as
    does a stdout closed from the start (``>&-``: ``sys.stdout`` is None), before any work whose
    output would be lost. A stderr closed from the start (``2>&-``) drops what goes there
    (``devnull_stderr``).
    """
    exc = click_exceptions()
    replace_unencodable()
    args = sys.argv[1:] if argv is None else argv
    stdout, stderr = sys.stdout, sys.stderr
    devnull = devnull_stderr()
    try:
        if devnull is not None:
            sys.stderr = devnull
        sys.stdout = checked_stdout()  # typer and click write to sys.stdout
        sigint_exits(True)  # until the command's first line
        rv = app(args=argv, standalone_mode=False)
        sys.stdout.flush()
    except BrokenPipeError:
        quiet_stdout()
        sys.exit(0)
    except SystemExit as e:
        # typer's own output (--help, --version) to a gone reader: rich's console and typer exit 1
        # on a BrokenPipeError; the reader chose to stop, so quiet exit 0 as for a command
        if e.code == 1 and isinstance(e.__context__, BrokenPipeError):
            quiet_stdout()
            sys.exit(0)
        raise
    except OutputError as e:
        print_error(str(e), 1, as_json=False)
        quiet_stdout()
        sys.exit(1)
    except exc.ClickException as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # `infer` alone: the help is shown already
            sys.exit(e.exit_code)
        ctx = getattr(e, "ctx", None)
        where = ctx.command_path if ctx is not None else _command_named(app, args)
        # click 8.2+ words a bad enum choice "Value error, 'x' is not one of ...": drop the prefix
        text = " ".join(e.format_message().split()).replace("Value error, ", "")
        if text.startswith("Got unexpected extra argument") and where.endswith(" summarize"):
            text += ": summarize takes one FILE, and the model with --model (-m)"
        if text.startswith("No such option: --version") and " " in where:  # after a command
            text = f"--version goes before the command: {where.split()[0]} --version"
        msg = text + f" (see {where} --help)"
        print_error(msg, e.exit_code, json_wanted(args))
        sys.exit(e.exit_code)
    except typer.Abort:
        print("Aborted!", file=sys.stderr)
        sys.exit(1)
    finally:
        sigint_exits(False)
        sys.stdout, sys.stderr = stdout, stderr
        if devnull is not None:
            devnull.close()
    sys.exit(rv if isinstance(rv, int) else 0)
