"""The L2 weight prefetch beside the decode chain (``kernels/l2_prefetch.py``,
``models/weight_prefetch.py``): which bytes, when it is on, and that it never changes a result.

CPU: the aligned part of a range, the byte ranges a layer prefetches (order, budget, the gate
and up halves alike, the last layer's lm_head), the launcher's checks, never on a CPU. GPU: the
kernel runs over a whole weight and a partial misaligned range, and the engine's greedy tokens
are the same with the prefetch on and off, with CUDA graphs and eagerly, BF16 and INT8.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from kernels import l2_prefetch as l2
from models import weight_prefetch


def _w(rows: int, cols: int) -> torch.Tensor:
    return torch.zeros(rows, cols, dtype=torch.bfloat16)


def _model(layers: int = 2, hidden: int = 8, q: int = 8, kv: int = 4, inter: int = 16):
    """An object with a Qwen3's projection weights (bf16, 2 bytes an element)."""
    def layer():
        return SimpleNamespace(
            self_attn=SimpleNamespace(qkv_proj=SimpleNamespace(weight=_w(q + 2 * kv, hidden)),
                                      o_proj=SimpleNamespace(weight=_w(hidden, q))),
            mlp=SimpleNamespace(gate_up_proj=SimpleNamespace(weight=_w(2 * inter, hidden)),
                                down_proj=SimpleNamespace(weight=_w(hidden, inter))))
    return SimpleNamespace(model=SimpleNamespace(layers=[layer() for _ in range(layers)]),
                           lm_head=SimpleNamespace(weight=_w(32, hidden)))


def _spans(ranges):
    return [(t.shape, start, n) for t, start, n in ranges]


def test_layer_ranges_follow_the_reading_order_within_the_budget():
    m = _model()
    lay0, lay1 = m.model.layers
    o, gu = lay0.self_attn.o_proj.weight, lay0.mlp.gate_up_proj.weight
    down, qkv1 = lay0.mlp.down_proj.weight, lay1.self_attn.qkv_proj.weight
    assert (o.nbytes, gu.nbytes, down.nbytes, qkv1.nbytes) == (128, 512, 256, 256)
    everything = weight_prefetch.layer_ranges(m, 0, 10_000)
    expected = (o, gu, gu, down, qkv1)
    assert len(everything) == len(expected)
    assert [(t is w, s, n) for (t, s, n), w in zip(everything, expected, strict=True)] == [
        (True, 0, 128), (True, 0, 256), (True, 256, 256), (True, 0, 256), (True, 0, 256)]
    # o_proj whole, then the same leading share of the gate rows and of the up rows
    assert _spans(weight_prefetch.layer_ranges(m, 0, 128 + 100)) == [
        (o.shape, 0, 128), (gu.shape, 0, 50), (gu.shape, 256, 50)]
    assert _spans(weight_prefetch.layer_ranges(m, 0, 64)) == [(o.shape, 0, 64)]
    assert weight_prefetch.layer_ranges(m, 0, 0) == []
    # past gate/up: down, then the next layer's qkv, partial at the end of the budget
    assert _spans(weight_prefetch.layer_ranges(m, 0, 128 + 512 + 256 + 16)) == [
        (o.shape, 0, 128), (gu.shape, 0, 256), (gu.shape, 256, 256), (down.shape, 0, 256),
        (qkv1.shape, 0, 16)]
    # the last layer is followed by the lm_head
    last = weight_prefetch.layer_ranges(m, 1, 10_000)
    assert last[-1][0] is m.lm_head.weight and last[-1][1:] == (0, m.lm_head.weight.nbytes)


def test_aligned_range_takes_whole_16_byte_units():
    t = torch.zeros(64, dtype=torch.uint8)
    base = t.data_ptr() % 16
    lo, n = l2.aligned_range(t, 0, 64)
    assert (t.data_ptr() + lo) % 16 == 0 and n % 16 == 0 and lo + n <= 64
    assert n == (64 if base == 0 else 48)
    lo, n = l2.aligned_range(t[1:], 0, 20)  # an odd start: rounded up; too short for a unit
    assert (t[1:].data_ptr() + lo) % 16 == 0 and n in (0, 16) and lo + n <= 20
    assert l2.aligned_range(t, 3, 5)[1] == 0


def test_launcher_checks_and_is_a_no_op_on_a_cpu():
    w = _w(8, 8)
    l2.l2_prefetch(w)  # no instruction on a CPU: nothing happens, nothing raises
    l2.l2_prefetch(w, 16, 32)
    with pytest.raises(ValueError, match="contiguous"):
        l2.l2_prefetch(w.t())
    with pytest.raises(ValueError, match="not inside"):
        l2.l2_prefetch(w, 100, 100)
    with pytest.raises(ValueError, match="not inside"):
        l2.l2_prefetch(w, -16)


def test_never_on_for_a_cpu_step(monkeypatch):
    monkeypatch.setattr(weight_prefetch, "ENABLED", True)
    assert weight_prefetch.prefetcher_for(_model(), torch.zeros(1, 8)) is None


@pytest.mark.gpu
def test_gpu_prefetch_kernel_runs():
    w = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
    before = w.clone()
    l2.l2_prefetch(w)
    l2.l2_prefetch(w, 3, 1_000_003)  # misaligned start and size: the aligned part only
    torch.cuda.synchronize()
    assert torch.equal(w, before)


@pytest.mark.gpu
@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_gpu_engine_prefetch_equals_plain(gpu_qwen3_4l, kv_cache, monkeypatch):
    """A 4-layer 0.6B through the engine: the same greedy tokens with the prefetch on and off,
    with CUDA graphs and eagerly (the budget covers a whole layer's weights and then some)."""
    from mock_engine import greedy_by_flag

    monkeypatch.setattr(weight_prefetch, "budget_bytes", lambda: 40_000_000)
    out = greedy_by_flag(gpu_qwen3_4l, kv_cache, monkeypatch, weight_prefetch, "ENABLED")
    assert len(out[False, False]) == 40
    assert out[True, True] == out[True, False] == out[False, True] == out[False, False]


@pytest.mark.parametrize("value, mb", [(None, 32), ("", 32), ("0", 0), (" 8.5 ", 8.5)])
def test_budget_from_the_environment(monkeypatch, value, mb):
    if value is None:
        monkeypatch.delenv("INFER_L2_PREFETCH_MB", raising=False)
    else:
        monkeypatch.setenv("INFER_L2_PREFETCH_MB", value)
    weight_prefetch.budget_bytes.cache_clear()  # read once a process: read it anew here
    assert weight_prefetch.budget_bytes() == int(mb * 1e6)


@pytest.mark.parametrize("value", ["abc", "-5", "nan", "inf"])
def test_a_bad_budget_is_one_line_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv("INFER_L2_PREFETCH_MB", value)
    weight_prefetch.budget_bytes.cache_clear()
    with pytest.raises(ValueError, match="^INFER_L2_PREFETCH_MB must be a number of megabytes"):
        weight_prefetch.budget_bytes()


def test_a_bad_budget_does_not_stop_a_command_that_never_prefetches(tiny_ckpt):
    """Read only when the (off) prefetch makes a prefetcher: read on import, it stopped every
    command with a bare float() message. A fresh process, where the module is imported anew."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from cli_helpers import FAST

    env = {**os.environ, "INFER_L2_PREFETCH_MB": "abc"}
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, "-c", "from cli import main; main()", "generate",
                           str(tiny_ckpt), "hi", *FAST], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[1], env=env)
    assert proc.returncode == 0, proc.stderr
