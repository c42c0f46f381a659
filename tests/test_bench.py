"""``infer bench`` (``infer/bench.py`` and its command) on a tiny random checkpoint on the CPU;
``--speculate`` is ``test_bench_speculate.py``'s."""

from __future__ import annotations

import json

import pytest
from cli_helpers import assert_one_line_error, invoke

from infer.bench import SPEC_FIELDS, bench_prompt, parse_lengths

CPU = ["--device", "cpu", "--ctx", "1k"]


def test_parse_lengths_default_sorted_and_errors():
    assert parse_lengths(None, 32768, 128) == [4096, 32640]
    assert parse_lengths(None, 2048, 128) == [1920]  # shorter than 4k: the longest only
    assert parse_lengths("32k, 4k,4096", 65536, 128) == [4096, 32768]
    with pytest.raises(ValueError, match="at least 2"):
        parse_lengths(None, 4096, 1)
    with pytest.raises(ValueError, match="no room"):
        parse_lengths(None, 100, 100)
    with pytest.raises(ValueError, match=r"--ctx 33k"):
        parse_lengths("32k", 32768, 128)
    with pytest.raises(ValueError, match="invalid length 'x'"):
        parse_lengths("4k,x", 32768, 128)
    with pytest.raises(ValueError, match="names no length"):
        parse_lengths(" , ", 32768, 128)
    for text in ("1,,2", "4k,", ",4k", "4k, ,8k"):  # a typo, not a list of fewer lengths
        with pytest.raises(ValueError, match="has an empty item"):
            parse_lengths(text, 32768, 128)


def test_bench_prompt_is_deterministic_and_in_range():
    a = bench_prompt(500, 97)
    assert a == bench_prompt(500, 97) and a != bench_prompt(500, 97, seed=1)
    assert min(a) >= 0 and max(a) < 97 and len(set(a)) > 50


