"""infer/capacity.py: the host-memory refusal names the largest --prefill-chunk with which the
requested --ctx fits, when one does. On the CPU the reference attention's float32 scores are
[Hq, chunk, ctx]: at 128k on the 0.6B a chunk of 64 instead of 512 shrinks the prefill working set
from 17.1 to 6.5 GiB, which lets int8 fit 131,072 where the refusal only said to lower --ctx."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch

from infer import capacity
from infer.config import EngineConfig
from models.config import Qwen3Config

TOP = 131072
GIB = 1 << 30


@pytest.fixture(scope="module")
def qwen06b():
    from conftest import CONFIGS_DIR

    return Qwen3Config.from_json(CONFIGS_DIR / "Qwen3-0.6B")


def refusal(cfg, mc, monkeypatch, avail: int) -> str:
    monkeypatch.setattr(capacity, "available_host_bytes", lambda: avail)
    with pytest.raises(ValueError, match="does not fit in host memory") as e:
        capacity.check_host_capacity(cfg, mc, "reference", max_ctx=TOP)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def fits(cfg, mc, monkeypatch, avail: int) -> None:
    monkeypatch.setattr(capacity, "available_host_bytes", lambda: avail)
    capacity.check_host_capacity(cfg, mc, "reference", max_ctx=TOP)


def pool_and_weights(cfg, mc, kv_cache: str) -> int:
    work = capacity.activation_bytes(mc, cfg.chunk, cfg.ctx, "reference", 4)
    return (capacity.bytes_needed(cfg, mc, "reference", kv_cache, cfg.ctx) - work
            + capacity.weight_bytes(cfg.model, mc, torch.float32))


def test_the_working_set_at_128k_on_the_0_6b(qwen06b):
    assert round(capacity.activation_bytes(qwen06b, 512, TOP, "reference", 4) / GIB, 1) == 17.1
    assert round(capacity.activation_bytes(qwen06b, 64, TOP, "reference", 4) / GIB, 1) == 6.5


def test_int8_at_128k_is_told_the_chunk_that_fits(qwen06b, monkeypatch, tmp_path):
    cfg = EngineConfig(tmp_path, ctx=TOP, device="cpu", kv_cache="int8")
    assert cfg.chunk == 512
    avail = pool_and_weights(cfg, qwen06b, "int8") + 8 * GIB  # 6.5 GiB at 64, 17.1 at 512
    msg = refusal(cfg, qwen06b, monkeypatch, avail)
    chunk = int(re.search(r"or keep --ctx 131,072 with --prefill-chunk ([\d,]+) or less "
                          r"\(now 512: a smaller chunk has a smaller working set\)$",
                          msg).group(1).replace(",", ""))
    assert 64 <= chunk < 512
    fits(replace(cfg, prefill_chunk=chunk), qwen06b, monkeypatch, avail)
    # the largest, with the refusal's 5 % margin: one more does not fit in that budget
    budget = capacity.hint_budget(avail - capacity.weight_bytes(tmp_path, qwen06b, torch.float32))
    assert capacity.bytes_needed(replace(cfg, prefill_chunk=chunk + 1), qwen06b, "reference",
                                 "int8", TOP) > budget
    fits(replace(cfg, prefill_chunk=chunk), qwen06b, monkeypatch, avail - avail * 4 // 100)


def test_bf16_is_told_the_chunk_for_its_own_cache_first(qwen06b, monkeypatch, tmp_path):
    cfg = EngineConfig(tmp_path, ctx=TOP, device="cpu", kv_cache="bf16")
    avail = pool_and_weights(cfg, qwen06b, "bf16") + 10 * GIB
    msg = refusal(cfg, qwen06b, monkeypatch, avail)
    assert "or use --kv-cache int8 (it fits 131,072 tokens)" in msg  # int8's 21 GiB less
    chunk = int(re.search(r"with --prefill-chunk ([\d,]+) or less", msg).group(1))
    fits(replace(cfg, prefill_chunk=chunk), qwen06b, monkeypatch, avail)


def test_bf16_is_told_int8_with_a_smaller_chunk_when_only_both_fit(qwen06b, monkeypatch,
                                                                    tmp_path):
    cfg = EngineConfig(tmp_path, ctx=TOP, device="cpu", kv_cache="bf16")
    avail = pool_and_weights(cfg, qwen06b, "int8") + 8 * GIB  # bf16's pool alone is 28 GiB
    msg = refusal(cfg, qwen06b, monkeypatch, avail)
    assert "or use --kv-cache int8 (it fits " in msg and "(it fits 131,072" not in msg
    chunk = int(re.search(r"or keep --ctx 131,072 with --kv-cache int8 and --prefill-chunk "
                          r"([\d,]+) or less", msg).group(1))
    fits(replace(cfg, prefill_chunk=chunk, kv_cache="int8"), qwen06b, monkeypatch, avail)


def test_no_chunk_named_when_none_fits(qwen06b, monkeypatch, tmp_path):
    cfg = EngineConfig(tmp_path, ctx=TOP, device="cpu", kv_cache="int8")
    avail = pool_and_weights(cfg, qwen06b, "int8")  # the cache and weights alone fill it
    assert "--prefill-chunk" not in refusal(cfg, qwen06b, monkeypatch, avail)
    assert capacity.largest_chunk(0, cfg, qwen06b, "reference", "int8") == 0


def _avail_for_chunk(cfg, mc, chunk: int) -> int:
    """Host bytes whose hint budget (after the weights and the 5 % margin) just holds ``cfg.ctx``
    with a prefill chunk of ``chunk``."""
    need = capacity.bytes_needed(replace(cfg, prefill_chunk=chunk), mc, "reference",
                                 cfg.kv_cache, cfg.ctx)
    spare = need * 100 // (100 - capacity.HINT_MARGIN_PERCENT)
    while capacity.hint_budget(spare) < need:
        spare += 1
    return spare + capacity.weight_bytes(cfg.model, mc, torch.float32)


def test_a_chunk_below_the_floor_is_not_suggested(qwen06b, monkeypatch, tmp_path):
    """A chunk of half MIN_HINT_CHUNK would fit, but the hint names none below the floor (it
    named chunks of a few tokens, a prefill many times slower per token): the other remedies
    stand alone."""
    cfg = EngineConfig(tmp_path, ctx=TOP, device="cpu", kv_cache="int8")
    small = capacity.MIN_HINT_CHUNK // 2
    avail = _avail_for_chunk(cfg, qwen06b, small)
    msg = refusal(cfg, qwen06b, monkeypatch, avail)
    fits(replace(cfg, prefill_chunk=small), qwen06b, monkeypatch, avail)
    assert "--prefill-chunk" not in msg and msg.endswith("): lower --ctx"), msg
    budget = capacity.hint_budget(avail - capacity.weight_bytes(tmp_path, qwen06b, torch.float32))
    assert capacity.largest_chunk(budget, cfg, qwen06b, "reference", "int8") == 0


def test_the_floor_itself_is_suggested(qwen06b, monkeypatch, tmp_path):
    cfg = EngineConfig(tmp_path, ctx=TOP, device="cpu", kv_cache="int8")
    floor = capacity.MIN_HINT_CHUNK
    msg = refusal(cfg, qwen06b, monkeypatch, _avail_for_chunk(cfg, qwen06b, floor))
    assert msg.endswith(f", or keep --ctx 131,072 with --prefill-chunk {floor} or less (now 512:"
                        " a smaller chunk has a smaller working set)"), msg


def test_int8_is_not_suggested_where_it_fits_no_more(tiny_ckpt, monkeypatch):
    """A prefill chunk's working set that does not fit (not the KV cache): the refusal named
    --kv-cache int8 "(it fits N tokens)" with the same N as the cache it has."""
    from cli_helpers import invoke

    monkeypatch.setattr(capacity, "available_host_bytes", lambda: 2 << 30)
    result = invoke("generate", tiny_ckpt, "hi", "--device", "cpu", "--ctx", "128k",
                    "--prefill-chunk", "100000", "--max-new-tokens", "2")
    assert result.exit_code == 2, result.output
    assert "does not fit in host memory" in result.stderr and "--prefill-chunk" in result.stderr
    assert "--kv-cache int8" not in result.stderr
