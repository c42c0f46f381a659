"""The `infer` package layout (presentation in ``infer/ui``, the shared options) and the
last-resort error path for non-finite logits, through typer's test runner on the CPU."""

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
