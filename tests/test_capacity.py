"""infer/capacity.py: weight bytes, KV + activation needs, the largest context that fits, and the
error message when --ctx does not fit (free GPU memory mocked), whose suggested contexts still fit
with a little less free memory."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch

from infer import capacity
from infer.config import EngineConfig
from models.config import Qwen3Config

TOP = 131072  # the largest context Qwen3 checkpoints support (models/context.py)


@pytest.fixture(scope="module")
def qwen8b():
    from conftest import CONFIGS_DIR

    return Qwen3Config.from_json(CONFIGS_DIR / "Qwen3-8B")


def test_weight_bytes_from_config_matches_published_sizes(qwen8b):
    # Qwen3-8B has 8.19 B parameters (model card): 2 bytes each in bfloat16.
    n = capacity.weight_bytes("/nonexistent", qwen8b, torch.bfloat16)
    assert abs(n / 2 - 8.19e9) < 0.01e9


def test_weight_bytes_from_files(tiny_ckpt):
    from models.loader import load_model

    model = load_model(tiny_ckpt, dtype=torch.float32)
    params = sum(p.numel() for p in model.parameters())  # tied: counted once
    n32 = capacity.weight_bytes(tiny_ckpt, model.config, torch.float32)
    assert 4 * params <= n32 < 4 * params * 1.01  # file = tensors + a small header
    assert capacity.weight_bytes(tiny_ckpt, model.config, torch.bfloat16) == n32 // 2


def test_bytes_needed_counts_the_pool(qwen8b):
    cfg = EngineConfig("m", ctx=32768, device="cuda", attention="triton")
    kv = 32768 // 64 + 1
    # DESIGN.md: 147,456 B of BF16 KV per cached token for Qwen3-8B, 76,032 B in INT8 with
    # float32 scales (36 layers x 8 KV heads x K and V x (128 x 2 B, or 128 + 4 B))
    for kv_cache, per_token in (("bf16", 147_456), ("int8", 76_032)):
        per_page = 64 * per_token
        need = capacity.bytes_needed(cfg, qwen8b, "triton", kv_cache, 32768)
        act = capacity.activation_bytes(qwen8b, 2048, 32768, "triton", 2)
        assert need == kv * per_page + act
    # The reference attention materializes float32 scores [Hq, chunk, ctx]: far more memory.
    assert capacity.activation_bytes(qwen8b, 2048, 32768, "reference", 2) > 3 * 4 * 32 * 2048 \
        * 32768


@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_largest_ctx_is_tight(qwen8b, kv_cache):
    cfg = EngineConfig("m", device="cuda", kv_cache=kv_cache)
    budget = 20 << 30
    best = capacity.largest_ctx(budget, cfg, qwen8b, "triton", kv_cache)
    assert best % 64 == 0 and best > 0
    assert capacity.bytes_needed(cfg, qwen8b, "triton", kv_cache, best) <= budget
    assert capacity.bytes_needed(cfg, qwen8b, "triton", kv_cache, best + 64) > budget
    assert capacity.largest_ctx(1 << 20, cfg, qwen8b, "triton", kv_cache) == 0


def test_check_capacity_message(qwen8b, monkeypatch, tmp_path):
    cfg = EngineConfig(tmp_path, ctx=131072, device="cuda", kv_cache="bf16")
    weights = capacity.weight_bytes(tmp_path, qwen8b, torch.bfloat16)
    need = capacity.bytes_needed(cfg, qwen8b, "triton", "bf16", 131072)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (weights + need, 1 << 40))
    capacity.check_capacity(cfg, qwen8b, "triton", torch.device("cuda"), max_ctx=TOP)  # just fits
    free = weights + need // 2
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 1 << 40))
    with pytest.raises(ValueError) as e:
        capacity.check_capacity(cfg, qwen8b, "triton", torch.device("cuda"), max_ctx=TOP)
    msg = str(e.value)
    hint = capacity.hint_budget(free - weights)
    bf16 = capacity.largest_ctx(hint, cfg, qwen8b, "triton", "bf16")
    int8 = capacity.largest_ctx(hint, cfg, qwen8b, "triton", "int8")
    assert 0 < bf16 < 131072 and bf16 < int8
    assert bf16 < capacity.largest_ctx(free - weights, cfg, qwen8b, "triton", "bf16")
    assert f"bf16: {bf16:,} tokens" in msg and f"int8: {int8:,} tokens" in msg
    assert "--ctx 131,072" in msg and "Lower --ctx" in msg


def test_check_host_capacity(qwen8b, monkeypatch, tmp_path):
    """CPU runs: the pool, a prefill chunk's working set (+ weights) against available host
    memory; the largest ctx fits."""
    cfg = EngineConfig(tmp_path, ctx=32768, device="cpu", kv_cache="bf16")
    weights = capacity.weight_bytes(tmp_path, qwen8b, torch.float32)
    avail = weights + capacity.bytes_needed(cfg, qwen8b, "reference", "bf16", 32768)
    monkeypatch.setattr(capacity, "available_host_bytes", lambda: avail)
    capacity.check_host_capacity(cfg, qwen8b, "reference", max_ctx=TOP)  # fits exactly
    huge = EngineConfig(tmp_path, ctx=99999999999 * 1024, device="cpu", kv_cache="bf16")
    with pytest.raises(ValueError, match="host memory") as e:
        capacity.check_host_capacity(huge, qwen8b, "reference", max_ctx=TOP)
    largest = int(str(e.value).split("largest context that fits is ")[1].split()[0]
                  .replace(",", ""))
    spare = (capacity.HINT_MARGIN_PERCENT + 1) / 100  # the margin, and a page's rounding
    assert 32768 * (1 - spare) < largest < 32768  # the tight fit less the margin
    capacity.check_host_capacity(EngineConfig(tmp_path, ctx=largest, device="cpu"), qwen8b,
                                 "reference", max_ctx=TOP)
    with pytest.raises(ValueError, match="lower --ctx"):
        capacity.check_host_capacity(EngineConfig(tmp_path, ctx=32768 + 1, device="cpu"),
                                     qwen8b, "reference", max_ctx=TOP)
    assert capacity.check_host_capacity(cfg, qwen8b, "reference", max_ctx=TOP,
                                        weights=False) is None
    monkeypatch.undo()
    assert capacity.available_host_bytes() > 0  # readable on this machine


def test_host_capacity_counts_the_prefill_working_set(monkeypatch, tmp_path):
    """A long prompt near --ctx was OOM-killed mid-prefill: the host check counted the KV cache
    and the weights, not the reference attention's float32 scores over the whole context and a
    chunk's activations (several GiB at 64k). It counts them now, as the GPU check does
    (``activation_bytes``), and agrees with ``largest_batch``, which counted them already."""
    from conftest import CONFIGS_DIR

    mc = Qwen3Config.from_json(CONFIGS_DIR / "Qwen3-0.6B")
    cfg = EngineConfig(tmp_path, ctx=65536, device="cpu", kv_cache="bf16")
    work = capacity.activation_bytes(mc, 512, 65536, "reference", 4)
    assert work > 6 << 30  # scores [16 heads, 512, 65536] in float32 alone are 2 GiB each
    weights = capacity.weight_bytes(tmp_path, mc, torch.float32)
    need = capacity.bytes_needed(cfg, mc, "reference", "bf16", 65536)
    pool = need - work
    avail = weights + pool + work // 2  # the cache and the weights fit, the prefill does not
    monkeypatch.setattr(capacity, "available_host_bytes", lambda: avail)
    with pytest.raises(ValueError) as e:
        capacity.check_host_capacity(cfg, mc, "reference", max_ctx=TOP)
    msg = str(e.value)
    assert f"a prefill chunk's working set {work / (1 << 30):.1f} GiB" in msg, msg
    assert capacity.largest_batch(cfg, mc, "reference", torch.device("cpu")) == 0
    largest = _suggested(msg, r"largest context that fits is ([\d,]+) tokens")
    assert 0 < largest < 65536
    capacity.check_host_capacity(replace(cfg, ctx=largest), mc, "reference", max_ctx=TOP)
    monkeypatch.setattr(capacity, "available_host_bytes", lambda: weights + need)
    capacity.check_host_capacity(cfg, mc, "reference", max_ctx=TOP)  # fits exactly
    assert capacity.largest_batch(cfg, mc, "reference", torch.device("cpu")) == 1


@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_host_capacity_names_the_stored_dtype_and_suggests_int8(qwen8b, monkeypatch, tmp_path,
                                                                  kv_cache):
    """On the CPU the bf16 cache stores float32: the message says so, and suggests
    --kv-cache int8 (with what it fits) unless the cache is int8 already."""
    monkeypatch.setattr(capacity, "available_host_bytes", lambda: 64 << 30)
    cfg = EngineConfig(tmp_path, ctx=1 << 30, device="cpu", kv_cache=kv_cache)
    with pytest.raises(ValueError) as e:
        capacity.check_host_capacity(cfg, qwen8b, "reference", max_ctx=TOP)
    msg = str(e.value)
    if kv_cache == "bf16":
        assert "--kv-cache bf16 (float32 on the CPU) does not fit" in msg
        int8 = int(msg.split("use --kv-cache int8 (it fits ")[1].split()[0].replace(",", ""))
        largest = int(msg.split("largest context that fits is ")[1].split()[0].replace(",", ""))
        assert int8 > largest > 0
        capacity.check_host_capacity(replace(cfg, ctx=int8, kv_cache="int8"), qwen8b,
                                     "reference", max_ctx=TOP)
    else:
        assert "--kv-cache int8 does not fit" in msg and "use --kv-cache int8" not in msg
    cfg16 = EngineConfig(tmp_path, ctx=1 << 30, device="cpu", kv_cache="bf16", dtype="bfloat16")
    with pytest.raises(ValueError, match=r"--kv-cache bf16 does not fit"):
        capacity.check_host_capacity(cfg16, qwen8b, "reference", max_ctx=TOP)  # bf16 is bf16


def test_capacity_hints_stop_at_the_largest_context_the_model_supports(qwen8b, monkeypatch,
                                                                       tmp_path):
    """A memory that holds more int8 cache than the checkpoint's largest context (131072 for
    Qwen3-8B) is not hinted past it: the hint must be a --ctx that works."""
    from models.context import largest_context

    top = largest_context(qwen8b)
    cfg = EngineConfig(tmp_path, ctx=top, device="cpu", kv_cache="bf16")
    weights = capacity.weight_bytes(tmp_path, qwen8b, torch.float32)
    # the int8 cache and a prefill's working set at the top context fit, with room to spare (a
    # budget for more than the top); the bf16 cache does not
    int8 = capacity.bytes_needed(cfg, qwen8b, "reference", "int8", top) * 10 // 9
    assert int8 < capacity.bytes_needed(cfg, qwen8b, "reference", "bf16", top)
    monkeypatch.setattr(capacity, "available_host_bytes", lambda: weights + int8)
    with pytest.raises(ValueError) as e:
        capacity.check_host_capacity(cfg, qwen8b, "reference", max_ctx=TOP)
    assert f"use --kv-cache int8 (it fits {top:,} tokens)" in str(e.value)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1 << 50, 1 << 50))
    huge = EngineConfig(tmp_path, ctx=1 << 40, device="cuda", kv_cache="bf16")
    with pytest.raises(ValueError) as e:
        capacity.check_capacity(huge, qwen8b, "triton", torch.device("cuda"), max_ctx=TOP)
    assert f"bf16: {top:,} tokens, int8: {top:,} tokens" in str(e.value)


def test_int8_hint_is_capped_by_the_checkpoint_not_the_yarn_of_this_ctx(qwen8b, monkeypatch,
                                                                        tmp_path):
    """--ctx 96k turns on YaRN factor 3 (a config whose own limit is 98,304): a refusal
    suggested int8 "98,304 tokens" where --ctx 128k with int8 ran. The cap is the checkpoint's
    largest context (131,072 with factor 4), on the GPU and on the host (through the engine)."""
    import shutil

    from conftest import CONFIGS_DIR

    from infer.engine import Engine
    from models.context import plan_context

    plan = plan_context(qwen8b, 96 * 1024)
    assert plan.config.max_context == 98304 and plan.max_ctx == TOP
    gpu = EngineConfig(tmp_path, ctx=96 * 1024, device="cuda", kv_cache="bf16")
    weights = capacity.weight_bytes(tmp_path, qwen8b, torch.bfloat16)
    room = capacity.bytes_needed(gpu, qwen8b, "triton", "int8", TOP) * 10 // 9
    assert room < capacity.bytes_needed(gpu, qwen8b, "triton", "bf16", 96 * 1024)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (weights + room, 1 << 40))
    with pytest.raises(ValueError) as e:
        capacity.check_capacity(gpu, plan.config, "triton", torch.device("cuda"),
                                max_ctx=plan.max_ctx)
    assert f"int8: {TOP:,} tokens" in str(e.value), str(e.value)

    shutil.copy(CONFIGS_DIR / "Qwen3-8B" / "config.json", tmp_path / "config.json")
    host = EngineConfig(tmp_path, ctx=96 * 1024, device="cpu", kv_cache="bf16")
    weights = capacity.weight_bytes(tmp_path, qwen8b, torch.float32)
    room = capacity.bytes_needed(host, qwen8b, "reference", "int8", TOP) * 10 // 9
    assert room < capacity.bytes_needed(host, qwen8b, "reference", "bf16", 96 * 1024)
    monkeypatch.setattr(capacity, "available_host_bytes", lambda: weights + room)
    with pytest.raises(ValueError) as e:
        Engine(host)
    assert f"use --kv-cache int8 (it fits {TOP:,} tokens)" in str(e.value), str(e.value)


@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_gpu_capacity_suggests_int8_only_when_it_is_not_int8(qwen8b, monkeypatch, tmp_path,
                                                              kv_cache):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (20 << 30, 1 << 40))
    cfg = EngineConfig(tmp_path, ctx=1 << 24, device="cuda", kv_cache=kv_cache)
    with pytest.raises(ValueError) as e:
        capacity.check_capacity(cfg, qwen8b, "triton", torch.device("cuda"), max_ctx=TOP)
    msg = str(e.value)
    assert f"--kv-cache {kv_cache} does not fit" in msg
    assert ("use --kv-cache int8" in msg) == (kv_cache == "bf16"), msg
    cfg16 = EngineConfig(tmp_path, ctx=1 << 24, device="cuda", dtype="float16")
    with pytest.raises(ValueError, match=r"--kv-cache bf16 \(float16 with --dtype float16\)"):
        capacity.check_capacity(cfg16, qwen8b, "triton", torch.device("cuda"), max_ctx=TOP)


def _suggested(msg: str, pattern: str) -> int:
    """The token count ``pattern``'s group matches in ``msg`` (``94,528`` -> 94528)."""
    return int(re.search(pattern, msg)[1].replace(",", ""))


