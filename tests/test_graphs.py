"""CUDA-graph decode (``infer/graphs.py``) and its wiring into the engine, config and CLI, on the
CPU: config/CLI validation, and the ``GraphRunner`` without capture (the same static-buffer step,
run eagerly: the one decode path on a CPU), on the ``SumModel`` mock (any misplaced page, slot or
position shows up as a wrong token) and on a tiny random Qwen3 (sampling and presence state).
Captured graphs on a GPU are ``test_graphs_gpu.py``'s.
"""

from __future__ import annotations

import json

import pytest
from mock_engine import (
    GREEDY,
    NO_STOP,
    SAMPLED,
    SumModel,
    expected,
    mock_engine,
    prompt_of,
    random_ids,
)
from typer.testing import CliRunner

from infer import Engine, EngineConfig, SamplingParams
from infer.graphs import GraphRunner
from infer.step_buffers import graph_key


def graph_mock_engine(**kw):
    """The mock engine with the runner switched on (no capture on the CPU)."""
    eng = mock_engine(**kw)
    eng.cuda_graphs = True
    return eng


# ---------------------------------------------------------------------------- config and CLI


def test_config_cuda_graphs_resolution_and_errors():
    def use(**kw):
        return EngineConfig("m", **kw).use_cuda_graphs

    assert not use(device="cpu")
    assert use(device="cuda") and use(device="cuda", attention="triton")
    assert not use(device="cuda", attention="reference")
    assert not use(device="cuda", cuda_graphs=False)
    assert use(device="cuda:1", attention="triton", cuda_graphs=True)
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device.*drop --cuda-graphs"):
        EngineConfig("m", device="cpu", cuda_graphs=True)
    with pytest.raises(ValueError, match="triton attention backend"):
        EngineConfig("m", device="cuda", attention="reference", cuda_graphs=True)
    with pytest.raises(ValueError, match="cuda_graphs must be"):
        EngineConfig("m", device="cuda", cuda_graphs="yes")


def test_runner_capture_needs_cuda():
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device"):
        GraphRunner(SumModel(), None, vocab_size=8, page_size=16, max_pages=2, device="cpu")


