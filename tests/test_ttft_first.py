"""``benchmarks/ttft_first.py`` on the CPU with the tiny checkpoint: one process per
``--capture-ahead`` value, one line each with the three replies' first-token times."""

from __future__ import annotations

import json

from benchmarks import ttft_first


def test_ttft_first_lines(tiny_ckpt, capsys):
    ttft_first.main(["--ckpt", str(tiny_ckpt), "--tokens", "40", "--new", "2", "--ctx", "256",
                     "--device", "cpu", "--capture-ahead", "16"])
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert line["bench"] == "ttft_first" and line["capture_ahead"] == 16
    assert line["tokens"] == 40 and line["capture_s"] == 0.0  # no graphs on the CPU
    assert min(line[f"{k}_ttft_s"] for k in ("first", "second", "third")) > 0
    # rounded before and after the subtraction: within one unit of the last place
    assert abs(line["first_minus_second_s"]
               - (line["first_ttft_s"] - line["second_ttft_s"])) <= 0.0015


def test_ttft_first_timeline_and_profile(tiny_ckpt, capsys):
    """``--timeline``: one row per prefill chunk, in order, each ending after it starts;
    ``--profile``: the header line and the N functions."""
    ttft_first.main(["--ckpt", str(tiny_ckpt), "--tokens", "40", "--new", "2", "--ctx", "256",
                     "--device", "cpu", "--capture-ahead", "16", "--timeline", "--profile", "5"])
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    for key in ("first_timeline", "second_timeline"):
        chunks = line[key]["chunks"]
        assert len(chunks) >= 1
        # prepare runs once per reply (on the CPU it captures nothing)
        assert [c[0] <= c[1] for c in line[key]["capture"]] == [True]
        for start, end, done in chunks:
            assert 0 <= start <= end <= done
        assert all(a[1] <= b[0] for a, b in zip(chunks, chunks[1:], strict=False))
    prof = line["first_profile"]
    assert prof[0].startswith("ncalls") and len(prof) == 6