def test_suggested_contexts_still_fit_with_a_little_less_free_memory(qwen8b, monkeypatch,
                                                                      tmp_path):
    """Free memory drifts between runs: a user was told 94,528 tokens fit, then refused at
    94,528 on the next run. Each context a refusal suggests (GPU and host, bf16 and int8, below
    the checkpoint's largest context so that the cap does not hide the margin) must still fit
    with 4 % of the budget gone; the tight fit would not."""
    budget = 8 << 30
    weights = capacity.weight_bytes(tmp_path, qwen8b, torch.bfloat16)
    gpu = EngineConfig(tmp_path, ctx=1 << 20, device="cuda", kv_cache="bf16")

    def free(n: int):
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (weights + n, 1 << 40))

    free(budget)
    with pytest.raises(ValueError) as e:
        capacity.check_capacity(gpu, qwen8b, "triton", torch.device("cuda"), max_ctx=TOP)
    msg = str(e.value)
    assert f"with a {capacity.HINT_MARGIN_PERCENT} % margin" in msg
    free(budget - budget * 4 // 100)  # 4 %: the drift a user's machine showed between runs
    for kv in ("bf16", "int8"):
        ctx = _suggested(msg, rf"{kv}: ([\d,]+) tokens")
        tight = capacity.largest_ctx(budget, gpu, qwen8b, "triton", kv)
        assert 0 < ctx < tight < 131072
        capacity.check_capacity(replace(gpu, ctx=ctx, kv_cache=kv), qwen8b, "triton",
                                torch.device("cuda"), max_ctx=TOP)
        with pytest.raises(ValueError):  # what the message said before the margin
            capacity.check_capacity(replace(gpu, ctx=tight, kv_cache=kv), qwen8b, "triton",
                                    torch.device("cuda"), max_ctx=TOP)

    host = EngineConfig(tmp_path, ctx=1 << 20, device="cpu", kv_cache="bf16")
    host_weights = capacity.weight_bytes(tmp_path, qwen8b, torch.float32)
    monkeypatch.setattr(capacity, "available_host_bytes", lambda: host_weights + budget)
    with pytest.raises(ValueError) as e:
        capacity.check_host_capacity(host, qwen8b, "reference", max_ctx=TOP)
    msg = str(e.value)
    assert f"with a {capacity.HINT_MARGIN_PERCENT} % margin" in msg
    monkeypatch.setattr(capacity, "available_host_bytes",
                        lambda: host_weights + budget - budget * 4 // 100)
    for kv, pattern in (("bf16", r"largest context that fits is ([\d,]+) tokens"),
                        ("int8", r"int8 \(it fits ([\d,]+) tokens\)")):
        ctx = _suggested(msg, pattern)
        assert 0 < ctx < 131072
        capacity.check_host_capacity(replace(host, ctx=ctx, kv_cache=kv), qwen8b, "reference",
                                     max_ctx=TOP)
