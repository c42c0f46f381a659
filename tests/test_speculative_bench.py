"""``benchmarks/speculative.py`` on the CPU with the tiny checkpoint: one text, a few tokens; the
per-text and summary lines carry the speedup, the ceiling fields (None on the CPU), the lookup's
guess sources and the reply's head, and the replies with and without speculation agree."""

from __future__ import annotations

import json

from benchmarks import speculative


def test_speculative_bench_lines(tiny_ckpt, tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat. " * 40, encoding="utf-8")
    speculative.main(["--ckpt", str(tiny_ckpt), "--text", str(text), "--device", "cpu",
                      "--kv", "bf16", "--ctx", "512", "--max-new", "6"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    row, summary = lines
    assert row["identical"] and row["new_tokens"] == 6 and row["ceiling_tok_s"] is None
    g = row["lookup_guesses"]
    assert g["tokens"] == 6 and sum(g[k] for k in ("from_prompt", "from_reply", "wrong",
                                                   "no_match")) == 6
    assert isinstance(row["reply_head"], str)
    assert summary["summary"] and summary["all_identical"] and summary["texts"] == 1
    assert summary["lookup_from_prompt"] == round(g["from_prompt"] / 6, 3)
    assert "spec_over_ceiling_total" not in summary  # no ceiling on the CPU
