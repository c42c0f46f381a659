"""Speculative decoding on the GPU (``-m gpu``): the verify step's rows equal one-row steps bit
for bit (BF16 and INT8, graphs and eager, every verify bucket), a reply over 1000 tokens equals
its non-speculative twin, seeded sampling with speculation is the same with graphs as eagerly,
and a batch of speculative replies equals each reply alone."""

from __future__ import annotations

import pytest
import torch
from mock_engine import GREEDY, NO_STOP
from spec_helpers import TailLookup, batch_and_alone

import infer.verify_step as verify_step
from infer import Engine, EngineConfig, SamplingParams


def _gpu_engine(model, kv_cache, ctx=8192, graphs=True, max_batch=1):
    cfg = EngineConfig("unused", ctx=ctx, kv_cache=kv_cache, page_size=64, device="cuda",
                       attention="triton", cuda_graphs=graphs, max_batch=max_batch)
    return Engine(cfg, model=model, tokenizer=NO_STOP)


@pytest.mark.gpu
@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "eager"])
def test_gpu_verify_rows_equal_one_row_steps(gpu_qwen3_4l, kv_cache, graphs):
    """Row t of a k+1-row verify step gives the logits of the one-row step at its position, bit
    for bit, for every verify bucket, across a page boundary (position 3000 + t)."""
    eng = _gpu_engine(gpu_qwen3_4l, kv_cache, graphs=graphs)
    s = eng.new_session()
    prompt = torch.randint(0, 151669, (3000,), generator=torch.Generator().manual_seed(0))
    list(s.generate(prompt.tolist(), GREEDY.replace(max_new_tokens=1)))
    runner = eng.graph_runner()
    pos = s.num_cached
    ticket, _, _ = runner.begin(GREEDY, [s._pages])
    from infer.meta import grow_pages
    grow_pages(eng.pool, s._pages, pos + 16)
    fed = torch.randint(0, 151669, (16,), generator=torch.Generator().manual_seed(1)).tolist()
    for width in (2, 4, 8, 16):
        runner.step(ticket, fed[:width], [(s._pages, pos + t) for t in range(width)])
        many = runner.logits[:width].clone()
        for t in range(width):
            runner.step(ticket, [fed[t]], [(s._pages, pos + t)])
            assert torch.equal(runner.logits[0], many[t]), (width, t)


@pytest.mark.gpu
@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_gpu_speculation_equals_plain_over_1000_tokens(gpu_qwen3_4l, kv_cache):
    eng = _gpu_engine(gpu_qwen3_4l, kv_cache)
    phrase = torch.randint(0, 151669, (40,), generator=torch.Generator().manual_seed(2)).tolist()
    prompt = phrase * 50  # 2000 tokens that repeat: drafts to accept
    sp = GREEDY.replace(max_new_tokens=1000)
    plain = list(eng.new_session().generate(prompt, sp))
    s = eng.new_session()
    spec = list(s.generate(prompt, sp, speculate=True))
    assert spec == plain and len(spec) == 1000
    assert s.stats.accepted > 0


@pytest.mark.gpu
def test_gpu_seeded_sampling_with_speculation_graphs_equal_eager(gpu_qwen3_4l, monkeypatch):
    """Verify buckets captured in the middle of a reply leave the generator's stream as it was:
    a seeded speculative reply is the same with graphs (first reply: captures happen; second:
    none) as eagerly."""
    monkeypatch.setattr(verify_step, "PromptLookup", TailLookup)
    prompt = list(range(1000, 1040)) * 10
    sp = SamplingParams(temperature=0.8, top_k=50, seed=5, max_new_tokens=96)
    graphs = _gpu_engine(gpu_qwen3_4l, "bf16", ctx=2048)
    eager = _gpu_engine(gpu_qwen3_4l, "bf16", ctx=2048, graphs=False)
    runs = []
    for eng in (graphs, graphs, eager):
        s = eng.new_session()
        runs.append(list(s.generate(prompt, sp, speculate=True)))
        assert s.stats.verify_steps > 0
    assert runs[0] == runs[1] == runs[2]


@pytest.mark.gpu
@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_gpu_batch_speculation_equals_each_reply_alone(gpu_qwen3_4l, kv_cache):
    """Three repetitive prompts decoded as one batch with speculation (drafts of several
    sequences share the step's 16 rows) give each the tokens of its plain reply alone."""
    eng = _gpu_engine(gpu_qwen3_4l, kv_cache, max_batch=4)
    out, alone, sessions = batch_and_alone(eng, ((30, 20), (45, 12), (17, 40)), 300)
    assert out == alone
    assert sum(s.stats.accepted for s in sessions) > 0
