"""Run a GPU check in a fresh process under a time limit, so that a kernel that hangs (a spin
barrier or an mbarrier phase that never completes, as untried Gluon kernels may) fails its test
instead of stalling the whole GPU suite. Used by the Gluon experiments' GPU tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


def run_isolated(test_file: str, func: str, *args, timeout: float = 180.0) -> None:
    """Call ``func(*args)`` from the test module ``test_file`` (a path; ``args`` plain Python
    literals) in a new interpreter without ``TRITON_INTERPRET``; fail the calling test with the
    child's error, or after ``timeout`` seconds, killing it."""
    module = Path(test_file).stem
    code = (f"import sys; sys.path[:0] = [{str(TESTS)!r}, {str(REPO)!r}]; "
            f"import {module} as m; m.{func}(*{args!r})")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    try:
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, cwd=REPO, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{func}{args} did not finish in {timeout:.0f} s (a hung kernel?); killed")
    if run.returncode != 0:
        pytest.fail(f"{func}{args} failed:\n{run.stderr[-3000:]}")
