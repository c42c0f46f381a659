"""The numpy >= 2.4 fix for Triton's interpreter applies wherever ``kernels`` is imported with
TRITON_INTERPRET=1 (the CLI's ``--attention triton`` on a CPU too), not only under pytest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHECK = """
import triton.runtime.interpreter as interp
before = getattr(interp._patch_lang_tensor, "_numpy24_fix", False)
import kernels.decode_attention
print(before, getattr(interp._patch_lang_tensor, "_numpy24_fix", False))
"""


def _run(interpret: str) -> str:
    env = {**os.environ, "TRITON_INTERPRET": interpret, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", CHECK], env=env, cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


def test_importing_kernels_patches_the_interpreter():
    assert _run("1") == ["False", "True"]


def test_no_patch_without_the_interpreter():
    assert _run("0") == ["False", "False"]