def test_bench_json_reports_each_length(tiny_ckpt):
    result = invoke("bench", tiny_ckpt, *CPU, "--lengths", "200,64", "--tokens", "5", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["command"] == "bench" and doc["device"] == "cpu" and doc["ctx"] == 1024
    assert doc["kv_cache"] == "bf16" and doc["cache_dtype"] == "float32"  # the table's label
    rows = doc["results"]
    assert [r["prompt_tokens"] for r in rows] == [64, 200]
    for r in rows:  # exactly --tokens decoded (past stop tokens), positive rates, no CPU ceiling
        assert r["new_tokens"] == 5
        assert r["ttft_s"] > 0 and r["decode_tokens_per_s"] > 0
        # rounded: seconds to the millisecond, rates to 0.1 (so the rate is the prompt over a
        # time within half a millisecond of the one shown)
        assert r["ttft_s"] == round(r["ttft_s"], 3) and r["decode_tokens_per_s"] == round(
            r["decode_tokens_per_s"], 1) and r["prefill_tokens_per_s"] == round(
            r["prefill_tokens_per_s"], 1)
        n, t = r["prompt_tokens"], r["ttft_s"]
        assert n / (t + 0.0005) - 0.05 <= r["prefill_tokens_per_s"] <= n / (t - 0.0005) + 0.05
        assert r["ceiling_tokens_per_s"] is None and r["fraction_of_ceiling"] is None
        assert not set(SPEC_FIELDS) & r.keys()  # without --speculate: the record's old shape


def test_bench_table_on_stdout(tiny_ckpt):
    result = invoke("bench", tiny_ckpt, *CPU, "--tokens", "3")
    assert result.exit_code == 0, result.output
    # default lengths at --ctx 1k: only the longest that fits, 1024 - 3
    assert "1,021" in result.stdout and "decode tok/s" in result.stdout
    # the ceiling columns are empty on the CPU: said why, on stderr
    assert "note: no ceiling on cpu: it is a GPU's measured read bandwidth" in result.stderr


@pytest.mark.parametrize("args,needle", [
    (["--tokens", "1"], "--tokens must be at least 2"),
    (["--lengths", "4k"], "does not fit in --ctx 1,024"),
    (["--lengths", "512", "--tokens", "700"], "or lower the length or --tokens"),
    (["--lengths", "many"], "invalid length 'many'"),
    (["--lengths", "1,,2"], "--lengths '1,,2' has an empty item"),
    (["--ctx", "oops"], "--ctx must be a token count"),
])
def test_bench_bad_input_is_one_line_exit_2(tiny_ckpt, args, needle):
    assert_one_line_error(invoke("bench", tiny_ckpt, *CPU, *args), 2, needle)


def test_bench_lengths_past_qwen3_largest_context_are_bad_input(tiny_ckpt):
    result = invoke("bench", tiny_ckpt, "--device", "cpu", "--ctx", "256k", "--lengths", "200k")
    assert result.exit_code == 2 and result.stdout == "" and "Traceback" not in result.output
    last = result.stderr.strip().splitlines()[-1]  # after the --ctx past-40960 warning
    assert last.startswith("error:") and "beyond the largest context" in last and "131,072" in last


def test_bench_ctrl_c_keeps_the_lengths_measured(tiny_ckpt, monkeypatch):
    import infer.bench

    real = infer.bench.BenchResult
    made = []

    def result_then_ctrl_c(**kw):  # the second length is cut by a Ctrl-C
        if made:
            raise KeyboardInterrupt
        made.append(real(**kw))
        return made[-1]

    monkeypatch.setattr(infer.bench, "BenchResult", result_then_ctrl_c)
    result = invoke("bench", tiny_ckpt, *CPU, "--lengths", "64,200", "--tokens", "3", "--json")
    assert result.exit_code == 130, result.output
    doc = json.loads(result.stdout)
    assert doc["interrupted"] is True and [r["prompt_tokens"] for r in doc["results"]] == [64]
    assert "interrupted" in result.stderr


def run_bench_process(ckpt, *args, stdout):
    """``infer bench`` in a real process (the interpreter's own flush at exit included)."""
    import subprocess
    import sys
    from pathlib import Path

    return subprocess.run(
        [sys.executable, "-c", "from cli import main; main()", "bench", str(ckpt), *CPU,
         "--lengths", "16", "--tokens", "2", *args], stdout=stdout, stderr=subprocess.PIPE,
        text=True, timeout=120, cwd=Path(__file__).parents[1])


@pytest.mark.parametrize("args", [["--json"], []])
def test_bench_output_to_a_full_device_is_one_line_exit_1(tiny_ckpt, args):
    """`infer bench ... > /dev/full`: ENOSPC on the write is one line, not a chained traceback."""
    import os

    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full (Linux)")
    with open("/dev/full", "w") as full:
        proc = run_bench_process(tiny_ckpt, *args, stdout=full)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == "error: cannot write output: No space left on device\n", proc.stderr


@pytest.mark.parametrize("args", [["--json"], []])
def test_bench_output_to_a_closed_pipe_exits_0_quietly(tiny_ckpt, args):
    """`infer bench ... | head -0`: the reader is gone before the table or JSON is written."""
    import os

    r, w = os.pipe()
    os.close(r)
    try:
        proc = run_bench_process(tiny_ckpt, *args, stdout=w)
    finally:
        os.close(w)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


@pytest.mark.parametrize("kv_cache,label", [("bf16", "float32 cache"), ("int8", "int8 cache")])
def test_bench_table_names_the_cache_the_cpu_holds(tiny_ckpt, kv_cache, label):
    """On the CPU `--kv-cache bf16` stores K/V in the float32 activation dtype: say so."""
    result = invoke("bench", tiny_ckpt, *CPU, "--lengths", "16", "--tokens", "2",
                    "--kv-cache", kv_cache)
    assert result.exit_code == 0, result.output
    title = result.stdout.strip().splitlines()[0]
    assert f": {label}, reference attention on cpu" in title, title


@pytest.mark.parametrize("kv_cache,dtype,label", [
    ("bf16", "bfloat16", "bf16 cache"), ("bf16", "float16", "fp16 cache"),
    ("bf16", "float32", "float32 cache"), ("int8", "int8", "int8 cache")])
def test_cache_label_names_what_the_pool_stores(kv_cache, dtype, label):
    from types import SimpleNamespace

    import torch

    from infer.ui.bench_view import cache_label

    layer = SimpleNamespace(k=torch.zeros(1, dtype=getattr(torch, dtype)))
    engine = SimpleNamespace(config=SimpleNamespace(kv_cache=kv_cache),
                             pool=SimpleNamespace(layers=[layer]))
    assert cache_label(engine) == label


@pytest.mark.parametrize("lengths", [[5, 40, 77], [16, 64], [3, 17, 200]])
def test_warm_up_runs_every_prefill_shape_the_lengths_run(lengths, monkeypatch):
    """The untimed warm-up prefills every (chunk tokens, attends a cached prefix) pair that a
    measured length prefills (Triton specializes on the chunk's size), so that no length pays a
    compilation in its time to first token; and it decodes a step."""
    from mock_engine import mock_engine

    from infer.bench import run_bench
    from infer.session import Session

    engine = mock_engine(ctx=256, chunk=16)
    calls: list[tuple[int, bool]] = []
    real = Session._forward

    def spy(self, ids):
        calls.append((len(ids), self.num_cached > 0))
        return real(self, ids)

    monkeypatch.setattr(Session, "_forward", spy)
    runs = run_bench(engine, lengths, tokens=3)
    first = next(runs)
    warm = set(calls[:len(calls) - len(range(0, lengths[0], 16))])
    rest = list(runs)
    assert [r.prompt_tokens for r in [first, *rest]] == lengths
    measured = {(min(16, n - s), s > 0) for n in lengths for s in range(0, n, 16)}
    assert measured <= warm, sorted(measured - warm)
    assert set(calls) == warm | measured
