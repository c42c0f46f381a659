"""``benchmarks/step_timeline.py`` (two kinds of decode step lined up kernel by kernel): its
step cutting and comparison on synthetic timelines, and a CPU smoke run."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from benchmarks.step_timeline import compare, main, step_positions


def _ev(name, start, end):
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end))


def _steps(durs_gaps, steps=2, t0=0.0, period=100.0):
    """Events of ``steps`` steps; each kernel (name, idle before it, duration) back to back."""
    out = []
    for s in range(steps):
        t = t0 + s * period
        for name, idle, dur in durs_gaps:
            t += idle
            out.append(_ev(name, t, t + dur))
            t += dur
    return out


def test_step_positions_means_starts_durations_and_idle():
    ev = _steps([("emb", 0, 2), ("gemv", 1, 5), ("attn", 3, 4)], steps=3)
    p = step_positions(list(reversed(ev)), 3)  # any order
    assert [q["name"] for q in p] == ["emb", "gemv", "attn"]
    assert [q["start"] for q in p] == pytest.approx([0, 3, 11])
    assert [q["dur"] for q in p] == pytest.approx([2, 5, 4])
    assert [q["idle"] for q in p] == pytest.approx([0, 1, 3])


def test_step_positions_counts_no_idle_under_an_overlapping_kernel():
    # a PDL launch starts before its predecessor ends: no idle time before it
    ev = [_ev("a", 0, 10), _ev("b", 5, 12), _ev("c", 15, 16)]
    p = step_positions(ev, 1)
    assert [q["idle"] for q in p] == pytest.approx([0, 0, 3])


def test_step_positions_refuses_unequal_steps():
    with pytest.raises(ValueError, match="equal steps"):
        step_positions(_steps([("a", 0, 1), ("b", 0, 1)]) + [_ev("x", 500, 501)], 2)
    ev = _steps([("a", 0, 1), ("b", 0, 1)])
    ev[-1].name = "c"
    with pytest.raises(ValueError, match="different kernel sequences"):
        step_positions(ev, 2)


def test_compare_finds_where_the_second_falls_behind():
    a = step_positions(_steps([("emb", 0, 2), ("gemv", 1, 5), ("attn", 1, 4), ("pick", 0, 1)]), 2)
    b = step_positions(_steps([("emb", 0, 2), ("gemv", 1, 5), ("attn", 4, 6),
                               ("draw", 0, 3)]), 2)
    c = compare(a, b)
    assert c["matched"] == 3  # the last kernels differ
    assert [x["name"] for x in c["only_a"]] == ["pick"]
    assert [x["name"] for x in c["only_b"]] == ["draw"]
    top = c["drift"][0]
    assert (top["name"], top["after"], top["grow_us"], top["idle_diff_us"]) == \
        ("attn", "gemv", 3.0, 3.0)
    assert c["drift_us"] == pytest.approx(5.0)  # 3 us later, 2 us longer
    by = {k["name"]: k for k in c["by_kernel"]}
    assert by["attn"]["dur_diff_us"] == pytest.approx(2.0) and by["emb"]["grow_us"] == 0


def test_compare_lines_up_kernels_past_an_extra_one_at_the_start():
    # the sampled step starts with copies the greedy one has not: its layers still line up
    a = step_positions(_steps([("emb", 0, 2), ("gemv", 0, 5), ("attn", 0, 4)]), 2)
    b = step_positions(_steps([("fill", 0, 1), ("fill", 0, 1), ("emb", 0, 2), ("gemv", 0, 5),
                               ("attn", 1, 4)]), 2)
    c = compare(a, b)
    assert c["matched"] == 3 and [x["name"] for x in c["only_b"]] == ["fill", "fill"]
    grows = {r["name"]: r["grow_us"] for r in c["drift"]}
    assert grows == {"emb": 2.0, "gemv": 0.0, "attn": 1.0}


def test_step_timeline_runs_on_the_cpu(tiny_ckpt_factory, capsys):
    folder = tiny_ckpt_factory(vocab_size=512)
    records = main(["--ckpt", str(folder), "--ctx", "24", "--steps", "2", "--warmup", "1",
                    "--rounds", "1", "--device", "cpu"])
    assert [json.loads(x) for x in capsys.readouterr().out.splitlines()] == records
    modes = {r["mode"]: r for r in records if r["what"] == "mode"}
    assert set(modes) == {"greedy", "sampled"}
    assert all(m["step_wall_us"] > 0 and m["kernels_per_step"] > 2 for m in modes.values())
    (summary,) = [r for r in records if r["what"] == "summary"]
    assert summary["matched"] > 2  # the layers' ops line up; the picks differ
