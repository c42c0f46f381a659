"""The first JSON line of a benchmark: the device, the library versions and the commit.

The commit is ``$INFER_COMMIT`` when set (a working tree copied to a GPU machine may carry a stale
``.git``, BENCHMARKS.md "Commits"), else ``git rev-parse --short HEAD`` of this repository, else
None. Same fields as ``benchmarks/attention.py``'s device line, plus the host device.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import torch


def commit() -> str | None:
    """The commit the run measures (see the module docstring)."""
    env = os.environ.get("INFER_COMMIT")
    if env:
        return env
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=Path(__file__).parent, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def run_info(device: torch.device | str) -> dict:
    """``{"what": "device", ...}``: GPU name and SM count on CUDA (else the CPU), torch, triton
    and the commit."""
    device = torch.device(device)
    info = {"what": "device", "device": str(device)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(name=props.name, sms=props.multi_processor_count,
                    memory_gib=round(props.total_memory / 2**30, 1))
    else:
        info.update(name=platform.processor() or platform.machine(),
                    threads=torch.get_num_threads())
    try:
        import triton
        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    info.update(torch=torch.__version__, commit=commit())
    return info
