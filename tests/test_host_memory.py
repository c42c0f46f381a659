"""infer/host_memory.py: a container's memory limit (cgroup v2 and v1, read from a fake
/sys/fs/cgroup in a temporary folder) caps the available host memory; "max", missing files and
garbage set no limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from infer import capacity
from infer.host_memory import available_host_bytes, cgroup_available_bytes

GIB, MIB = 1 << 30, 1 << 20


def write(folder: Path, **files: str) -> None:
    """Files named as the keyword (``memory_max`` -> ``memory.max``) holding its text."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(text)


@pytest.fixture
def no_proc(tmp_path) -> Path:
    """A /proc/self/cgroup that does not exist: only the root of the fake mount is read."""
    return tmp_path / "no-proc-cgroup"


def test_v2_limit_less_its_working_set(tmp_path, no_proc):
    write(tmp_path, memory_max=f"{GIB}\n", memory_current=f"{256 * MIB}\n",
          memory_stat=f"anon 1000\ninactive_file {64 * MIB}\nactive_file 5\n")
    # the limit less the usage, inactive file pages (reclaimable page cache) not counted
    assert cgroup_available_bytes(tmp_path, no_proc) == GIB - 192 * MIB
    (tmp_path / "memory.stat").unlink()
    assert cgroup_available_bytes(tmp_path, no_proc) == GIB - 256 * MIB
    (tmp_path / "memory.current").unlink()
    assert cgroup_available_bytes(tmp_path, no_proc) == GIB  # the limit alone
    write(tmp_path, memory_current=f"{2 * GIB}")
    assert cgroup_available_bytes(tmp_path, no_proc) == 0  # over the limit: nothing left


@pytest.mark.parametrize("text", ["max\n", "garbage", "", "-5", "1.5e9", "١٢٣"])
def test_v2_no_limit(tmp_path, no_proc, text):
    write(tmp_path, memory_max=text, memory_current="1000")
    assert cgroup_available_bytes(tmp_path, no_proc) is None


def test_missing_files_and_folders(tmp_path, no_proc):
    assert cgroup_available_bytes(tmp_path, no_proc) is None
    assert cgroup_available_bytes(tmp_path / "absent", no_proc) is None
    write(tmp_path, memory_current="1000", memory_stat="inactive_file 10")  # no memory.max
    assert cgroup_available_bytes(tmp_path, no_proc) is None


def test_v1_limit_and_unlimited(tmp_path, no_proc):
    v1 = tmp_path / "memory"
    write(v1, memory_limit_in_bytes=f"{4 * GIB}\n", memory_usage_in_bytes=f"{GIB}\n",
          memory_stat=f"inactive_file 1\ntotal_inactive_file {512 * MIB}\n")
    assert cgroup_available_bytes(tmp_path, no_proc) == 4 * GIB - 512 * MIB
    write(v1, memory_usage_in_bytes="garbage")
    assert cgroup_available_bytes(tmp_path, no_proc) == 4 * GIB
    write(v1, memory_limit_in_bytes="9223372036854771712")  # v1's "no limit"
    assert cgroup_available_bytes(tmp_path, no_proc) == 9223372036854771712
    assert available_host_bytes(tmp_path, no_proc) < 9223372036854771712  # MemAvailable's


def test_own_cgroup_and_its_ancestors(tmp_path):
    """Outside a cgroup namespace the process's cgroup is a sub-folder; a parent's lower limit
    binds too, and a path that is not under the mount falls back to the root."""
    proc = tmp_path / "proc-cgroup"
    proc.write_text("4:memory:/box/job\n0::/box/job\n")
    root = tmp_path / "cg"
    write(root / "box" / "job", memory_max=f"{3 * GIB}", memory_current="0")
    write(root / "box", memory_max=f"{2 * GIB}", memory_current=f"{GIB}")
    assert cgroup_available_bytes(root, proc) == GIB  # the parent: 2 GiB less 1 GiB used
    write(root / "memory" / "box", memory_limit_in_bytes=f"{GIB // 2}")
    assert cgroup_available_bytes(root, proc) == GIB // 2  # v1's limit, lower still
    proc.write_text("0::/../../etc\n")
    assert cgroup_available_bytes(root, proc) is None  # never outside the mount
    proc.write_bytes(b"\xff\xfe garbage")
    assert cgroup_available_bytes(root, proc) is None


def test_available_host_memory_is_capped_by_the_container(tmp_path, no_proc):
    free = available_host_bytes(tmp_path, no_proc)  # no cgroup files: MemAvailable alone
    assert free is not None and free > 64 * MIB
    write(tmp_path, memory_max=f"{64 * MIB}", memory_current=f"{16 * MIB}")
    assert available_host_bytes(tmp_path, no_proc) == 48 * MIB
    assert capacity.available_host_bytes is available_host_bytes  # what the checks read
