"""infer/bandwidth.py: the read bandwidth measured once per GPU model, cached in a JSON file that
can never break a run (fake measurements, a temporary cache folder; no GPU needed)."""

from __future__ import annotations

import functools
import json
from types import SimpleNamespace

import pytest
import torch

from infer import bandwidth
from infer.bandwidth import CACHE_FILE, cache_dir, read_bandwidth

KEY = "NVIDIA H200 | 143771 MiB | 132 SMs | driver 13000 | cuda 13.0"


class FakeMeasure:
    """A measurement that returns the next of ``values`` and counts its calls."""

    def __init__(self, *values: float):
        self.values, self.calls = list(values), 0

    def __call__(self, device) -> float:
        self.calls += 1
        return self.values.pop(0)


def test_measured_once_then_read_from_the_cache(tmp_path):
    measure = FakeMeasure(4.19e12, 4.31e12)
    assert read_bandwidth("cuda", measure=measure, key=KEY, folder=tmp_path) == 4.19e12
    # a second engine, or a second run: the same figure, not measured again
    assert read_bandwidth("cuda", measure=measure, key=KEY, folder=tmp_path) == 4.19e12
    assert measure.calls == 1
    data = json.loads((tmp_path / CACHE_FILE).read_text())
    assert data["version"] == 1 and data["entries"][KEY]["bytes_per_s"] == 4.19e12
    assert data["entries"][KEY]["measured"].endswith("Z")


def test_each_gpu_model_has_its_own_entry(tmp_path):
    measure = FakeMeasure(4.19e12, 3.0e12)
    assert read_bandwidth("cuda", measure=measure, key=KEY, folder=tmp_path) == 4.19e12
    assert read_bandwidth("cuda", measure=measure, key="NVIDIA H100", folder=tmp_path) == 3.0e12
    entries = json.loads((tmp_path / CACHE_FILE).read_text())["entries"]
    assert {k: v["bytes_per_s"] for k, v in entries.items()} == {KEY: 4.19e12,
                                                                 "NVIDIA H100": 3.0e12}
    assert read_bandwidth("cuda", measure=measure, key=KEY, folder=tmp_path) == 4.19e12
    assert measure.calls == 2


@pytest.mark.parametrize("content", [
    b"", b"{not json", b"\xff\xfe\x00garbage", b"[1, 2]", b'{"version": 99, "entries": {}}',
    b'{"version": 1, "entries": []}', b"[" * 100000,
    json.dumps({"version": 1, "entries": {KEY: {"bytes_per_s": "fast"}}}).encode(),
    json.dumps({"version": 1, "entries": {KEY: {"bytes_per_s": -1.0}}}).encode(),
    json.dumps({"version": 1, "entries": {KEY: {"bytes_per_s": True}}}).encode(),
    json.dumps({"version": 1, "entries": {KEY: {"bytes_per_s": 1e30}}}).encode(),
    json.dumps({"version": 1, "entries": {KEY: 4.19e12}}).encode(),
    b'{"version": 1, "entries": {"' + KEY.encode() + b'": {"bytes_per_s": NaN}}}',
], ids=["empty", "truncated", "binary", "list", "version", "entries-list", "deep", "string",
        "negative", "bool", "huge", "bare-number", "nan"])
def test_a_corrupt_cache_is_measured_again_and_rewritten(tmp_path, content):
    (tmp_path / CACHE_FILE).write_bytes(content)
    measure = FakeMeasure(4.19e12)
    assert read_bandwidth("cuda", measure=measure, key=KEY, folder=tmp_path) == 4.19e12
    assert measure.calls == 1
    entry = json.loads((tmp_path / CACHE_FILE).read_text())["entries"][KEY]
    assert entry["bytes_per_s"] == 4.19e12


