"""How ``--help`` looks: typer's rich help with click's conventions, and ``--version``.

Owns the click classes the app and its commands use (``app = typer.Typer(cls=Group)``,
``@app.command(cls=Command)``): on/off flags show no type (typer prints ``<bool>`` for each), and
the usage line names the arguments as click does, ``MODEL PROMPT`` (typer writes ``{MODEL}
{PROMPT}``). The order of the help panels comes from the order of the parameters, which
``infer.ui.options.shared_options`` keeps the same in every command (Engine, Sampling, Output).
``version_option`` is the app's ``--version``: the installed package's version.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption


def _without_flag_types(params: list) -> list:
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""  # shown instead of the type: nothing
    return params


class Command(TyperCommand):
    """A command whose help shows no type for flags and ``MODEL PROMPT`` in its usage line."""

    def get_params(self, ctx) -> list:
        return _without_flag_types(super().get_params(ctx))

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
