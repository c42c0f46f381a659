"""Child processes for the Gluon experiments' tests: ``run_isolated`` runs a GPU check in a fresh
process under a time limit, so that a kernel that hangs (a spin barrier or an mbarrier phase that
never completes, as untried Gluon kernels may) fails its test instead of stalling the whole GPU
suite; ``compile_facts`` runs a ``tests/compile_*.py`` script (no interpreter: Gluon has none)
and returns the JSON facts it prints."""

from __future__ import annotations

import json
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


def compile_facts(script: str, timeout: float = 300.0) -> dict:
    """The last JSON line that the script ``script`` (a file name in ``tests/``) prints, run
    without ``TRITON_INTERPRET``; the calling test fails with the script's error otherwise."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, str(TESTS / script)], capture_output=True, text=True,
                         env=env, timeout=timeout)
    if run.returncode != 0:
        pytest.fail(f"{script} failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])
