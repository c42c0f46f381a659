"""The benchmark scripts that CI can smoke-test on the CPU, on a tiny random checkpoint:
``benchmarks/profile_decode.py`` (issue 16's decode-step profile),
``benchmarks/load_weights.py`` (weight loading GB/s), ``benchmarks/profile_prefill.py`` (the
prefill by kernel kind); and the argument parsing of ``benchmarks/gemv.py``'s tile sweep. Their
JSON lines keep their keys. ``benchmarks/kernel_gaps.py`` (a step's idle time by its neighbouring
kernels) on a synthetic timeline."""

from __future__ import annotations

import json
from types import SimpleNamespace

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


def test_profile_decode_profiles_a_sampled_step(tiny_ckpt_factory, capsys):
    """--temperature 0.6 --top-k 20 --top-p 0.95 (Qwen3's generation_config): the steps sample,
    so the top-k op is among the step's ops (absent from a greedy step's); a bad value is a
    usage error."""
    from benchmarks.profile_decode import main

    folder = tiny_ckpt_factory(vocab_size=512)
    common = ["--ckpt", str(folder), "--ctx", "24", "--kv", "bf16", "--steps", "2",
              "--warmup", "1", "--device", "cpu", "--page-size", "16"]
    names = {}
    for flags in ([], ["--temperature", "0.6", "--top-k", "20", "--top-p", "0.95"]):
        records = main(common + flags)
        assert records[0]["temperature"] == (0.6 if flags else 0.0)
        names[bool(flags)] = {r["name"] for r in records if r["what"] == "kernel"}
    capsys.readouterr()
    assert any("topk" in n for n in names[True]) and not any("topk" in n for n in names[False])
    with pytest.raises(SystemExit) as e:
        main(common + ["--temperature", "-1"])
    assert e.value.code == 2 and "temperature" in capsys.readouterr().err


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


def test_profile_prefill_runs_on_the_cpu(tiny_ckpt, capsys):
    """benchmarks/profile_prefill.py: the kinds' seconds add up to the busy time, the tiny
    model's matmuls land in ``projections``, and the FLOP counts are the formulas'."""
    from benchmarks.profile_prefill import main

    rec = main(["--ckpt", str(tiny_ckpt), "--tokens", "48", "--chunk", "16", "--device", "cpu"])
    assert _lines(capsys) == [rec]
    assert rec["activity"] == "cpu" and rec["tokens"] == 48 and rec["chunk"] == 16
    assert rec["ttft_s"] > 0 and rec["by_kind_s"]["projections"] > 0
    assert sum(rec["by_kind_s"].values()) == pytest.approx(rec["busy_s"], abs=1e-3)
    assert rec["projection_flop"] > 0 and rec["attention_flop"] > 0
    assert rec["top"] and all(rec["by_kind_s"][kind] >= s > 0 and calls >= 1
                              for _, kind, s, calls in rec["top"])


def test_profile_prefill_kinds_and_flop():
    from types import SimpleNamespace

    from benchmarks.profile_prefill import kind_of, prefill_flop

    assert kind_of("_prefill_attention_kernel") == "attention"
    assert kind_of("nvjet_tst_128x256_64x4_2x1_v_bz_coopB_TNT") == "projections"
    assert kind_of("sm90_xmma_gemm_bf16bf16_bf16f32") == "projections"
    assert kind_of("_gemv_kernel") == "projections"
    assert kind_of("_rmsnorm_kernel") == "norm_rope"
    assert kind_of("_qk_norm_rope_kernel") == "norm_rope"
    assert kind_of("_store_kv_kernel") == "kv_store"
    assert kind_of("void at::native::vectorized_elementwise_kernel<4>") == "activation"
    assert kind_of("Memcpy DtoD (Device -> Device)") == "other"
    # one layer, hidden 4, 2 query heads and 1 KV head of 2, intermediate 8, 3 tokens:
    # q 4x4 + k, v 4x2 each + o 4x4 + gate/up/down 3 x 4x8 = 144 weights, x 2 x 3 tokens;
    # attention 2 x 2 x 2 heads x 2 dims x 3^2 / 2
    cfg = SimpleNamespace(hidden_size=4, num_attention_heads=2, num_key_value_heads=1,
                          head_dim=2, intermediate_size=8, num_hidden_layers=1)
    assert prefill_flop(cfg, 3) == (2.0 * 144 * 3, 2.0 * 2.0 * 2 * 2 * 9 / 2)


def test_gemv_tile_sweep_parses_its_tiles():
    """``benchmarks/gemv.py --tiles``: ``BLOCK_NxBLOCK_KxSTAGES[xWARPS]`` items, empty items
    skipped, anything else a ValueError naming the item (the script turns it into a usage
    error)."""
    from benchmarks.gemv import parse_tiles

    assert parse_tiles("16x128x3, 32x256x5x8,") == [("16x128x3", (16, 128, 3)),
                                                     ("32x256x5x8", (32, 256, 5, 8))]
    assert parse_tiles("") == []
    for bad in ("16x128", "16x128x3x4x2", "16xax3", "0x128x3"):
        with pytest.raises(ValueError, match=bad):
            parse_tiles(bad)


def _event(name: str, start: float, end: float) -> SimpleNamespace:
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end))


def test_kernel_gaps_charge_each_idle_interval_to_its_neighbours():
    from benchmarks.kernel_gaps import idle_gaps

    step = [("gemv", 0, 10), ("norm", 9, 12),  # overlapping (PDL): no gap between them
            ("gemv", 15, 20),  # 3 us after norm ended the stretch
            ("long", 20, 40), ("short", 21, 25),  # 'long' ends the stretch, not 'short'
            ("topk", 45, 47), ("topk", 50, 52)]  # 5 after 'long', 3 between the two topk
    events = [_event(n, s + 100 * i, e + 100 * i) for i in range(2) for n, s, e in step]
    gaps = idle_gaps(events, steps=2)
    by_pair = {(g["before"], g["after"]): g for g in gaps}
    assert by_pair[("long", "topk")] == {"before": "long", "after": "topk", "us_per_step": 5.0,
                                         "per_step": 1.0}
    assert by_pair[("norm", "gemv")]["us_per_step"] == 3.0
    assert by_pair[("topk", "topk")]["us_per_step"] == 3.0
    assert by_pair[("topk", "gemv")] == {"before": "topk", "after": "gemv",
                                         "us_per_step": 24.0, "per_step": 0.5}  # 52 -> 100
    assert ("short", "topk") not in by_pair and ("gemv", "norm") not in by_pair
    assert [g["us_per_step"] for g in gaps] == sorted((g["us_per_step"] for g in gaps),
                                                      reverse=True)
    assert len(idle_gaps(events, steps=2, top=2)) == 2 and idle_gaps([], steps=1) == []
    with pytest.raises(ValueError, match="steps"):
        idle_gaps(events, steps=0)
