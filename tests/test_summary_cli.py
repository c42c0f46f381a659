"""``infer summarize`` of a file longer than the context (``infer/ui/summary_view.py``) on a tiny
random Qwen3 on the CPU: the note with both token counts and the batch the capacity check chose,
part summaries as they finish, the final summary on stdout, the stage times in the stats line;
``--json`` with the parts (ranges that cover the file once) and stages; ``--no-split`` and bad
``--batch`` / ``--part-tokens`` values as one-line errors; Ctrl-C during the parts."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from cli import app

# greedy with a presence penalty: a random model's replies are varied text
LONG = ["--ctx", "2k", "--device", "cpu", "--part-tokens", "16", "--max-new-tokens", "16",
        "--temperature", "0", "--presence-penalty", "2"]


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_long_file_is_summarized_in_parts_json(tiny_ckpt, book):
    path, text = book
    result = invoke("summarize", path, "--model", tiny_ckpt, *LONG, "--json")
    assert result.exit_code == 0, result.output
    obj = json.loads(result.stdout)
    assert obj["split"] is True and obj["input_chars"] == len(text)
    parts = [p for p in obj["parts"] if p["level"] == 0]
    assert len(parts) == obj["stages"]["parts"] >= 2
    assert [p["index"] for p in parts] == list(range(len(parts)))  # in text order
    assert parts[0]["chars"][0] == 0 and parts[-1]["chars"][1] == len(text)
    assert all(a["chars"][1] == b["chars"][0] for a, b in zip(parts, parts[1:], strict=False))
    assert all(p["prompt_tokens"] + 16 <= 2048 and p["summary"] for p in parts)
    assert obj["stages"]["batch"] == len(parts)  # all parts fit in one batch
    assert obj["stages"]["map_prefill_s"] > 0 and obj["stages"]["map_decode_s"] > 0
    assert obj["prompt_tokens"] + obj["new_tokens"] <= 2048 and obj["new_tokens"] == 16
    # summarize speculates by default (--speculate auto): every reply reports its drafts
    assert all(0 <= p["accepted"] <= p["drafted"] for p in obj["parts"])
    assert {"drafted", "accepted", "mean_accepted"} <= obj.keys()


def test_long_file_shows_parts_then_streams_the_summary(tiny_ckpt, book):
    path, _ = book
    result = invoke("summarize", path, "--model", tiny_ckpt, *LONG, "--batch", "2")
    assert result.exit_code == 0, result.output
    err = result.stderr
    assert "longer than the context of 2,048" in err and "tokens" in err
    assert "decoding 2 parts at a time" in err
    assert "part 1 of " in err and "part 2 of " in err
    stats = err.strip().splitlines()[-1]
    assert "parts, 2 at a time" in stats and "reduce" in stats
    assert result.stdout.strip()  # the final summary


def test_no_split_refuses_with_both_counts(tiny_ckpt, book):
    path, _ = book
    args = list(LONG)
    i = args.index("--part-tokens")
    del args[i:i + 2]  # (with --no-split it is refused: no parts)
    result = invoke("summarize", path, "--model", tiny_ckpt, *args, "--no-split")
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "prompt is" in lines[0]
    assert "context of 2,048 tokens" in lines[0]


def test_a_final_budget_too_big_for_the_context_is_refused_before_the_parts(tiny_ckpt, book):
    path, _ = book
    for budget in ("2000", "1990"):  # beyond the context; within it but not with the parts
        result = invoke("summarize", path, "--model", tiny_ckpt, *LONG, "--max-new-tokens",
                        budget)
        assert result.exit_code == 2, result.output
        assert "part 1 of" not in result.stderr and "decoding" not in result.stderr
        err = result.stderr.strip().splitlines()[-1]
        assert err.startswith("error:") and "--max-new-tokens" in err and "--ctx" in err


def test_batch_is_never_more_than_the_parts(tiny_ckpt, book):
    path, _ = book
    result = invoke("summarize", path, "--model", tiny_ckpt, *LONG, "--batch", "16", "--json")
    assert result.exit_code == 0, result.output
    obj = json.loads(result.stdout)
    assert obj["stages"]["batch"] == obj["stages"]["parts"] < 16
    assert f"summarizing the text in {obj['stages']['parts']} parts" in result.stderr


def test_bad_batch_is_refused_for_a_text_that_fits_too(tiny_ckpt, tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("A short text.\n")
    result = invoke("summarize", path, "--model", tiny_ckpt, *LONG, "--batch", "0")
    assert result.exit_code == 2 and "--batch must be 1 to 16" in result.stderr


@pytest.mark.parametrize("flags,needle", [
    (["--batch", "17"], "--batch must be 1 to 16"),
    (["--batch", "0"], "--batch must be 1 to 16"),
    (["--part-tokens", "0"], "--part-tokens must be at least 1"),
    (["--part-tokens", "1500"], "too small to summarize a text in parts"),
    (["--batch", "4", "--no-split"], "--no-split makes no parts"),  # was silently ignored
    (["--no-split"], "--part-tokens sets the length of each part's summary, and --no-split "
                     "makes no parts"),  # (the --part-tokens 16 below; was silently ignored)
])
def test_bad_split_flags_are_one_line_errors(tiny_ckpt, book, flags, needle):
    path, _ = book
    args = list(LONG)
    i = args.index("--part-tokens")
    del args[i:i + 2]
    result = invoke("summarize", path, "--model", tiny_ckpt, *args, "--part-tokens", "16",
                    *flags)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error:") and needle in lines[-1], result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("max_new", ["8", "64"], ids=["parts-bound", "final-bound"])
def test_the_stated_minimum_ctx_works_and_one_less_does_not(tiny_ckpt, book, tmp_path, max_new):
    """"raise --ctx to at least N" is the smallest --ctx that works: it said 772 where 708
    worked (64 tokens of slack). With a larger --max-new-tokens the final combining prompt and
    its reply, not the parts, set N."""
    path = tmp_path / "short.txt"
    path.write_text(book[1][:1200], encoding="utf-8")  # ~380 tokens: parts at these contexts
    flags = ["--model", tiny_ckpt, "--device", "cpu", "--part-tokens", "8", "--max-new-tokens",
             max_new, "--temperature", "0"]
    result = invoke("summarize", path, *flags, "--ctx", "100")
    assert result.exit_code == 2, result.output
    need = int(re.search(r"raise --ctx to at least ([\d,]+) ", result.stderr)[1].replace(",", ""))
    # the flag to lower is the one that sets N: --part-tokens alone cannot fix a final-bound N
    assert ("--max-new-tokens" in result.stderr) == (max_new == "64"), result.stderr
    result = invoke("summarize", path, *flags, "--ctx", need - 1)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[-1].startswith("error:"), result.stderr
    result = invoke("summarize", path, *flags, "--ctx", need, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["stages"]["parts"] >= 2


@pytest.mark.parametrize("fits, count", [(2, "2 sequences fit"), (1, "1 sequence fits"),
                                        (0, "0 sequences fit")])
def test_batch_past_memory_names_the_cache_dtype(tiny_ckpt, book, monkeypatch, fits, count):
    """``--batch`` more than fit in memory: the error names the dtype the pool stores (float32
    for ``--kv-cache bf16`` on the CPU), as the other capacity errors do, and counts what fits
    in words ("1 sequence fits", not "1 sequences fit"); also when not even one fits (the
    engine's own check may still let one sequence run: it was ignored silently)."""
    import infer.capacity

    monkeypatch.setattr(infer.capacity, "largest_batch", lambda *a, **k: fits)
    path, _ = book
    result = invoke("summarize", path, "--model", tiny_ckpt, *LONG, "--batch", "3")
    assert result.exit_code == 2, result.output
    last = result.stderr.strip().splitlines()[-1]
    assert last.endswith(" in memory with --kv-cache bf16 (float32 on the CPU)")
    assert f"does not fit: {count.rsplit(' ', 1)[0]} of --ctx " in last
    assert f" {count.rsplit(' ', 1)[1]} in memory" in last


def test_no_sequence_fitting_is_refused_by_the_engine_check(tiny_ckpt, book, monkeypatch):
    """Not one sequence of --ctx fits with a prefill chunk's working set: the host check counts
    that working set as ``largest_batch`` does, so the engine refuses it, naming the largest
    context that fits (a note used to say one part at a time, and to lower --ctx if it ran out
    of memory, when the host check counted the KV cache and the weights only)."""
    import infer.capacity

    monkeypatch.setattr(infer.capacity, "available_host_bytes", lambda: 512 << 20)
    path, _ = book
    result = invoke("summarize", path, "--model", tiny_ckpt, *LONG, "--json")
    assert result.exit_code == 2, result.output
    assert "decoding 1 part at a time" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "does not fit in host memory" in last and "prefill chunk's working set" in last, last


def ctrl_c_at_prefill(monkeypatch, start: int) -> None:
    """Ctrl-C as the ``start``-th reply (1-based) begins its prefill (a session's first chunk)."""
    from infer.engine import Session

    real, starts = Session._forward, []

    def forward(self, ids, *args, **kwargs):
        if self.num_cached == 0:
            starts.append(len(ids))
            if len(starts) == start:
                raise KeyboardInterrupt
        return real(self, ids, *args, **kwargs)

    monkeypatch.setattr(Session, "_forward", forward)


def one_part_cut_by_ctrl_c(tiny_ckpt, tmp_path, monkeypatch, flags):
    """The reference the interrupted parts are held to: a short text (one part) whose prefill
    Ctrl-C cuts."""
    short = tmp_path / "short.txt"
    short.write_text("A short text.\n")
    ctrl_c_at_prefill(monkeypatch, 1)
    return invoke("summarize", short, "--model", tiny_ckpt, *LONG, *flags)


@pytest.mark.parametrize("json_flag", [True, False])
def test_ctrl_c_during_the_parts_is_an_interrupted_result_as_in_one_part(tiny_ckpt, book,
                                                                         tmp_path, monkeypatch,
                                                                         json_flag):
    """Ctrl-C in the second part (--batch 1: the first has finished): exit 130 with the result
    so far, as a one-part summarize cut by Ctrl-C gives (the same fields, interrupted), not the
    error object."""
    path, _ = book
    flags = ["--json"] if json_flag else []
    one = one_part_cut_by_ctrl_c(tiny_ckpt, tmp_path, monkeypatch, flags)
    ctrl_c_at_prefill(monkeypatch, 2)
    result = invoke("summarize", path, "--model", tiny_ckpt, *LONG, "--batch", "1", *flags)
    assert one.exit_code == result.exit_code == 130, result.output
    assert "error" not in result.stderr and "Traceback" not in result.output
    if not json_flag:
        line = result.stderr.strip().splitlines()[-1]
        assert line.startswith("interrupted summarizing the parts: 1 of ") and "parts, 1 at" in line
        return
    obj, one_obj = json.loads(result.stdout), json.loads(one.stdout)
    assert obj.keys() == one_obj.keys() | {"stages", "parts"}
    assert obj["interrupted"] is one_obj["interrupted"] is True
    assert obj["stop_reason"] == "interrupted" and obj["text"] == "" and obj["split"] is True
    assert len(obj["parts"]) == 1 and obj["stages"]["parts"] >= 2
    assert obj["prompt_tokens"] is None  # the final reply's prompt: never formed (was 0)


HEADER = ("model", "device", "ctx", "kv_cache", "cache_dtype", "attention", "cuda_graphs",
          "page_size", "warm_up_s", "graph_capture_s")


@pytest.mark.parametrize("json_flag", [True, False])
@pytest.mark.parametrize("stage", ["split", "load", "warm"])
def test_ctrl_c_before_any_part_is_the_same_interrupted_result(tiny_ckpt, book, tmp_path,
                                                               monkeypatch, stage, json_flag):
    """Ctrl-C before the first part's prefill (splitting the text, loading the engine, warming it
    up) printed the error object ({"error": "interrupted"}); now the result a later Ctrl-C gives:
    exit 130, the same fields as a one-part summarize cut by Ctrl-C, no part finished. Before the
    engine exists its header comes from the config, as the engine would have made it."""
    from types import SimpleNamespace

    import torch

    import infer.textsplit
    import infer.ui.summary_view

    path, _ = book
    flags = ["--json"] if json_flag else []
    one = one_part_cut_by_ctrl_c(tiny_ckpt, tmp_path, monkeypatch, flags)

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    if stage == "warm":  # the warm-up as on a GPU (the CPU has none), cut in its middle
        real = infer.ui.summary_view.warm_engine

        def warm_on_a_gpu(ui, engine, sampling, **kw):
            real(ui, SimpleNamespace(device=torch.device("cuda")), sampling, **kw)

        monkeypatch.setattr("infer.warm_up.warm_up", ctrl_c)
        monkeypatch.setattr(infer.ui.summary_view, "warm_engine", warm_on_a_gpu)
    else:
        where = infer.textsplit if stage == "split" else infer.ui.summary_view
        monkeypatch.setattr(where, {"split": "split_text", "load": "load_engine"}[stage], ctrl_c)
    result = invoke("summarize", path, "--model", tiny_ckpt, *LONG, *flags)
    assert one.exit_code == result.exit_code == 130, result.output
    assert "error" not in result.output and "Traceback" not in result.output
    if not json_flag:
        line = result.stderr.strip().splitlines()[-1]
        if stage == "split":
            assert line == ("interrupted summarizing the parts: 0 finished (while splitting "
                            "the text)")
        else:
            assert line.startswith("interrupted summarizing the parts: 0 of ")
            assert "parts, 3 at a time: prefill 0.0 s, decode 0.0 s" in line
        return
    obj, one_obj = json.loads(result.stdout), json.loads(one.stdout)
    assert obj.keys() == one_obj.keys() | {"stages", "parts"}
    assert obj["interrupted"] is one_obj["interrupted"] is True
    assert obj["stop_reason"] == "interrupted" and obj["text"] == "" and obj["split"] is True
    assert obj["parts"] == [] and obj["new_tokens"] == 0 and obj["ttft_s"] is None
    assert obj["prompt_tokens"] is None
    timed = ("warm_up_s", "graph_capture_s")
    assert {k: obj[k] for k in HEADER if k not in timed} == \
        {k: one_obj[k] for k in HEADER if k not in timed}
    # not measured (no engine yet, or its warm-up cut): null, as the README says (was 0.0)
    assert obj["warm_up_s"] is None and obj["graph_capture_s"] is None
    # an engine's seconds are floats, before any graph runner too (its sum of none was int 0)
    assert all(isinstance(one_obj[k], float) for k in timed)
    assert (obj["load_s"] is None) is (stage != "warm")  # the load had not finished
    parts = obj["stages"]["parts"]
    assert (parts, obj["stages"]["batch"]) == ((None, None) if stage == "split" else (3, 3))
    assert obj["stages"]["map_prefill_s"] == obj["stages"]["map_decode_s"] == 0.0


def test_ctrl_c_inside_a_batch_counts_the_time_it_ran(tiny_ckpt, book, monkeypatch):
    """Ctrl-C at the second part's prefill, both parts in one batch: the batch never finished,
    yet its time (the first part's whole prefill) is in the stage times, not 0.0."""
    path, _ = book
    ctrl_c_at_prefill(monkeypatch, 2)
    result = invoke("summarize", path, "--model", tiny_ckpt, *LONG, "--batch", "2", "--json")
    assert result.exit_code == 130, result.output
    obj = json.loads(result.stdout)
    assert obj["parts"] == [] and obj["stages"]["map_prefill_s"] > 0
