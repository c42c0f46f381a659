"""``benchmarks/gemv_fit.py``: a GEMV's time split into a streaming rate and a fixed cost per
launch (no GPU: JSON lines in, fitted lines out)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.gemv_fit import fit_impl, fit_line, read_records

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {"qkv_proj": (6144, 4096), "o_proj": (4096, 4096), "gate_up_proj": (24576, 4096),
          "down_proj": (4096, 12288), "lm_head": (151936, 4096)}


def _lines(impl: str, stream_gbs: float, fixed_us: float, noise=(0.0, 0.0, 0.0, 0.0, 0.0),
           layers: int = 36) -> list[str]:
    """gemv.py's lines for one impl whose times lie on ``bytes / stream + fixed`` (+ noise)."""
    out = []
    for (proj, (n, k)), eps in zip(SHAPES.items(), noise, strict=True):
        us = n * k * 2 / (stream_gbs * 1e3) + fixed_us + eps
        out.append(json.dumps({"what": "gemv", "proj": proj, "impl": impl, "n": n, "k": k,
                               "layers": 1 if proj == "lm_head" else layers, "us": us}))
    return out


def test_fit_line_recovers_slope_and_intercept():
    a, b = fit_line([(1.0, 5.0), (2.0, 7.0), (4.0, 11.0)])
    assert a == pytest.approx(2.0) and b == pytest.approx(3.0)


def test_fit_line_needs_two_sizes():
    with pytest.raises(ValueError, match="two or more distinct"):
        fit_line([(3.0, 1.0), (3.0, 2.0)])


def test_fit_recovers_stream_rate_and_fixed_cost():
    bandwidth, by_impl = read_records(
        [json.dumps({"what": "bandwidth", "GB/s": 4383.0})] + _lines("ours", 4250.0, 3.1))
    rec = fit_impl(by_impl["ours"], bandwidth)
    assert rec["stream_GB/s"] == pytest.approx(4250.0, rel=1e-9)
    assert rec["fixed_us"] == pytest.approx(3.1, abs=1e-9)
    assert rec["stream_frac_bw"] == pytest.approx(4250.0 / 4383.0)
    assert rec["step_fixed_us"] == pytest.approx(3.1 * 4 * 36)
    assert rec["max_resid_us"] == pytest.approx(0.0, abs=1e-9)
    assert rec["projections"] == list(SHAPES)[:4]  # the lm_head is left out by default


def test_fit_with_noise_reports_its_residual():
    noise = (0.3, -0.2, 0.0, 0.1, 0.0)
    _, by_impl = read_records(_lines("ours", 4250.0, 3.1, noise))
    rec = fit_impl(by_impl["ours"], None)
    assert rec["max_resid_us"] > 0.05
    assert abs(rec["fixed_us"] - 3.1) < 0.5
    assert "stream_frac_bw" not in rec  # no bandwidth line


def test_lm_head_in_the_fit_when_asked():
    lines = _lines("ours", 4250.0, 3.1, noise=(0.0, 0.0, 0.0, 0.0, -20.0))
    _, by_impl = read_records(lines)
    without = fit_impl(by_impl["ours"], None)
    with_head = fit_impl(by_impl["ours"], None, lm_head=True)
    assert "lm_head" in with_head["projections"] and "lm_head" not in without["projections"]
    assert with_head["stream_GB/s"] > without["stream_GB/s"]  # the faster lm_head pulls it up


def test_failed_tiles_and_one_size_are_errors_not_fits():
    lines = [json.dumps({"what": "gemv", "proj": "qkv_proj", "impl": "ours_8x", "n": 6144,
                         "k": 4096, "us": 15.0}),
             json.dumps({"what": "gemv", "proj": "o_proj", "impl": "ours_8x",
                         "error": "out of resources"})]
    _, by_impl = read_records(lines)
    rec = fit_impl(by_impl["ours_8x"], None)
    assert rec["error"] == "needs two or more distinct weight sizes"
    assert "fixed_us" not in rec


def test_command_line(tmp_path):
    path = tmp_path / "gemv.jsonl"
    path.write_text("\n".join([json.dumps({"what": "bandwidth", "GB/s": 4000.0}),
                               "not json, a log line"]
                              + _lines("ours", 3900.0, 2.5) + _lines("cublas", 3500.0, 4.0))
                    + "\n")
    run = subprocess.run([sys.executable, "benchmarks/gemv_fit.py", str(path)], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    recs = {r["impl"]: r for r in map(json.loads, run.stdout.splitlines())}
    assert set(recs) == {"ours", "cublas"}
    assert recs["ours"]["fixed_us"] == pytest.approx(2.5, abs=1e-3)
    assert recs["cublas"]["stream_GB/s"] == pytest.approx(3500.0, rel=1e-3)


def test_command_line_errors(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    run = subprocess.run([sys.executable, "benchmarks/gemv_fit.py", str(empty)], cwd=ROOT,
                         capture_output=True, text=True)
    assert run.returncode == 2 and "no timed gemv lines" in run.stderr
    run = subprocess.run([sys.executable, "benchmarks/gemv_fit.py", str(tmp_path / "none")],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 2 and "cannot read" in run.stderr
