"""CUDA-graph decode (``infer/graphs.py``) on a GPU (``-m gpu``): captured graphs against eager
decode, both with the Triton backend, on a tiny and a 4-layer 0.6B-shaped random Qwen3 in
bfloat16, BF16 and INT8 caches, page size 16. The runner without capture, on the CPU, is
``test_graphs.py``'s.
"""

from __future__ import annotations

import pytest
import torch
from mock_engine import GREEDY, NO_STOP, SAMPLED, VOCAB_LIMIT, random_ids

from infer import Engine, EngineConfig, SamplingParams
from infer.graphs import MAX_GRAPHS
from infer.meta import build_meta
from infer.sampling import sample

QWEN3_SAMPLING = SamplingParams(temperature=0.6, top_k=20, top_p=0.95)  # keyed draws


def gpu_engine(model, kv_cache: str, graphs: bool, ctx: int = 512) -> Engine:
    cfg = EngineConfig("unused", ctx=ctx, kv_cache=kv_cache, page_size=16, device="cuda",
                       attention="triton", cuda_graphs=graphs)
    eng = Engine(cfg, model=model, tokenizer=NO_STOP)
    assert eng.cuda_graphs is graphs
    return eng


@pytest.mark.gpu
@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
@pytest.mark.parametrize("presence", [0.0, 1.5])
def test_gpu_greedy_graph_equals_eager(gpu_bf16_model, kv_cache, presence):
    p = random_ids(40)  # + 64 new tokens: pages 3..7 are added during decode
    sp = GREEDY.replace(max_new_tokens=64, presence_penalty=presence)
    eager = list(gpu_engine(gpu_bf16_model, kv_cache, False).new_session().generate(p, sp))
    eng = gpu_engine(gpu_bf16_model, kv_cache, True)
    graph = list(eng.new_session().generate(p, sp))
    assert len(eager) == 64
    assert graph == eager
    assert eng.graph_runner().num_graphs == 1


def stored_at(pool, page: int, off: int) -> list[torch.Tensor]:
    """Copies of every layer's K/V (and INT8 scales) at one slot."""
    return [t[page, :, off].clone() for c in pool.layers
            for t in (c.k, c.v, c.k_scale, c.v_scale) if t is not None]


@pytest.mark.gpu
@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_gpu_replay_is_bit_exact(gpu_bf16_model, kv_cache):
    """Each replay's hidden state, logits, sampled id and stored K/V equal an eager forward of
    the same token at the same position, bit for bit (positions 40..51 cross a page)."""
    eng = gpu_engine(gpu_bf16_model, kv_cache, True)
    model, pool = eng.model, eng.pool
    n = 40
    pages = pool.allocate(pool.pages_for(n))
    meta = build_meta([(pages, 0, n)], 16, "cuda")
    with torch.inference_mode():
        model.forward(torch.tensor(random_ids(n), device="cuda"), meta.positions, eng.attn, meta)
    runner = eng.graph_runner()
    ticket, _, _ = runner.begin(GREEDY, [pages])
    tok = torch.tensor([1234], device="cuda")
    for pos in range(n, n + 12):
        if pool.pages_for(pos + 1) > len(pages):
            pages += pool.allocate(1)
        nxt = runner.step(ticket, tok, [(pages, pos)]).clone()
        hidden, logits = runner.hidden.clone(), runner.logits.clone()
        page, off = pages[pos // 16], pos % 16
        stored = stored_at(pool, page, off)
        m = build_meta([(pages, pos, 1)], 16, "cuda")
        with torch.inference_mode():
            h = model.forward(tok, m.positions, eng.attn, m)
            lg = model.compute_logits(h[-1:])
            want = sample(lg, GREEDY, vocab_limit=VOCAB_LIMIT)
        again = stored_at(pool, page, off)
        assert torch.equal(hidden, h) and torch.equal(logits, lg), f"position {pos}"
        assert torch.equal(nxt, want)
        assert all(torch.equal(a, b) for a, b in zip(stored, again, strict=True))
        tok = nxt


@pytest.mark.gpu
@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "generator"])
def test_gpu_seeded_sampling_reproducible(gpu_bf16_model, keyed, monkeypatch):
    """Qwen3's sampling (top-k 20: keyed draws, ``infer.noise_keys.KEYED_NOISE``) and the same
    with the generator's noise; a keyed step is captured without the generator."""
    import infer.graph_capture as graph_capture
    import infer.noise_keys as noise_keys

    monkeypatch.setattr(noise_keys, "KEYED_NOISE", keyed)
    gens, real = [], graph_capture.capture_step
    monkeypatch.setattr(graph_capture, "capture_step", lambda *a, **kw: gens.append(
        kw["generator"]) or real(*a, **kw))
    eng = gpu_engine(gpu_bf16_model, "bf16", True)
    p = random_ids(30, seed=1)

    def run(seed):
        sp = QWEN3_SAMPLING.replace(seed=seed, max_new_tokens=48)
        return list(eng.new_session().generate(p, sp))

    a, b, c = run(7), run(7), run(8)
    assert a == b and a != c
    assert all(t < VOCAB_LIMIT for t in a + c)
    assert eng.graph_runner().num_graphs == 1
    assert gens == [None if keyed else eng.graph_runner().noise.generator]