def test_other_entries_survive_a_corrupt_one(tmp_path):
    good = {"bytes_per_s": 3.0e12, "measured": "2026-01-01T00:00:00Z"}
    (tmp_path / CACHE_FILE).write_text(json.dumps(
        {"version": 1, "entries": {"other GPU": good, KEY: {"bytes_per_s": None}}}))
    assert read_bandwidth("cuda", measure=FakeMeasure(4.19e12), key=KEY,
                          folder=tmp_path) == 4.19e12
    entries = json.loads((tmp_path / CACHE_FILE).read_text())["entries"]
    assert entries["other GPU"] == good and entries[KEY]["bytes_per_s"] == 4.19e12


@pytest.mark.parametrize("fails", ["mkstemp", "write", "replace"])
def test_an_unwritable_cache_measures_every_time(tmp_path, monkeypatch, fails):
    """A read-only or full cache folder: each run measures, nothing is left behind."""
    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    if fails == "mkstemp":
        monkeypatch.setattr(bandwidth.tempfile, "mkstemp", denied)
    elif fails == "write":
        monkeypatch.setattr(bandwidth.json, "dump", lambda *a, **k: denied())
    else:
        monkeypatch.setattr(bandwidth.os, "replace", denied)
    measure = FakeMeasure(4.19e12, 4.2e12)
    assert read_bandwidth("cuda", measure=measure, key=KEY, folder=tmp_path) == 4.19e12
    assert read_bandwidth("cuda", measure=measure, key=KEY, folder=tmp_path) == 4.2e12
    assert measure.calls == 2 and list(tmp_path.iterdir()) == []  # no temporary file left


@pytest.mark.parametrize("blocker", ["file-as-folder", "folder-as-file"])
def test_a_cache_path_that_is_not_a_file_measures_quietly(tmp_path, blocker):
    if blocker == "file-as-folder":  # a plain file where the cache folder should be
        (tmp_path / "cache").write_text("x")
        folder = tmp_path / "cache"
    else:  # a folder where the cache file should be
        folder = tmp_path
        (folder / CACHE_FILE).mkdir()
    assert read_bandwidth("cuda", measure=FakeMeasure(4.19e12), key=KEY,
                          folder=folder) == 4.19e12
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache" if blocker == "file-as-folder"
                                                          else CACHE_FILE]


def test_the_folder_is_created_on_the_first_write(tmp_path):
    folder = tmp_path / "a" / "b"
    read_bandwidth("cuda", measure=FakeMeasure(4.19e12), key=KEY, folder=folder)
    assert (folder / CACHE_FILE).is_file()


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("INFER_CACHE_DIR", str(tmp_path / "own"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "own"
    monkeypatch.delenv("INFER_CACHE_DIR")
    assert cache_dir() == tmp_path / "xdg" / "infer"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "infer"


def test_default_folder_is_the_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("INFER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(bandwidth, "device_key", lambda device: KEY)
    assert read_bandwidth("cuda", measure=FakeMeasure(4.19e12)) == 4.19e12
    assert KEY in json.loads((tmp_path / CACHE_FILE).read_text())["entries"]


def test_two_engines_print_the_same_ceiling(monkeypatch, tmp_path):
    """Each engine asks once; both get the one cached figure (they used to measure each)."""
    from infer import engine as engine_module

    measure = FakeMeasure(4.0e12, 5.0e12)
    monkeypatch.setattr(engine_module, "read_bandwidth", functools.partial(
        read_bandwidth, measure=measure, key=KEY, folder=tmp_path))
    ceilings = []
    for _ in range(2):
        eng = engine_module.Engine.__new__(engine_module.Engine)  # what the ceiling reads
        eng.device, eng.dtype, eng._bandwidth = torch.device("cuda"), torch.bfloat16, None
        eng.model_config = SimpleNamespace(weight_bytes_per_token=lambda b: 1_000_000 * b)
        eng.pool = SimpleNamespace(bytes_per_position=1000)
        ceilings.append(eng.ceiling_tokens_per_s(100))
    assert ceilings[0] == ceilings[1] == pytest.approx(4.0e12 / (2_000_000 + 100_000))
    assert measure.calls == 1