def test_cli_cuda_graphs_flag(tiny_ckpt):
    from cli import app

    bad = CliRunner().invoke(app, ["generate", str(tiny_ckpt), "hi", "--device", "cpu",
                                   "--cuda-graphs"])
    assert bad.exit_code == 2 and "CUDA graphs need a CUDA device" in bad.output
    ok = CliRunner().invoke(app, ["generate", str(tiny_ckpt), "hi", "--device", "cpu", "--ctx",
                                  "1k", "--max-new-tokens", "2", "--json", "--no-cuda-graphs"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["cuda_graphs"] is False


def test_graph_key_drops_seed_budget_and_unused_greedy_fields():
    a = SAMPLED.replace(seed=1, max_new_tokens=5)
    assert graph_key(a) == graph_key(SAMPLED.replace(seed=2)) != graph_key(GREEDY)
    assert graph_key(GREEDY.replace(top_k=5, top_p=0.5)) == graph_key(GREEDY)
    assert graph_key(GREEDY.replace(presence_penalty=1.0)) != graph_key(GREEDY)
    assert graph_key(SAMPLED.replace(ignore_eos=True)) == graph_key(SAMPLED)  # host-side only


# ---------------------------------------------------------------------------- runner, no capture


@pytest.mark.parametrize("length", [1, 15, 16, 17])
def test_runner_steps_through_pages(length):
    eng = graph_mock_engine(page_size=16, chunk=7)
    s = eng.new_session()
    p = prompt_of(length)
    out = list(s.generate(p, GREEDY.replace(max_new_tokens=40)))  # crosses 2-3 pages
    assert out == expected(p, 40)
    assert s.cached_ids == p + out[:-1]
    assert eng.graph_runner().num_graphs == 0  # nothing captured on the CPU
    assert eng.model.calls[-39:] == [1] * 39  # each decode step is one 1-token forward


def test_runner_multi_turn_close_and_switching_modes():
    eng = graph_mock_engine(chunk=7)
    s = eng.new_session()
    p1 = prompt_of(20)
    r1 = list(s.generate(p1, GREEDY.replace(max_new_tokens=5)))
    p2 = p1 + r1 + prompt_of(9, seed=1)
    gen = s.generate(p2, GREEDY.replace(max_new_tokens=30))
    got = [next(gen) for _ in range(4)]
    gen.close()
    # graph steps run one token ahead: the 4th token was fed before it was yielded
    assert s.stats.stop_reason == "interrupted" and s.cached_ids == p2 + got
    eng.cuda_graphs = False  # the same session and cache, eager
    p3 = p2 + got + prompt_of(5, seed=2)
    assert list(s.generate(p3, GREEDY.replace(max_new_tokens=6))) == expected(p3, 6)
    eng.cuda_graphs = True
    p4 = p3 + prompt_of(3, seed=3)
    assert list(s.generate(p4, GREEDY.replace(max_new_tokens=20))) == expected(p4, 20)


def test_runner_runs_one_step_ahead_and_drops_a_fed_stop_id():
    p = prompt_of(11, seed=1)
    free = expected(p, 40)
    stop = free[5]  # the 6th token (not among the first 5); position 16, the first of page 2
    assert stop not in free[:5]
    eng = graph_mock_engine(page_size=16, stop={stop})
    s = eng.new_session()
    gen = s.generate(p, GREEDY)
    first = next(gen)
    # the step that feeds the first token ran before the host got that token
    assert first == free[0] and eng.model.calls == [11, 1] and s.cached_ids == p + [first]
    out = [first, *gen]
    assert out == expected(p, 40, {stop}) and s.stats.stop_reason == "stop"
    # the stop id was fed at position len(p) + len(out) (a new page) by the step run ahead;
    # afterwards it is neither cached nor holding that page
    n = len(p) + len(out)
    assert eng.model.calls[1:] == [1] * (len(out) + 1)
    assert s.cached_ids == p + out and len(s._pages) == eng.pool.pages_for(n)
    assert eng.pool.num_free_pages == eng.pool.num_pages - eng.pool.pages_for(n)
    # the next turn reuses the cache and continues exactly as a fresh session would
    p2 = p + out + prompt_of(4, seed=6)
    fresh = graph_mock_engine(page_size=16, stop={stop}).new_session()
    assert list(s.generate(p2, GREEDY.replace(max_new_tokens=9))) == \
        list(fresh.generate(p2, GREEDY.replace(max_new_tokens=9)))


def test_runner_stop_id_on_a_full_pool_needs_no_page():
    # Session a's stop id falls on a new page while session b holds every other page: the
    # step is not run ahead (no page), the host reads the stop id first, as the eager loop does.
    p = prompt_of(11, seed=1)
    stop = expected(p, 40)[5]  # position 16: the first of a second page
    for graphs in (True, False):
        eng = mock_engine(ctx=32, page_size=16, stop={stop})  # 3 pages
        eng.cuda_graphs = graphs
        a, b = eng.new_session(), eng.new_session()
        assert len(list(b.generate(prompt_of(20, seed=7), GREEDY.replace(max_new_tokens=1)))) == 1
        assert eng.pool.num_free_pages == 1
        out = list(a.generate(p, GREEDY))
        assert out == expected(p, 40, {stop}) and a.stats.stop_reason == "stop", graphs
        assert eng.pool.num_free_pages == 0 and a.cached_ids == p + out


def test_runner_interrupt_inside_a_step_keeps_session_consistent():
    model = SumModel(fail_on_call=5)  # prefill 20 in chunks of 7 = 3 calls; decode call 2
    eng = graph_mock_engine(chunk=7, model=model)
    s = eng.new_session()
    p = prompt_of(20)
    with pytest.raises(KeyboardInterrupt):
        list(s.generate(p, GREEDY.replace(max_new_tokens=10)))
    assert s.stats.stop_reason == "interrupted"
    assert s.cached_ids == (p + expected(p, 10))[:21]
    model.fail_on_call = None
    assert list(s.generate(p, GREEDY.replace(max_new_tokens=10))) == expected(p, 10)


def test_runner_context_full_and_two_sessions():
    eng = graph_mock_engine(ctx=48, page_size=16)
    a, b = eng.new_session(), eng.new_session()
    pa, pb = prompt_of(30), prompt_of(9, seed=4)
    out = list(a.generate(pa))
    assert a.stats.stop_reason == "context" and out == expected(pa, 48 - 30)
    a.reset()
    ga, gb = a.generate(pa, GREEDY.replace(max_new_tokens=5)), b.generate(pb, GREEDY)
    next(ga)
    next(gb)  # a second reply begins on the same runner
    with pytest.raises(RuntimeError, match="one reply at a time"):
        next(ga)
    assert a.stats.stop_reason == "interrupted"
    assert [next(gb) for _ in range(3)] == expected(pb, 4)[1:]
    # also when the paused reply's next token is its last (no step left to run): its token
    # would be read from the runner's buffers, which the other reply now owns
    gb.close()
    a.reset()
    ga, gb = a.generate(pa, GREEDY.replace(max_new_tokens=2)), b.generate(pb, GREEDY)
    next(ga)
    next(gb)
    with pytest.raises(RuntimeError, match="one reply at a time"):
        next(ga)


@pytest.mark.parametrize("sp", [GREEDY, GREEDY.replace(presence_penalty=2.0),
                                SAMPLED.replace(seed=3)], ids=["greedy", "presence", "sampled"])
def test_runner_matches_eager_on_tiny_qwen3(tiny_cpu, sp):
    def run(graphs: bool) -> list[list[int]]:  # two replies: state is reset between them
        cfg = EngineConfig("unused", ctx=256, page_size=16, device="cpu", attention="reference")
        eng = Engine(cfg, model=tiny_cpu, tokenizer=NO_STOP)
        eng.cuda_graphs = graphs
        return [list(eng.new_session().generate(random_ids(13, seed),
                                                sp.replace(max_new_tokens=24)))
                for seed in (0, 0)]

    eager = run(False)
    assert run(True) == eager and len(eager[0]) == 24
    assert eager[0] == eager[1]
    if sp.presence_penalty and sp.greedy:
        assert len(set(eager[0])) > 12  # the penalty is live (a random greedy loop repeats)


def test_runner_keyed_draws_on_a_cpu(monkeypatch):
    """Keyed draws forced on a CPU runner (the top-k kernels in the interpreter): step ``i`` of a
    reply stages ``row_keys(seed, i, bucket)``, the steps draw from them (only the eager first
    token draws the generator's noise), a seeded reply is the same twice and another seed
    changes it. (That a keyed step is captured without the generator is a GPU test's.)"""
    from keyed_helpers import keyed_draws_on_cpu

    import infer.noise_keys as noise_keys
    import infer.sampling as sampling
    from infer.step_io import StepIO

    keyed_draws_on_cpu(monkeypatch)
    staged, real_stage = [], StepIO.stage

    def stage(self, bucket, tokens, rows, drafts=None, keys=None):
        staged.append(keys)
        return real_stage(self, bucket, tokens, rows, drafts, keys)

    monkeypatch.setattr(StepIO, "stage", stage)
    draws, real_noise = [], sampling._noise
    monkeypatch.setattr(sampling, "_noise", lambda *a: draws.append(1) or real_noise(*a))
    eng = graph_mock_engine()
    # a hot temperature: SumModel's one-hot logits leave the draw random
    hot = SamplingParams(temperature=5.0, top_k=20, max_new_tokens=12)

    def reply(seed: int) -> list[int]:
        staged.clear()
        return list(eng.new_session().generate(prompt_of(13), hot.replace(seed=seed)))

    a = reply(5)
    assert staged == [noise_keys.row_keys(5, i, 1) for i in range(len(staged))]
    assert len(staged) == 11 and len(draws) == 1  # the first token: eagerly, the generator
    assert reply(5) == a and reply(6) != a
    runner = eng.graph_runner()
    assert runner.noise.keyed(hot) and not runner.noise.keyed(GREEDY)
    assert not runner.noise.keyed(SAMPLED)  # a presence penalty: the torch path and the generator
