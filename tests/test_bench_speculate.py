"""``infer bench --speculate`` (``infer/bench.py``: each length decoded again with speculation,
the same greedy tokens expected) on the CPU: the phrase prompt, ``run_bench`` on the tiny Qwen3 and
on a mock engine (warm-up order, a difference reported), the JSON fields and the table's columns.
The rest of ``infer bench``: ``test_bench.py``."""

from __future__ import annotations

import json

from cli_helpers import invoke

from infer.bench import SPEC_FIELDS, bench_prompt, phrase_prompt

CPU = ["--device", "cpu", "--ctx", "1k"]


def test_phrase_prompt_repeats_a_seeded_phrase():
    a = phrase_prompt(150, 97)
    assert a == phrase_prompt(150, 97) and len(a) == 150 and a != phrase_prompt(150, 97, seed=1)
    assert a[:64] == bench_prompt(64, 97) and a[64:128] == a[:64] and a[128:] == a[:22]


def test_run_bench_speculates_on_tiny_qwen3(tiny_cpu):
    """Each length decoded again with speculation: the same greedy tokens, drafts made."""
    from mock_engine import NO_STOP

    from infer import Engine, EngineConfig
    from infer.bench import run_bench

    cfg = EngineConfig("unused", ctx=512, page_size=16, device="cpu", attention="reference")
    eng = Engine(cfg, model=tiny_cpu, tokenizer=NO_STOP)
    results = list(run_bench(eng, [64, 130], tokens=24, speculate=True))
    assert [r.prompt_tokens for r in results] == [64, 130]
    assert all(r.spec_fraction_of_ceiling is None for r in results)  # no ceiling on the CPU
    eng.ceiling_tokens_per_s = lambda num_cached, batch=1: 1000.0  # as on a GPU
    with_ceiling = next(run_bench(eng, [64], tokens=24, speculate=True))
    assert with_ceiling.spec_fraction_of_ceiling == \
        with_ceiling.spec_decode_tokens_per_s / 1000.0
    assert with_ceiling.fraction_of_ceiling == with_ceiling.decode_tokens_per_s / 1000.0
    for r in results:
        assert r.identical is True and r.new_tokens == 24
        assert r.drafted > 0 and 0 <= r.accepted <= r.drafted
        assert r.spec_decode_tokens_per_s > 0 and r.decode_tokens_per_s > 0
        assert r.speedup == r.spec_decode_tokens_per_s / r.decode_tokens_per_s
        assert isinstance(r.mean_accepted, float) and r.mean_accepted >= 0
        assert set(SPEC_FIELDS) <= r.to_dict().keys()
    plain = next(run_bench(eng, [64], tokens=3))
    assert plain.identical is None and not set(SPEC_FIELDS) & plain.to_dict().keys()


def test_speculative_warm_up_runs_before_timing_and_a_difference_is_reported(monkeypatch):
    """One untimed speculative reply (after the verify buckets are prepared) precedes the timed
    ones; tokens that differ with speculation give ``identical`` False, not an error."""
    from mock_engine import mock_engine

    import infer.bench
    from infer.graphs import GraphRunner

    engine = mock_engine(ctx=256, chunk=16)
    calls, real_reply, in_reply = [], infer.bench._reply, []
    prepared = []  # by the bench itself, outside a reply's own prefill: (rows, replies before)
    monkeypatch.setattr(GraphRunner, "prepare", lambda self, sp, rows, verify=False:
                        None if in_reply else prepared.append((rows, len(calls))))

    def reply(engine, ids, sampling, speculate=False):
        calls.append((len(ids), sampling.max_new_tokens, speculate))
        in_reply.append(1)
        try:
            st, out = real_reply(engine, ids, sampling, speculate)
        finally:
            in_reply.pop()
        return st, [t + 1 for t in out] if speculate else out

    monkeypatch.setattr(infer.bench, "_reply", reply)
    [r] = infer.bench.run_bench(engine, [40], tokens=6, speculate=True)
    assert calls == [(40, 2, False), (40, 6, True), (40, 6, False), (40, 6, True)]
    # every bucket, after the plain warm-up and before the speculative one
    assert prepared == [(rows, 1) for rows in engine.graph_runner().buckets]
    assert r.identical is False and r.drafted > 0


def test_bench_speculate_json_has_the_fields(tiny_ckpt):
    result = invoke("bench", tiny_ckpt, *CPU, "--lengths", "100", "--tokens", "12",
                    "--speculate", "--json")
    assert result.exit_code == 0, result.output
    [r] = json.loads(result.stdout)["results"]
    assert set(SPEC_FIELDS) <= r.keys() and r["identical"] is True
    assert r["drafted"] > 0 and 0 <= r["accepted"] <= r["drafted"]
    assert r["spec_decode_tokens_per_s"] > 0 and r["speedup"] == round(r["speedup"], 3)
    assert "warning" not in result.stderr


def test_bench_speculate_table_and_a_difference_on_stderr(tiny_ckpt, monkeypatch):
    import infer.bench

    monkeypatch.setenv("COLUMNS", "60")  # ten columns need ~120: printed unclipped anyway

    real = infer.bench._reply

    def reply(engine, ids, sampling, speculate=False):
        st, out = real(engine, ids, sampling, speculate)
        return st, out[:-1] if speculate else out

    monkeypatch.setattr(infer.bench, "_reply", reply)
    result = invoke("bench", tiny_ckpt, *CPU, "--lengths", "64", "--tokens", "6", "--speculate")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()  # title, blank, header, rule, the row
    assert lines[2].split()[-9:] == ["ceiling", "spec", "tok/s", "spec", "of", "ceiling",
                                     "speedup", "accepted", "same"]
    cells = lines[4].split()
    assert cells[0] == "64" and cells[-3].endswith("x") and "/" in cells[-2] and cells[-1] == "NO"
    assert "…" not in result.stdout
    assert "speculation changed the greedy tokens at 64 tokens" in result.stderr
