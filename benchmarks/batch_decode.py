"""Aggregate decode speed of B sequences decoding together (``Engine.generate_batch``) on a GPU.

Loads a random-weight checkpoint (default: the 8B that ``benchmarks/decode_e2e.py`` writes in
``--workdir``, written here if missing), builds one engine per cache dtype with ``max_batch``
16 and a context of ``--length`` plus the new tokens, prefills 16 sessions with different random
prompts of ``--length`` tokens once, then for each B decodes ``--tokens`` greedy tokens for the
first B sessions together (each later call reuses the cached prompt: one token is prefilled).
One JSON line per (cache, B): aggregate tokens/s (all sequences' tokens after the first, over the
slowest sequence's decode time), per-sequence tokens/s, the batch's own ceiling (read bandwidth /
(weights + B x the KV bytes of a sequence at its mean length)), and the fraction reached.

    PYTHONPATH=. python benchmarks/batch_decode.py --length 32768 --batches 1 2 4 8 16
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from types import SimpleNamespace

import torch
from decode_e2e import VOCAB_LIMIT, checkpoint

from infer import Engine, EngineConfig, SamplingParams
from models.loader import load_model
from models.random_checkpoint import SIZES


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="checkpoint folder (default: a random one in --workdir)")
    ap.add_argument("--size", choices=SIZES, default="8b")
    ap.add_argument("--workdir", default="/tmp")
    ap.add_argument("--length", type=int, default=32768, help="prompt tokens per sequence")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--kv", nargs="+", default=["bf16", "int8"], choices=["bf16", "int8"])
    ap.add_argument("--tokens", type=int, default=64, help="decode tokens per sequence")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    if args.tokens < 2 or not all(1 <= b <= 16 for b in args.batches):
        ap.error("--tokens must be >= 2 and each batch 1..16")
    folder = checkpoint(args)
    model = load_model(folder, device="cuda", dtype=torch.bfloat16)
    tokenizer = SimpleNamespace(stop_ids=set(), vocab_limit=VOCAB_LIMIT)
    width = max(args.batches)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, VOCAB_LIMIT, (args.length,), generator=gen).tolist()
               for _ in range(width)]
    sp = SamplingParams(temperature=0.0, max_new_tokens=args.tokens)
    for kv in args.kv:
        cfg = EngineConfig(str(folder), ctx=args.length + args.tokens + 16, kv_cache=kv,
                           device="cuda", attention="triton", max_batch=width)
        eng = Engine(cfg, model=model, tokenizer=tokenizer)
        sessions = [eng.new_session() for _ in range(width)]
        t0 = time.perf_counter()
        for b in sorted(set(args.batches)):  # prefill once (and capture each bucket's graph)
            list(eng.generate_batch(list(zip(sessions[:b], prompts[:b], strict=True)),
                                    sp.replace(max_new_tokens=2)))
        print(json.dumps({"event": "prefilled", "kv_cache": kv, "sequences": width,
                          "s": round(time.perf_counter() - t0, 1)}), flush=True)
        for b in args.batches:
            list(eng.generate_batch(list(zip(sessions[:b], prompts[:b], strict=True)), sp))
            stats = [s.stats for s in sessions[:b]]
            assert all(st.new_tokens == args.tokens for st in stats)
            decode_s = max(st.decode_s for st in stats)
            agg = b * (args.tokens - 1) / decode_s
            mean_cached = args.length + args.tokens // 2
            ceiling = eng.ceiling_tokens_per_s(mean_cached, batch=b)
            print(json.dumps({"kv_cache": kv, "batch": b, "prompt_tokens": args.length,
                              "new_tokens": args.tokens,
                              "aggregate_tokens_per_s": round(agg, 1),
                              "per_sequence_tokens_per_s": round(agg / b, 2),
                              "ceiling_tokens_per_s": round(ceiling, 1),
                              "fraction": round(agg / ceiling, 4)}), flush=True)
        del sessions, eng
        gc.collect()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
