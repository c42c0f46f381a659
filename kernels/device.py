"""Device facts the kernel launchers and tile pickers ask for: compute capability, SM count and
whether programmatic dependent launch exists.

One home for them so that a launcher asks once per call and tests or compile scripts can fake a
GPU by replacing ``_capability`` / ``_sm_count`` (``tests/compile_targets.py``). Both are cached
per device index: ``torch.cuda.get_device_capability`` costs a driver call, too much for a
launcher that runs every layer of every step.
"""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=8)
def _capability(device_index: int) -> tuple[int, int]:
    return tuple(torch.cuda.get_device_capability(device_index))


@functools.lru_cache(maxsize=8)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def capability(device: torch.device | str) -> tuple[int, int] | None:
    """``(major, minor)`` compute capability of a CUDA ``device``; None for any other device
    (the CPU, where the kernels run under the Triton interpreter)."""
    device = torch.device(device)
    return _capability(_index(device)) if device.type == "cuda" else None


def sm_count(device: torch.device | str) -> int:
    """Streaming multiprocessors of a CUDA ``device``.

    Raises:
        ValueError: for a device that is not CUDA.
    """
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"sm_count needs a CUDA device, got {device}")
    return _sm_count(_index(device))


def supports_pdl(device: torch.device | str) -> bool:
    """Whether kernels on ``device`` may use programmatic dependent launch (``griddepcontrol``
    exists from sm_90, Hopper, on; older GPUs and the CPU interpreter: False)."""
    cap = capability(device)
    return cap is not None and cap[0] >= 9
