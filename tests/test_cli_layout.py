"""The `infer` package layout (presentation in ``infer/ui``, the shared options), the help's
layout at 80 columns, and the last-resort error path for non-finite logits, through typer's test
runner on the CPU."""

from __future__ import annotations

import pytest
from cli_helpers import FAST, invoke

pytestmark = pytest.mark.usefixtures("cli_tokenizer_once")


# ---------------------------------------------------------------------------- layout


def test_presentation_lives_in_infer_ui_and_never_imports_cli():
    """DESIGN.md: the engine never imports ``infer/ui/`` or ``cli.py``; ``infer/ui/`` never
    imports ``cli.py`` (no circle)."""
    import ast
    from pathlib import Path

    root = Path(__file__).parents[1] / "infer"

    def imported(path: Path) -> set[str]:
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{a.name}" for a in node.names)
        return names

    for path in root.rglob("*.py"):
        names = imported(path)
        assert "cli" not in names and not any(n.startswith("cli.") for n in names), path
        if "ui" not in path.relative_to(root).parts:
            assert not any(n == "infer.ui" or n.startswith("infer.ui.") for n in names), path
    for gone in ("console", "render", "repl", "textio"):
        assert not (root / f"{gone}.py").exists()


def test_shared_options_needs_opts_and_no_clash():
    from infer.ui.options import Options, shared_options

    def no_opts(model: str):
        pass

    def clash(model: str, ctx: str = "1k", *, opts: Options):
        pass

    with pytest.raises(TypeError, match="opts: Options"):
        shared_options()(no_opts)
    with pytest.raises(TypeError, match="ctx"):
        shared_options()(clash)


@pytest.mark.parametrize("command", ["generate", "summarize", "chat", "bench"])
def test_help_at_80_columns_keeps_names_whole_and_the_help_text_wide(command, monkeypatch):
    """At 80 columns every option name and its negative appear whole (a column too narrow
    folds them mid-word), and every option's help text starts in a column that leaves it at
    least 30 characters: typer's separate column for an on/off pair's negative
    (--no-cuda-graphs) left the Engine panel's help 22 characters in summarize, 24 elsewhere."""
    import re

    import typer

    from cli import app

    monkeypatch.setenv("COLUMNS", "80")
    result = invoke(command, "--help")
    assert result.exit_code == 0, result.output
    rows = result.stdout.splitlines()
    assert max(len(row) for row in rows) <= 80
    params = [p for p in typer.main.get_command(app).commands[command].params
              if p.param_type_name == "option"]
    assert len(params) >= 12
    for param in params:
        for name in [*param.opts, *param.secondary_opts]:
            assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", result.stdout), name
        long = next(name for name in param.opts if name.startswith("--"))
        row = next(r for r in rows if r.startswith(f"│ {long} "))  # its first row
        start = row.index(f" {param.help.split()[0]}", len(long) + 2) + 1
        assert len(row) - 1 - start >= 30, (row, len(row) - 1 - start)  # (right border: 1)
    if command != "bench":  # a pair's default names the side it is on, as typer words it
        side = "think" if command == "chat" else "no-think"
        assert f"[default: {side}]" in result.stdout


def help_panels(command: str) -> dict[str, list[str]]:
    """``infer COMMAND --help``'s panels: title -> the long option names in it, in order."""
    import re

    panels: dict[str, list[str]] = {}
    for row in invoke(command, "--help").stdout.splitlines():
        if title := re.match(r"╭─ (\w+) ─", row):
            names = panels.setdefault(title.group(1), [])
        elif flag := re.match(r"│ (--[\w-]+)", row):
            names.append(flag.group(1))
    return panels


@pytest.mark.parametrize("command,own", [
    ("summarize", ("Summarize", ["--no-split", "--part-tokens", "--batch"])),
    ("bench", ("Bench", ["--tokens", "--lengths", "--speculate"])),
])
def test_a_commands_own_flags_have_its_own_panel(command, own):
    """summarize's --part-tokens (bench's --tokens) are no engine setting: they sit in a panel
    named for the command, first; Engine holds the shared engine flags (and the model)."""
    from infer.ui.options import flag_set

    panels = help_panels(command)
    title, names = own
    assert list(panels)[1:4] == ["Options", title, "Engine"], list(panels)  # after Arguments
    assert panels[title] == names
    engine = ["--" + name.replace("_", "-") for name, _, _ in flag_set(reply=False)
              if name not in ("json", "debug")]  # bench's shared flags: Engine's and these
    assert [n for n in panels["Engine"] if n != "--model"] == engine


@pytest.mark.parametrize("speculate", ["off", "on"])
def test_non_finite_logits_exit_1_with_one_line(tiny_ckpt, monkeypatch, speculate):
    """Weights that are finite but overflow (here: logits forced to NaN) must not print `!!!!`
    with exit 0: the sampler's guard stops the reply with a runtime error."""
    import torch

    from models.qwen3 import Qwen3ForCausalLM

    real = Qwen3ForCausalLM.compute_logits

    def nan_logits(self, hidden):
        return real(self, hidden) * torch.nan

    monkeypatch.setattr(Qwen3ForCausalLM, "compute_logits", nan_logits)
    result = invoke("generate", tiny_ckpt, "hi", *FAST, "--speculate", speculate)
    assert result.exit_code == 1, result.output
    assert "non-finite (NaN or inf) logits" in result.stderr
    assert "NonFiniteLogits" not in result.stderr and "Traceback" not in result.output
