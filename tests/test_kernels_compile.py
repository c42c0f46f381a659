"""The decode-path kernels compile for real GPU targets, on a CPU (Triton's bundled ptxas).

The interpreter runs the kernels' Python, not the compiler: an instruction that exists only on
some GPUs (``griddepcontrol``, programmatic dependent launch, sm_90+) passes every CPU test and
fails to compile on an older GPU. ``tests/compile_targets.py`` compiles stage 1, the combine and
the KV store with the constexprs their launchers pick for a target, in a subprocess (this suite
runs under TRITON_INTERPRET=1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("compile_targets.py")


@pytest.mark.parametrize("arch", [80, 90])
def test_decode_kernels_compile_with_pdl_only_on_hopper(arch):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, str(SCRIPT), str(arch)], capture_output=True,
                         text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    res = json.loads(run.stdout.strip().splitlines()[-1])
    hopper = arch >= 90
    assert res == {"arch": arch, "pdl": hopper, "stage1": hopper, "combine": hopper,
                   "store_kv": hopper}
