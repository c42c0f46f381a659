"""The CUDA-graph capture time: ``GraphRunner.capture_s``/``captures``, ``Engine.take_capture_s``
(what the stats line shows once, then only for new captures), the stats-line note and the
``graph_capture_s`` JSON field. CPU: the engine's accounting with a runner's counter set by
hand, and the CLI with ``take_capture_s`` faked (no graphs on a CPU). GPU (``-m gpu``): a real
capture is counted and timed."""

from __future__ import annotations

import json

import pytest
from cli_helpers import FAST, invoke
from mock_engine import GREEDY, NO_STOP, mock_engine, prompt_of

from infer import Engine, EngineConfig
from infer.ui.stats_line import capture_note


def test_take_capture_s_reports_each_second_once():
    eng = mock_engine()
    assert eng.graph_capture_s == 0.0 and eng.take_capture_s() == 0.0
    runner = eng.graph_runner()  # eager on the CPU: it never captures
    list(eng.new_session().generate(prompt_of(20), GREEDY.replace(max_new_tokens=4)))
    assert runner.capture_s == 0.0 and runner.captures == 0
    runner.capture_s = 0.5  # as if a graph had been captured
    assert eng.graph_capture_s == 0.5
    assert eng.take_capture_s() == 0.5 and eng.take_capture_s() == 0.0
    runner.capture_s = 0.75
    assert eng.take_capture_s() == pytest.approx(0.25)


def test_capture_note():
    assert capture_note(0.0) == "" and capture_note(0.004) == ""
    assert capture_note(0.4213) == " · CUDA graphs captured in 0.42 s"


def _fake_capture(monkeypatch, values):
    seq = iter(values)
    monkeypatch.setattr(Engine, "take_capture_s", lambda self: next(seq, 0.0))


def test_generate_stats_line_shows_the_capture_time(tiny_ckpt, monkeypatch):
    _fake_capture(monkeypatch, [0.31])
    result = invoke("generate", tiny_ckpt, "Hello there", *FAST)
    assert result.exit_code == 0, result.output
    stats = result.stderr.strip().splitlines()[-1]
    assert stats.endswith(" · CUDA graphs captured in 0.31 s"), stats


def test_chat_shows_the_capture_time_once(tiny_ckpt, monkeypatch):
    _fake_capture(monkeypatch, [0.31, 0.0])
    result = invoke("chat", tiny_ckpt, *FAST, "--no-think", input="hello\nagain\n")
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.stderr.splitlines() if "tok/s decode" in ln or "new token" in ln]
    assert len(lines) == 2, result.stderr
    assert "CUDA graphs captured in 0.31 s" in lines[0] and "captured" not in lines[1]


def test_json_header_has_graph_capture_s(tiny_ckpt):
    obj = json.loads(invoke("generate", tiny_ckpt, "Hello there", *FAST, "--json").stdout)
    assert obj["graph_capture_s"] == 0.0  # the CPU runs eagerly
    assert obj["warm_up_s"] == 0.0  # and has no kernels to warm up (infer/warm_up.py)


@pytest.mark.gpu
def test_gpu_capture_is_counted_and_timed(gpu_qwen3_4l):
    cfg = EngineConfig("unused", ctx=1024, kv_cache="bf16", page_size=64, device="cuda",
                       attention="triton", cuda_graphs=True)
    eng = Engine(cfg, model=gpu_qwen3_4l, tokenizer=NO_STOP)
    list(eng.new_session().generate(prompt_of(100), GREEDY.replace(max_new_tokens=8)))
    runner = eng.graph_runner()
    assert runner.captures >= 1 and runner.capture_s > 0
    first = eng.take_capture_s()
    assert first == pytest.approx(runner.capture_s)
    list(eng.new_session().generate(prompt_of(100), GREEDY.replace(max_new_tokens=8)))
    assert eng.take_capture_s() == 0.0  # the same graph again: nothing new captured
