"""How much host memory a CPU run may still allocate: the kernel's ``MemAvailable``, capped by the
memory limit of the container (cgroup) the process runs in.

A container sees the whole machine's ``/proc/meminfo``, but is OOM-killed at its cgroup's limit:
``available_host_bytes`` is the smaller of the two. The cgroup's room is its limit less its usage,
the usage not counting inactive file pages (the page cache the kernel reclaims before it kills;
``docker stats`` and the kubelet count the same "working set"):

- v2 (unified): ``memory.max`` (``max``: no limit), ``memory.current`` and ``memory.stat``'s
  ``inactive_file``;
- v1: ``memory/memory.limit_in_bytes`` (a huge number: no limit), ``memory/memory.usage_in_bytes``
  and ``memory/memory.stat``'s ``total_inactive_file``.

Each cgroup from the process's own (``/proc/self/cgroup``) up to the root of the mount is read, as
a limit on any ancestor binds too; inside a container's cgroup namespace the own cgroup is the
root. A file that is missing or unreadable, or holds anything but a number, says nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")
_V2 = ("", "memory.max", "memory.current", "inactive_file")  # (folder, limit, usage, stat key)
_V1 = ("memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")


def available_host_bytes(cgroup_root: Path = CGROUP_ROOT,
                         proc_cgroup: Path = PROC_SELF_CGROUP) -> int | None:
    """Host memory available for new allocations (bytes): ``MemAvailable`` from /proc/meminfo
    (else free pages from ``sysconf``), capped by ``cgroup_available_bytes``; None when none of
    them is readable."""
    known = [n for n in (_meminfo_available(), cgroup_available_bytes(cgroup_root, proc_cgroup))
             if n is not None]
    return min(known) if known else None


def cgroup_available_bytes(root: Path = CGROUP_ROOT,
                           proc_cgroup: Path = PROC_SELF_CGROUP) -> int | None:
    """The bytes the process's cgroups let it still allocate (the module docstring): the least,
    over the v2 and v1 memory cgroups from its own up to ``root``, of limit - (usage - inactive
    file pages), at least 0; the limit alone where the usage is unreadable. None when no limit
    is set or readable (not in a cgroup, ``max``, missing files, garbage)."""
    own = _own_cgroups(proc_cgroup)
    rooms = []
    for (folder, limit_file, usage_file, stat_key), path in ((_V2, own.get("v2", "/")),
                                                              (_V1, own.get("v1", "/"))):
        base = Path(root) / folder if folder else Path(root)
        for d in _up_to(base, path):
            limit = _read_int(d / limit_file)
            if limit is None:
                continue
            usage = _read_int(d / usage_file)
            if usage is not None:
                usage -= min(usage, _stat_value(d / "memory.stat", stat_key) or 0)
            rooms.append(max(0, limit - (usage or 0)))
    return min(rooms) if rooms else None


def _meminfo_available() -> int | None:
    """``MemAvailable`` of /proc/meminfo (bytes), else free pages from ``sysconf``; None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (OSError, ValueError, AttributeError):
        return None


def _own_cgroups(proc_cgroup: Path) -> dict[str, str]:
    """The process's cgroup paths from ``proc_cgroup``: ``"v2"`` (the ``0::PATH`` line) and
    ``"v1"`` (the line whose controllers include ``memory``); none when unreadable."""
    own: dict[str, str] = {}
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return own
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        if parts[0] == "0" and parts[1] == "":
            own["v2"] = parts[2]
        elif "memory" in parts[1].split(","):
            own["v1"] = parts[2]
    return own


def _up_to(base: Path, path: str) -> list[Path]:
    """``base / path`` and each of its parents up to ``base``, those that exist (never a path
    outside ``base``)."""
    names = [n for n in path.split("/") if n and n not in (".", "..")]
    dirs = [base.joinpath(*names[:k]) for k in range(len(names), -1, -1)]
    return [d for d in dirs if d.is_dir()]


def _read_int(path: Path) -> int | None:
    """The file's content as a non-negative integer; None if missing, unreadable or not one
    (``max`` included)."""
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isascii() and text.isdigit() else None


def _stat_value(path: Path, key: str) -> int | None:
    """The value of ``key`` in a ``memory.stat`` file (``key value`` lines); None if absent."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].isascii() and parts[1].isdigit():
            return int(parts[1])
    return None
