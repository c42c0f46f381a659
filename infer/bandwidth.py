"""The device's read bandwidth: measured once per GPU model, then read from the user's cache.

The decode ceiling (``Engine.ceiling_tokens_per_s``) is bandwidth / bytes read per token, with the
bandwidth measured on the device (DESIGN.md "Measuring speed"). Measuring takes ~0.1 s and its
result moves by a few percent from one run to the next, so the ceiling printed by two engines of
one run differed by up to 3 %. ``read_bandwidth`` measures once per GPU model and keeps the value
in a JSON file::

    $INFER_CACHE_DIR/bandwidth.json            (else $XDG_CACHE_HOME/infer/, else ~/.cache/infer/)
    {"version": 1, "entries": {"<device key>": {"bytes_per_s": 4.19e12, "measured": "<UTC time>"}}}

The key (``device_key``) names what fixes the figure: the device name, its memory and SM count
(a MIG slice differs), the driver and torch's CUDA version. Delete the file to measure again.

The cache is best effort: a missing, corrupt or unwritable file, or an entry that is not a
plausible bandwidth, is measured again (and rewritten when possible); it never fails a run. The
file is replaced atomically (write a temporary file, then ``os.replace``), so a reader never sees
half of it, and entries of other devices written meanwhile are kept.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

CACHE_FILE = "bandwidth.json"
_VERSION = 1
_PLAUSIBLE = (1e9, 1e15)  # bytes/s: outside this an entry is taken as corrupt


def cache_dir() -> Path:
    """Where infer keeps its per-user cache: ``$INFER_CACHE_DIR``, else ``$XDG_CACHE_HOME/infer``,
    else ``~/.cache/infer`` (created only when something is written)."""
    if os.environ.get("INFER_CACHE_DIR"):
        return Path(os.environ["INFER_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "infer"
    return Path.home() / ".cache" / "infer"


def device_key(device: torch.device) -> str:
    """What fixes the measured bandwidth of a CUDA device, as one string, e.g. ``NVIDIA H200 |
    143771 MiB | 132 SMs | driver 13000 | cuda 13.0``."""
    props = torch.cuda.get_device_properties(device)
    get_driver = getattr(torch._C, "_cuda_getDriverVersion", None)  # private, may go away
    driver = get_driver() if get_driver is not None else "unknown"
    return (f"{props.name} | {props.total_memory >> 20} MiB | {props.multi_processor_count} SMs"
            f" | driver {driver} | cuda {torch.version.cuda}")


def measure_read_bandwidth(device: torch.device, nbytes: int = 2 << 30, iters: int = 10
                           ) -> float:
    """Device read bandwidth in bytes/s: median time of a sum over ``nbytes`` of random float32
    (a few GB, as DESIGN.md "Measuring speed" asks: a 256 MB read gave 3.4 TB/s on an H200
    where a 4 GiB one gives 4.19; capped at a quarter of the free memory; never all-zero data),
    timed with CUDA events after a warm-up. CUDA only."""
    free, _ = torch.cuda.mem_get_info(device)
    nbytes = max(64 << 20, min(nbytes, free // 4)) // 4 * 4
    x = torch.rand(nbytes // 4, device=device)
    x.sum()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        x.sum()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del x
    return nbytes / sorted(times)[len(times) // 2]


def read_bandwidth(device: torch.device, *,
                   measure: Callable[[torch.device], float] = measure_read_bandwidth,
                   key: str | None = None, folder: Path | None = None) -> float:
    """The read bandwidth of ``device`` in bytes/s: the cached figure for its GPU model, else
    ``measure(device)``, stored for the next run.

    Args:
        device: a CUDA device.
        measure: the measurement (tests pass a fake one).
        key: the cache key (default ``device_key(device)``).
        folder: the cache folder (default ``cache_dir()``).

    Never raises for the cache's sake: an unreadable or corrupt cache is measured again, and a
    cache that cannot be written is left as it is.
    """
    key = device_key(device) if key is None else key
    path = (cache_dir() if folder is None else Path(folder)) / CACHE_FILE
    entries = _read_entries(path)
    cached = _plausible(entries.get(key))
    if cached is not None:
        return cached
    value = float(measure(device))
    entries = _read_entries(path)  # another process may have added entries meanwhile
    entries[key] = {"bytes_per_s": value,
                    "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    _write_entries(path, entries)
    return value


def _plausible(entry) -> float | None:
    """The entry's bandwidth if it is a finite, plausible number of bytes/s, else None."""
    if not isinstance(entry, dict):
        return None
    value = entry.get("bytes_per_s")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if _PLAUSIBLE[0] <= value <= _PLAUSIBLE[1] else None


def _read_entries(path: Path) -> dict:
    """The cache file's entries; {} when it is missing, unreadable or not our JSON."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # missing, unreadable, not JSON: measure again
        return {}
    if not isinstance(data, dict) or data.get("version") != _VERSION:
        return {}
    entries = data.get("entries")
    return dict(entries) if isinstance(entries, dict) else {}


def _write_entries(path: Path, entries: dict) -> None:
    """Replace the cache file atomically. A folder or file that cannot be written (read-only
    home, full disk, a file where the folder should be) leaves no cache: the figure was measured
    all the same, and the next run measures again."""
    tmp = None
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=CACHE_FILE, suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"version": _VERSION, "entries": entries}, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
        tmp = None
    if tmp is not None:  # written in part: remove the temporary file
        with contextlib.suppress(OSError):
            os.unlink(tmp)
