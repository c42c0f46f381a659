"""Prompt-lookup speculative decoding, end to end: tokens/s with and without it on the same
engine and cache, the acceptance, and the single-token ceiling.

Each prompt is a summary request for one text (``infer.summary_prompts.SUMMARY_PROMPT`` rendered
with the checkpoint's chat template, as ``infer summarize`` builds it), cut to fit ``--ctx`` with
the reply. Per text and cache dtype it decodes greedily twice through ``Session.generate`` (host
sync per step included, CUDA graphs): ``speculate=False`` then ``True``, after one untimed
warm-up reply of each (graph capture), and checks that the two replies are the same token
sequence (lossless). One JSON line per measurement, then one summary line per cache dtype:

- ``plain_tok_s``, ``spec_tok_s`` (decode tokens/s after the first token), ``speedup``;
- ``drafted``, ``accepted``, ``mean_accepted`` (drafts accepted per verify step; a verify step
  yields ``mean_accepted + 1`` tokens);
- ``ceiling_tok_s``: the engine's single-token decode ceiling at the reply's mean length, and
  ``spec_over_ceiling`` = spec_tok_s / ceiling (above 1: faster than a plain decoder can be);
- ``lookup_guesses`` (``benchmarks/draft_sources.py``): how many of the reply's tokens prompt
  lookup guesses one at a time, from the prompt (copying) or from the reply (repeating itself),
  and ``reply_head``, the reply's first 48 tokens as text.

On a GPU (where every text has a ceiling) the summary line adds the figures over the texts by
total time (``texts_timed``: those whose reply had decode steps, more than one token), from the
rounded per-text rates: ``spec_tok_s_total``,
``ceiling_tok_s_total`` (the texts' ceilings weighted by their tokens) and
``spec_over_ceiling_total``; and everywhere ``lookup_from_prompt`` / ``lookup_from_reply``, the
shares of the replies' tokens that lookup guesses from each.

Texts: with ``--held-out`` the held-out chapters of ``benchmarks/train_small_qwen3.py`` (the
trained model never saw them); otherwise ``--text`` files. A random-weight checkpoint copies
nothing: there the figure to watch is the cost of speculating (``speedup`` near 1, the adaptive
switch), not the gain.

    PYTHONPATH=. python benchmarks/speculative.py --ckpt /tmp/small-qwen3 --held-out
    PYTHONPATH=. python benchmarks/speculative.py --ckpt /tmp/qwen3-8b-random \\
        --text $INFER_SHARED/data/texts/pride_and_prejudice.txt --ctx 8k
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.draft_sources import draft_sources  # noqa: E402
from infer import Engine, EngineConfig, SamplingParams  # noqa: E402
from infer.config import parse_ctx  # noqa: E402
from infer.summary_prompts import SUMMARY_PROMPT  # noqa: E402
from models.tokenizer import Qwen3Tokenizer  # noqa: E402


def commit() -> str:
    """$INFER_COMMIT (set by the device runs: the copy there may carry a stale .git), else git."""
    if os.environ.get("INFER_COMMIT"):
        return os.environ["INFER_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("INFER_COMMIT", "unknown")


def texts(args) -> list[tuple[str, str]]:
    if args.held_out:
        from benchmarks.heldout_texts import held_out_texts

        folder = args.texts or Path(os.environ.get("INFER_SHARED", "../shared")) / "data/texts"
        return [(f"held_out_{i}", t) for i, t in enumerate(held_out_texts(folder))]
    return [(Path(p).name, Path(p).read_text(encoding="utf-8")) for p in args.text]


def prompt_for(tok: Qwen3Tokenizer, text: str, limit: int) -> list[int]:
    """The summary prompt of ``text``, its text cut (by tokens) so the prompt has <= limit."""
    ids = tok.encode(text)
    overhead = len(tok.chat_ids([{"role": "user", "content": SUMMARY_PROMPT.format(text="")}],
                                enable_thinking=False))
    body = tok.decode(ids[:max(1, limit - overhead - 8)])
    return tok.chat_ids([{"role": "user", "content": SUMMARY_PROMPT.format(text=body)}],
                        enable_thinking=False)[:limit]


def reply(session, prompt, sp, speculate: bool) -> tuple[list[int], object]:
    out = list(session.generate(prompt, sp, speculate=speculate))
    session.reset()
    return out, session.stats


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--held-out", action="store_true")
    ap.add_argument("--texts", type=Path, default=None, help="texts folder for --held-out")
    ap.add_argument("--text", nargs="*", default=[])
    ap.add_argument("--kv", default="bf16,int8")
    ap.add_argument("--ctx", default="8k")
    ap.add_argument("--max-new", type=int, default=256)
    ap.add_argument("--limit", type=int, default=6, help="most texts")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    ctx = parse_ctx(args.ctx)
    tok = Qwen3Tokenizer.from_folder(args.ckpt)
    items = texts(args)[:args.limit]
    if not items:
        raise SystemExit("no text: give --held-out or --text FILE")
    sp = SamplingParams(temperature=0.0, max_new_tokens=args.max_new)
    head = {"bench": "speculative", "commit": commit(), "ckpt": Path(args.ckpt).name,
            "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu"}
    for kv in args.kv.split(","):
        eng = Engine(EngineConfig(args.ckpt, ctx=ctx, kv_cache=kv, device=args.device))
        prompts = [(name, prompt_for(tok, text, ctx - args.max_new - 1)) for name, text in items]
        s = eng.new_session()
        runner = eng.graph_runner()
        for bucket in runner.buckets:  # capture every verify bucket before timing
            runner.prepare(sp, bucket, verify=not sp.greedy)
        for spec in (False, True):  # warm-up
            reply(s, prompts[0][1], sp, spec)
        rows = []
        for name, prompt in prompts:
            plain, st0 = reply(s, prompt, sp, False)
            spec, st1 = reply(s, prompt, sp, True)
            mean_len = len(prompt) + len(plain) / 2
            ceiling = eng.ceiling_tokens_per_s(int(mean_len))
            row = {**head, "kv": kv, "text": name, "prompt_tokens": len(prompt),
                   "new_tokens": len(plain), "identical": plain == spec,
                   "plain_tok_s": round(st0.decode_tokens_per_s, 1),
                   "spec_tok_s": round(st1.decode_tokens_per_s, 1),
                   "speedup": round(st1.decode_tokens_per_s / max(st0.decode_tokens_per_s, 1e-9),
                                    3),
                   "drafted": st1.drafted, "accepted": st1.accepted,
                   "verify_steps": st1.verify_steps,
                   "mean_accepted": round(st1.mean_accepted, 2),
                   "ceiling_tok_s": round(ceiling, 1) if ceiling else None,
                   "spec_over_ceiling": round(st1.decode_tokens_per_s / ceiling, 3)
                   if ceiling else None,
                   "lookup_guesses": draft_sources(prompt, plain),
                   "reply_head": tok.decode(plain[:48])}
            rows.append(row)
            print(json.dumps(row), flush=True)
        # a reply of one token has no decode steps (0 tokens/s): left out of the totals by time
        timed = [r for r in rows if r["plain_tok_s"] > 0 and r["spec_tok_s"] > 0]
        plain_s = sum(r["new_tokens"] / r["plain_tok_s"] for r in timed)
        spec_s = sum(r["new_tokens"] / r["spec_tok_s"] for r in timed) or 1e-9
        tokens = sum(r["new_tokens"] for r in rows)
        timed_tokens = sum(r["new_tokens"] for r in timed)
        total = {"texts_timed": len(timed)}
        if timed and all(r["ceiling_tok_s"] for r in timed):
            ceil_s = sum(r["new_tokens"] / r["ceiling_tok_s"] for r in timed)
            total |= {"spec_tok_s_total": round(timed_tokens / spec_s, 1),
                      "ceiling_tok_s_total": round(timed_tokens / ceil_s, 1),
                      "spec_over_ceiling_total": round(ceil_s / spec_s, 3)}
        for key in ("from_prompt", "from_reply"):  # the share of reply tokens guessed
            total[f"lookup_{key}"] = round(sum(r["lookup_guesses"][key] for r in rows) /
                                           max(1, tokens), 3)
        print(json.dumps({**head, "kv": kv, "summary": True, "texts": len(rows), **total,
                          "all_identical": all(r["identical"] for r in rows),
                          "speedup_total_time": round(plain_s / spec_s, 3),
                          "mean_accepted": round(sum(r["accepted"] for r in rows) /
                                                 max(1, sum(r["verify_steps"] for r in rows)), 2),
                          "acceptance": round(sum(r["accepted"] for r in rows) /
                                              max(1, sum(r["drafted"] for r in rows)), 3)}),
              flush=True)
        del eng, s
        if args.device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