@pytest.mark.gpu
@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "generator"])
def test_gpu_seeded_sampling_graph_equals_eager(gpu_bf16_model, keyed, monkeypatch):
    """Keyed draws read the same keys in a graph and eagerly; without them torch replays a
    registered generator's Philox offsets exactly as eager ops consume them. Either way, with
    bit-exact logits the sampled reply is the same with and without graphs."""
    import infer.noise_keys as noise_keys

    monkeypatch.setattr(noise_keys, "KEYED_NOISE", keyed)
    p = random_ids(30, seed=2)
    sp = QWEN3_SAMPLING.replace(seed=11, max_new_tokens=48)
    eager = list(gpu_engine(gpu_bf16_model, "bf16", False).new_session().generate(p, sp))
    assert list(gpu_engine(gpu_bf16_model, "bf16", True).new_session().generate(p, sp)) == eager


@pytest.mark.gpu
@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_gpu_multi_turn_session_graph_equals_eager(gpu_bf16_model, kv_cache):
    def conversation(eng: Engine) -> list:
        s = eng.new_session()
        p1 = random_ids(30, seed=3)
        r1 = list(s.generate(p1, GREEDY.replace(max_new_tokens=24)))
        p2 = p1 + r1 + random_ids(20, seed=4)
        gen = s.generate(p2, GREEDY.replace(max_new_tokens=40))
        r2 = [next(gen) for _ in range(10)]
        gen.close()  # Ctrl-C mid-reply
        p3 = p2 + r2 + random_ids(7, seed=5)
        r3 = list(s.generate(p3, SAMPLED.replace(seed=5, max_new_tokens=30)))
        return [r1, r2, r3, s.cached_ids], s.stats.reused_tokens

    eng = gpu_engine(gpu_bf16_model, kv_cache, True)
    (graph, reused_graph), (eager, reused_eager) = (
        conversation(eng), conversation(gpu_engine(gpu_bf16_model, kv_cache, False)))
    assert graph == eager
    # both run one token ahead (one decode loop): the 10th token was fed before the close, so it
    # is cached and reused in the third turn
    assert reused_graph == reused_eager
    assert eng.graph_runner().num_graphs == 2


@pytest.mark.gpu
def test_gpu_graphs_per_sampling_mode_are_bounded(gpu_bf16_model):
    eng = gpu_engine(gpu_bf16_model, "bf16", True)
    p = random_ids(20, seed=6)
    modes = [GREEDY] + [SAMPLED.replace(top_k=k) for k in range(1, MAX_GRAPHS + 1)]
    for sp in modes + modes[:1]:
        list(eng.new_session().generate(p, sp.replace(seed=0, max_new_tokens=4)))
    assert eng.graph_runner().num_graphs == MAX_GRAPHS
    greedy = list(eng.new_session().generate(p, GREEDY.replace(max_new_tokens=20)))
    eager = gpu_engine(gpu_bf16_model, "bf16", False)
    assert greedy == list(eager.new_session().generate(p, GREEDY.replace(max_new_tokens=20)))
