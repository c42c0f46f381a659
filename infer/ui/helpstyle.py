"""How ``--help`` looks: typer's rich help with click's conventions, and ``--version``.

Owns the click classes the app and its commands use (``app = typer.Typer(cls=Group)``,
``@app.command(cls=Command)``): on/off flags show no type (typer prints ``<bool>`` for each), an
on/off pair's negative (``--no-cuda-graphs``) is shown in the type column, which a flag leaves
empty, not in a column of its own (at 80 columns that column left the Engine panel's help text
about 22 characters), and the usage line names the arguments as click does, ``MODEL PROMPT``
(typer writes ``{MODEL} {PROMPT}``). The order of the help panels comes from the order of the
parameters, which ``infer.ui.options.shared_options`` keeps the same in every command (the
command's own panel, if any, then Engine, Sampling, Output). ``version_option`` is the app's
``--version``: the installed package's version.
"""

from __future__ import annotations

import copy
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption


def _without_flag_types(params: list) -> list:
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""  # shown instead of the type: nothing
    return params


def _negative_as_type(param):
    """For the help table only: an on/off pair (``--think/--no-think``) as a copy that shows its
    negative in the type column and has no secondary column to fill (typer gives the secondary
    options a column, as wide as the longest, in every row of the panel). The default still
    reads as typer words it (``[default: no-think]``), from the real option's secondary
    options; any other parameter is returned as it is."""
    if not isinstance(param, TyperOption) or not param.secondary_opts:
        return param
    shown = copy.copy(param)
    shown.metavar, shown.secondary_opts = ",".join(param.secondary_opts), []
    shown._get_default_string = param._get_default_string
    return shown


class Command(TyperCommand):
    """A command whose help shows no type for flags, an on/off pair's negative in the type
    column and ``MODEL PROMPT`` in its usage line."""

    _in_help = False  # format_help is running: get_params gives the help table's copies

    def get_params(self, ctx) -> list:
        params = _without_flag_types(super().get_params(ctx))
        return [_negative_as_type(p) for p in params] if self._in_help else params

    def format_help(self, ctx, formatter) -> None:
        # NOTE: only the help sees the copies: parsing (click's make_parser) needs the
        # secondary options, and --help's callback runs after the parser was built.
        self._in_help = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._in_help = False

    def collect_usage_pieces(self, ctx) -> list[str]:
        # required arguments: "MODEL", not typer's "{MODEL}" (optional ones keep "[...]")
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p
                for p in super().collect_usage_pieces(ctx)]


class Group(TyperGroup):
    """The app: its own flags (``--help``, ``--version``) show no type either."""

    def get_params(self, ctx) -> list:
        return _without_flag_types(super().get_params(ctx))


def package_version() -> str:
    """The installed ``infer`` distribution's version, or ``"unknown"`` when it is not
    installed (run from a source tree)."""
    try:
        return version("infer")
    except PackageNotFoundError:
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"infer {package_version()}")
        raise typer.Exit(0)


VersionOpt = Annotated[bool, typer.Option(
    "--version", help="Show the version and exit.", is_eager=True, callback=_print_version)]
