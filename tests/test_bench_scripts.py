"""The benchmark scripts that CI can smoke-test on the CPU, on a tiny random checkpoint:
``benchmarks/profile_decode.py`` (issue 16's decode-step profile) and
``benchmarks/load_weights.py`` (weight loading GB/s). Their JSON lines keep their keys."""

from __future__ import annotations

import json

import pytest

STEP_KEYS = {"what", "kv_cache", "ctx", "rows", "steps", "sync_wall_us", "activity", "mode",
             "timed_mode",
             "kernel_names", "note", "layers", "mean_cached", "step_wall_us", "gpu_busy_us",
             "kernel_sum_us", "gpu_span_us", "kernels_per_step", "kernels_per_layer",
             "per_layer_kernels", "other_kernels", "gap_us", "gap_fraction", "tokens_per_s",
             "bytes_per_step", "ceiling_tokens_per_s", "ceiling_us_per_step",
             "fraction_of_ceiling"}
KERNEL_KEYS = {"what", "kv_cache", "ctx", "rows", "steps", "activity", "mode", "name",
               "us_per_step", "calls_per_step", "share_of_busy"}


def _lines(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_profile_decode_runs_on_the_cpu(tiny_ckpt_factory, capsys):
    from benchmarks.profile_decode import main

    folder = tiny_ckpt_factory(vocab_size=512)
    records = main(["--ckpt", str(folder), "--ctx", "40,20", "--kv", "bf16,int8", "--steps",
                    "3", "--warmup", "1", "--device", "cpu", "--page-size", "16"])
    assert _lines(capsys) == records  # what it prints is what it returns, one JSON per line
    assert records[0]["what"] == "device" and records[0]["layers"] == 2
    steps = [r for r in records if r["what"] == "step"]
    assert [(r["kv_cache"], r["ctx"]) for r in steps] == [("bf16", 20), ("bf16", 40),
                                                          ("int8", 20), ("int8", 40)]
    for step in steps:
        assert set(step) == STEP_KEYS
        assert step["activity"] == "cpu" and step["mode"] == "eager" and step["kernel_names"]
        assert step["ceiling_tokens_per_s"] is None  # no bandwidth ceiling on the CPU
        assert step["mean_cached"] >= step["ctx"] and step["step_wall_us"] > 0
        assert 0 < step["gpu_busy_us"] and step["kernels_per_step"] > step["layers"]
        assert step["gap_us"] == pytest.approx(step["step_wall_us"] - step["gpu_busy_us"],
                                               abs=0.02)
        kernels = [r for r in records if r["what"] == "kernel" and r["kv_cache"] ==
                   step["kv_cache"] and r["ctx"] == step["ctx"]]
        assert kernels and all(set(k) == KERNEL_KEYS for k in kernels)
        assert sum(k["us_per_step"] for k in kernels) == pytest.approx(step["kernel_sum_us"],
                                                                       rel=1e-3, abs=0.1)
        assert sum(k["calls_per_step"] for k in kernels) == pytest.approx(
            step["kernels_per_step"], abs=0.05)
        # the step's own ops are there, once per layer at least
        assert any("linear" in k["name"] or "mm" in k["name"] for k in kernels)
    bytes_bf16 = {r["ctx"]: r["bytes_per_step"] for r in steps if r["kv_cache"] == "bf16"}
    assert bytes_bf16[40] > bytes_bf16[20]  # more cache read at the longer context


def test_profile_decode_times_the_verify_layout(tiny_ckpt_factory, capsys):
    """--rows 1,4: the same point with a 4-row verify step (one sequence, 4 consecutive
    positions per step), which writes 4 positions a step and so reads more cache."""
    from benchmarks.profile_decode import main

    folder = tiny_ckpt_factory(vocab_size=512)
    records = main(["--ckpt", str(folder), "--ctx", "24", "--kv", "bf16", "--steps", "3",
                    "--warmup", "1", "--device", "cpu", "--page-size", "16", "--rows", "1,4"])
    steps = {r["rows"]: r for r in records if r["what"] == "step"}
    assert sorted(steps) == [1, 4]
    assert steps[4]["mean_cached"] == 24 + 4 * 3 // 2  # the prompt, then 4 positions a step
    assert steps[1]["mean_cached"] == 24 + 3 // 2
    assert all(s["sync_wall_us"] > 0 for s in steps.values())
    per_pos = (steps[4]["bytes_per_step"] - steps[1]["bytes_per_step"]) / (4 * 30 - 25)
    assert per_pos > 0 and per_pos == int(per_pos)  # each row reads its whole context
    assert steps[4]["tokens_per_s"] == pytest.approx(4e6 / steps[4]["step_wall_us"], rel=1e-3)


@pytest.mark.parametrize("rows", ["0", "17", "x"])
def test_profile_decode_rejects_bad_rows(tiny_ckpt_factory, rows):
    from benchmarks.profile_decode import main

    with pytest.raises(SystemExit):
        main(["--ckpt", str(tiny_ckpt_factory(vocab_size=512)), "--rows", rows,
              "--device", "cpu"])


def test_profile_decode_rejects_zero_steps(tiny_ckpt_factory):
    from benchmarks.profile_decode import main

    with pytest.raises(SystemExit):
        main(["--ckpt", str(tiny_ckpt_factory(vocab_size=512)), "--steps", "0"])


def test_load_weights_runs_on_the_cpu(tiny_ckpt_factory, capsys):
    from benchmarks.load_weights import main
    from models import loader

    staged = loader._staged
    main(["--ckpt", str(tiny_ckpt_factory(vocab_size=512, shards=2)), "--device", "cpu",
          "--dtype", "float32", "--reps", "2"])
    assert loader._staged is staged  # the CPU smoke run forces the staged path, then restores
    lines = _lines(capsys)
    assert [r["what"] for r in lines] == ["device", "warm_page_cache", "read", "load",
                                          "load_plain", "load_file"]
    assert lines[0]["files"] == 2
    for r in lines[2:]:
        assert r["gb_per_s"] > 0
    assert all(len(r["runs_s"]) >= 1 for r in lines[3:])
