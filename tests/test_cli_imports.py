"""The `infer` command line's imports: `--help`, `--version` and the errors found before the
model is read import no heavy module (torch, triton, tokenizers, ...), `--help` none of the
commands' own modules, a whole `generate` neither sympy nor torch._dynamo, and torch's first
import (``import_torch``) runs without the cyclic collector; each in a fresh process. Ctrl-C
during the start-up imports is in ``test_cli_startup.py``."""

from __future__ import annotations

import pytest
from cli_helpers import FAST

pytestmark = pytest.mark.usefixtures("cli_tokenizer_once")


HEAVY = ("torch", "triton", "tokenizers", "safetensors", "huggingface_hub", "jinja2", "numpy")
HEAVY_AFTER = f"""
import sys
from cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("heavy:" + ",".join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)
"""


@pytest.mark.parametrize("argv", [
    ["--help"], ["--version"], ["generate", "--help"], ["summarize", "--help"], ["chat", "-h"],
    ["generate", "M", "P", "--no-such-flag"], ["generate", "M", " "],
    ["summarize", "{missing}", "--model", "M"], ["summarize", "-", "--part-tokens", "0"],
], ids=["help", "version", "generate-help", "summarize-help", "chat-h", "bad-flag",
        "empty-prompt", "missing-file", "bad-part-tokens"])
def test_help_version_and_early_errors_import_no_heavy_module(argv, tmp_path):
    """`infer --help`, `--version` and the errors found before the model is read take ~0.15 s:
    torch, triton, tokenizers, safetensors, huggingface_hub, jinja2 are imported by the commands
    as they need them (they took ~1.5 s before every --help)."""
    import subprocess
    import sys
    from pathlib import Path

    argv = [a.replace("{missing}", str(tmp_path / "no.txt")) for a in argv]
    proc = subprocess.run([sys.executable, "-c", HEAVY_AFTER, *argv], capture_output=True,
                          text=True, timeout=60, cwd=Path(__file__).parents[1])
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1] == "heavy:", proc.stderr  # the heavy modules imported


IMPORTED_AFTER = """
import sys
from cli import main
try:
    main(sys.argv[2:])
except SystemExit:
    pass
print("imported:" + ",".join(m for m in sys.argv[1].split(",") if m in sys.modules),
      file=sys.stderr)
"""


def imported_after(argv: list[str], modules: tuple[str, ...]) -> str:
    """Which of ``modules`` an ``infer`` run with ``argv`` (a fresh process) has imported."""
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.run([sys.executable, "-c", IMPORTED_AFTER, ",".join(modules), *argv],
                          capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parents[1])
    assert proc.returncode == 0, proc.stderr
    return proc.stderr.splitlines()[-1].removeprefix("imported:")


def test_help_imports_no_command_module():
    """Each command imports its own modules (the reply view, the chat loop, summarize's) when it
    runs: `infer --help` needs none of them."""
    modules = ("infer.summarize", "infer.ui.oneshot", "infer.ui.render", "infer.ui.repl",
               "infer.ui.summary_view", "rich.progress", "rich.live")
    assert imported_after(["--help"], modules) == ""


def test_generate_imports_no_sympy(tiny_ckpt):
    """A whole `infer generate` (load, prefill, decode) imports neither sympy (through
    torch.fx.experimental.symbolic_shapes: ~0.3 s, as Module.to_empty did) nor torch._dynamo."""
    modules = ("sympy", "torch.fx.experimental.symbolic_shapes", "torch._dynamo")
    assert imported_after(["generate", str(tiny_ckpt), "hi", *FAST], modules) == ""


def test_first_torch_import_runs_without_gc_then_freezes():
    """``import_torch``: a fresh process's first ``import torch`` with the cyclic collector
    paused, its objects frozen after, the collector on again; a second call changes nothing."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import gc, sys; from infer.ui.prepare import import_torch; "
            "assert 'torch' not in sys.modules; full = gc.get_stats()[2]['collections']; "
            "t = import_torch(); n = gc.get_freeze_count(); "
            "print(t is sys.modules['torch'], n > 10000, gc.isenabled(), "
            "gc.get_stats()[2]['collections'] == full, import_torch() is t, "
            "gc.get_freeze_count() == n)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).parents[1], check=True).stdout
    assert out.split() == ["True"] * 6
