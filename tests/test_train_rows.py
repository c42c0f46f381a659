"""The training rows of ``benchmarks/train_small_qwen3.py`` that teach copying and quoting, on
the CPU: copying rows of text chunks (``sample_batch``'s ``chunk_frac``), summary requests
answered by quoting the text (``benchmarks/small_lm_summaries.py``), and a tiny run with them.
"""

from __future__ import annotations

import sys

import pytest
import torch
from conftest import REPO, TEXTS_DIR, TOKENIZER_DIR

sys.path.insert(0, str(REPO))  # the benchmarks are scripts of the repo, not an installed package

from test_train_small import TINY  # noqa: E402

from benchmarks.heldout_texts import token_stream, train_texts  # noqa: E402
from benchmarks.small_lm_train import sample_batch  # noqa: E402
from benchmarks.train_small_qwen3 import main  # noqa: E402

pytestmark = pytest.mark.skipif(
    not TEXTS_DIR.is_dir() or not (TOKENIZER_DIR / "tokenizer.json").is_file(),
    reason=f"shared texts or tokenizer not found under {TEXTS_DIR.parent} (set INFER_SHARED)")


def test_chunked_copying_rows_repeat_runs_of_text():
    data = torch.arange(5000)
    rows = sample_batch(data, torch.Generator().manual_seed(2), 40, 199, 0.5, chunk_frac=0.5,
                        chunk_len=(8, 12))
    plain = sample_batch(data, torch.Generator().manual_seed(2), 40, 199, 0.5)
    assert torch.equal(rows[:10], plain[:10]) and torch.equal(rows[20:], plain[20:])
    for row in rows[10:20]:  # the chunked half of the copying rows
        p = next(p for p in range(1, 101) if torch.equal(row[p:], row[:-p]))
        assert 16 <= p <= 100
        steps = (row[1:p] - row[:p - 1]).tolist()
        runs, n = [], 1
        for d in steps:
            if d == 1:
                n += 1
            else:
                runs.append(n)
                n = 1
        # runs of one chunk length C in 8..12 (a chunk may continue into the next by chance)
        assert all(r >= 8 for r in runs) and min(runs) <= 12 and len(runs) >= (p - 1) // 24
    for row in rows[:10]:  # single random tokens: almost never two in a row
        p = next(p for p in range(1, 101) if torch.equal(row[p:], row[:-p]))
        assert int(((row[1:p] - row[:p - 1]) == 1).sum()) <= 2


def test_summary_rows_are_requests_answered_by_quoting_the_text(tok):
    from benchmarks.small_lm_summaries import _SENTENCE_END, summary_rows
    from infer.summary_prompts import PART_PROMPT, SUMMARY_PROMPT

    texts = train_texts(TEXTS_DIR)[2:3]  # pride_and_prejudice
    ids = token_stream(texts, tok)
    rows = summary_rows(texts, tok, ids, 12, 400, seed=0)
    assert rows.shape == (12, 400) and torch.equal(rows, summary_rows(texts, tok, ids, 12, 400, 0))
    head = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    kinds, gaps, newlines = set(), 0, 0
    for row in rows.tolist():
        text = tok.decode(row)
        assert text.startswith("<|im_start|>user\n") and text.count(head) == 1
        request, after = text.split(head)
        user = request.split("<|im_start|>user\n", 1)[1]
        kinds.add("whole" if user.startswith(SUMMARY_PROMPT[:40])
                  else "part" if user.startswith(PART_PROMPT[:25]) else user[:40])
        doc = request.split("---\n", 1)[1].rsplit("\n---", 1)[0]
        reply = after.split("<|im_end|>\n", 1)[0]
        prompt_ids = tok.chat_ids([{"role": "user", "content": user}], enable_thinking=False)
        assert row[:len(prompt_ids)] == prompt_ids  # exactly what infer summarize sends
        assert doc in texts[0]  # the text's characters verbatim, line breaks and all
        doc_sentences = _SENTENCE_END.split(doc)
        assert reply.startswith(doc_sentences[0]) and len(reply) <= len(doc)
        quoted = _SENTENCE_END.split(reply)  # the document's sentences, verbatim, in its order
        at = [doc_sentences.index(q) for q in quoted]
        assert at == sorted(set(at))
        gaps += at != list(range(len(at)))
        newlines += "\n" in reply
    assert kinds == {"whole", "part"}  # SUMMARY_PROMPT, and PART_PROMPT one time in three
    assert gaps > 0 and newlines > 0  # sentences skipped; quotes keep the source's line breaks
    for row in summary_rows(texts, tok, ids, 4, 400, seed=1, keep=1.0).tolist():  # a lead
        request, after = tok.decode(row).split(head)
        doc = request.split("---\n", 1)[1].rsplit("\n---", 1)[0]
        reply = after.split("<|im_end|>\n", 1)[0]
        assert len(reply) > 40 and doc.startswith(reply)  # the opening, verbatim
    with pytest.raises(ValueError, match="longer rows"):
        summary_rows(texts, tok, ids, 2, 40, seed=0)


def test_summary_rows_follow_the_copying_rows():
    data = torch.arange(1000)
    pool = 10_000 + torch.arange(3 * 10).reshape(3, 10)
    rows = sample_batch(data, torch.Generator().manual_seed(0), 8, 9, 0.25, summaries=pool,
                        summary_frac=0.5)
    plain = sample_batch(data, torch.Generator().manual_seed(0), 8, 9, 0.25)
    assert torch.equal(rows[:2], plain[:2]) and torch.equal(rows[6:], plain[6:])
    for row in rows[2:6]:
        assert any(torch.equal(row, p) for p in pool)
    # the copying rows come first: all copying leaves no room
    rows = sample_batch(data, torch.Generator().manual_seed(0), 8, 9, 1.0, summaries=pool,
                        summary_frac=0.5)
    assert not (rows >= 10_000).any()


def test_main_with_summary_rows(tmp_path, one_thread):
    argv = list(TINY)
    argv[argv.index("--seq") + 1] = "200"
    argv[argv.index("--summary-frac") + 1] = "0.5"
    records = main(argv + ["--summary-pool", "3", "--copy-steps", "0", "--steps", "2",
                           "--out", str(tmp_path / "ckpt"),
                           "--heldout-tokens", "400", "--induction-passages", "2",
                           "--induction-length", "16", "--copy-samples", "1",
                           "--check-tokens", "16"])
    by = {r["what"]: r for r in records}
    assert by["config"]["summary_rows"] == 3 and by["config"]["summary_frac"] == 0.5
    assert by["train"]["steps"] == 2 and by["load_check"]["argmax_agree"] == 1.0
