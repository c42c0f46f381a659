"""End-to-end decode speed of the engine on a GPU: CUDA graphs vs eager, BF16 and INT8 caches.

Writes (or takes with ``--model``) a random-weight checkpoint (default ``8b``, with YaRN factor 4
over 32k positions, as Qwen3 is configured for 128k contexts), loads it once, and per cache dtype
builds an ``Engine`` (Triton attention) whose context holds the longest prompt plus the new tokens.
The prompts are prefixes of one random id sequence, so each longer one prefills only its new part
(prefix reuse). At each length it times greedy decode through ``Session.generate`` (host sync per
token included) with graphs and eagerly, on the same engine and cache. One JSON line per
measurement: tokens/s (after the first token), the ceiling from ``engine.ceiling_tokens_per_s``
at the mean number of cached positions during the decode, and the fraction of it reached.

    PYTHONPATH=. python benchmarks/decode_e2e.py                       # 8b: 4k, 32k, 128k
    PYTHONPATH=. python benchmarks/decode_e2e.py --model DIR --lengths 4096 32768 --kv bf16
    PYTHONPATH=. python benchmarks/decode_e2e.py --size 0.6b --lengths 4096 --kv bf16 \
        --variants base,split_k --rounds 2 --eager-tokens 0      # an A/B, alternated

``--variants`` builds one engine per variant in turn (``--rounds`` times, alternating, so that
drift of the card hits every variant alike): ``default`` runs the flags as shipped, ``base`` with
all of them off, ``split_k`` with only ``kernels.tiles.GEMV_SPLIT_K`` on (split-K for narrow
projections), ``fused_store`` with only ``models.qwen3.FUSED_KV_STORE`` on (the KV store in the
q/k-norm + RoPE launch), ``fused_store_int8`` the same for INT8 pools only
(``FUSED_KV_STORE_INT8``), ``pdl_chain`` with the decode layer's kernels on the PDL chain
(``kernels.pdl_chain.ENABLED``), ``l2_prefetch`` with the next weights prefetched into L2
beside the chain (``models.weight_prefetch.ENABLED``; ``INFER_L2_PREFETCH_MB`` sets its
budget), ``reduce_in_norm`` with a split-K projection's reduce done by the add + RMSNorm after it
(``models.qwen3_fused.REDUCE_IN_NORM``), ``norm_in_gemv`` with the RMSNorms between the GEMVs
folded into them (``models.qwen3_fused.NORM_IN_GEMV``, ``kernels/gemv_norm.py``),
``fused_greedy`` with the greedy argmax in two Triton kernels (``infer.sampling.FUSED_GREEDY``):
``fused_topk`` with the top-k draw in two Triton kernels (``infer.sampling.FUSED_TOPK``; it acts
only with ``--temperature`` > 0 and ``--top-k`` 1..64), ``attention_prologue`` with a decode
step's q/k-norm + RoPE and KV store inside decode stage 1
(``models.qwen3_fused.ATTENTION_PROLOGUE``, ``kernels/decode_prologue.py``),
``keyed_noise`` with the runner's top-k draws taking their noise from per-row keys instead of a
registered generator (``infer.noise_keys.KEYED_NOISE``): ``split_k+pdl_chain+reduce_in_norm+
fused_store_int8+norm_in_gemv+fused_greedy+fused_topk+attention_prologue+keyed_noise`` is what
ships; ``+`` joins them (``default+X``: as shipped, with X on as well) and ``-`` turns one off
(``default-X``: as shipped, with X off). Each JSON line names its variant and round.
``--decode-tiles`` replaces the default decode tiles (``kernels.tiles``) for the whole process:
stage 1's per cache kind (``bf16``, ``int8``: ``DecodeTiles`` fields) and the GEMVs' per weight
class (``gemv_wide``, ``gemv_narrow``, ``gemv_swiglu``: ``GemvTiles`` fields), so an in-step A/B
of a tile runs one process per tile, alternating. Decoding is greedy
unless ``--temperature`` is above 0 (a real Qwen3's ``generation_config``:
``--temperature 0.6 --top-k 20 --top-p 0.95``; seeded). NOTE: once a graph is captured with a
generator registered (a sampled step with ``keyed_noise`` off), every graph replayed in the
process runs slower (BENCHMARKS.md): A/B such variants in separate processes, one each.

About 3-4 minutes on an H200 from scratch (8B checkpoint write ~30-60 s, prefill of 128k twice);
the checkpoint is kept in ``--workdir`` and reused.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import torch

import infer.noise_keys
import infer.sampling
import kernels.pdl_chain
import kernels.tiles
import models.qwen3
import models.qwen3_fused
import models.weight_prefetch
from infer import Engine, EngineConfig, SamplingParams
from models.loader import load_model
from models.random_checkpoint import SIZES, write_random_checkpoint

VOCAB_LIMIT = 151669  # Qwen3: ids above are padding, never sampled
YARN = {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                         "original_max_position_embeddings": 32768},
        "max_position_embeddings": 131072}


FLAGS = {"split_k": (kernels.tiles, "GEMV_SPLIT_K"),
         "fused_store": (models.qwen3, "FUSED_KV_STORE"),
         "fused_store_int8": (models.qwen3, "FUSED_KV_STORE_INT8"),
         "pdl_chain": (kernels.pdl_chain, "ENABLED"),
         "l2_prefetch": (models.weight_prefetch, "ENABLED"),
         "reduce_in_norm": (models.qwen3_fused, "REDUCE_IN_NORM"),
         "norm_in_gemv": (models.qwen3_fused, "NORM_IN_GEMV"),
         "fused_greedy": (infer.sampling, "FUSED_GREEDY"),
         "fused_topk": (infer.sampling, "FUSED_TOPK"),
         "attention_prologue": (models.qwen3_fused, "ATTENTION_PROLOGUE"),
         "keyed_noise": (infer.noise_keys, "KEYED_NOISE")}
SHIPPED = {key: getattr(module, attr) for key, (module, attr) in FLAGS.items()}


def parse_variants(text: str) -> list[str]:
    """``base,split_k,default-keyed_noise`` -> the names, each part checked against ``FLAGS``."""
    names = [v.strip() for v in text.split(",") if v.strip()]
    for name in names:
        for part in re.split(r"[+-]", name):
            if part not in ("base", "default") and part not in FLAGS:
                raise ValueError(f"unknown variant part {part!r} (default, base, "
                                 f"{', '.join(FLAGS)})")
    if not names:
        raise ValueError("--variants is empty")
    return names


def set_variant(name: str) -> None:
    """Set the module flags of ``FLAGS`` for variant ``name`` (all off for ``base``, as
    shipped for ``default``; ``default+X``: as shipped with X on as well; ``default-X``: with X
    off)."""
    tokens = re.split(r"([+-])", name)  # "default-a+b" -> ["default", "-", "a", "+", "b"]
    signed = list(zip(tokens[1::2], tokens[2::2], strict=True))
    on = {tokens[0]} | {part for sign, part in signed if sign == "+"}
    off = {part for sign, part in signed if sign == "-"}
    for key, (module, attr) in FLAGS.items():
        setattr(module, attr, (("default" in on and SHIPPED[key]) or key in on) and key not in off)


TILE_CONSTANTS = {"bf16": "_DECODE_16BIT", "int8": "_DECODE_INT8", "gemv_wide": "_GEMV_WIDE",
                  "gemv_narrow": "_GEMV_NARROW", "gemv_swiglu": "_GEMV_SWIGLU"}


def decode_tile_overrides(text: str) -> dict[str, dict]:
    """``--decode-tiles``: a JSON object of cache kind (``bf16``, ``int8``) to ``DecodeTiles``
    fields, e.g. ``{"int8": {"num_warps": 1, "programs_per_sm": 8}}`` (the INT8 tile that
    shipped before the 4-warp one), or of GEMV weight class (``gemv_wide``, ``gemv_narrow``,
    ``gemv_swiglu``) to ``GemvTiles`` fields, e.g. ``{"gemv_wide": {"block_n": 32}}``. Checked
    by building the tiles; raises ValueError on anything else."""
    try:
        overrides = json.loads(text)
    except ValueError as e:
        raise ValueError(f"--decode-tiles is not JSON: {e}") from None
    if not isinstance(overrides, dict):
        raise ValueError("--decode-tiles must be a JSON object, e.g. "
                         "'{\"int8\": {\"num_warps\": 4}}'")
    for kind, fields in overrides.items():
        if kind not in TILE_CONSTANTS or not isinstance(fields, dict):
            raise ValueError(f"--decode-tiles: {kind!r} must be one of {', '.join(TILE_CONSTANTS)}"
                             ", mapped to an object of tile fields")
        try:
            dataclasses.replace(getattr(kernels.tiles, TILE_CONSTANTS[kind]), **fields)
        except TypeError as e:  # an unknown field
            raise ValueError(f"--decode-tiles {kind}: {e}") from None
    return overrides


def apply_decode_tiles(overrides: dict[str, dict]) -> None:
    """Replace the default decode tiles of ``kernels.tiles`` for the rest of the process (what
    ``kernels.tiles.decode_tiles`` and the engine's split count read). For an in-step A/B of a
    tile: one process each, alternating (the tiles are fixed when a graph is captured)."""
    for kind, fields in overrides.items():
        name = TILE_CONSTANTS[kind]
        setattr(kernels.tiles, name, dataclasses.replace(getattr(kernels.tiles, name), **fields))


def checkpoint(args) -> Path:
    """``--model``, or the random checkpoint in ``--workdir`` (written if missing)."""
    if args.model:
        return Path(args.model)
    folder = Path(args.workdir) / f"qwen3-{args.size}-random-yarn"
    done = folder / ".complete"
    if not done.is_file():
        t0 = time.perf_counter()
        write_random_checkpoint(folder, args.size, overrides=YARN)
        done.touch()
        print(json.dumps({"event": "checkpoint_written", "path": str(folder),
                          "s": round(time.perf_counter() - t0, 1)}), flush=True)
    return folder


def sampling(args, tokens: int) -> SamplingParams:
    """Greedy, or ``--temperature/--top-k/--top-p`` with seed 0, for ``tokens`` new tokens."""
    return SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                          seed=0, max_new_tokens=tokens)


def measure(eng: Engine, session, prompt: list[int], graphs: bool, tokens: int,
            sp: SamplingParams) -> dict:
    eng.cuda_graphs = graphs
    out = list(session.generate(prompt, sp))
    st = session.stats
    assert len(out) == tokens, f"{len(out)} tokens, stop reason {st.stop_reason}"
    n = len(prompt)
    mean_cached = n + tokens // 2
    ceiling = eng.ceiling_tokens_per_s(mean_cached)
    tps = st.decode_tokens_per_s
    return {"kv_cache": eng.config.kv_cache, "prompt_tokens": n,
            "mode": "graph" if graphs else "eager", "new_tokens": tokens,
            "tokens_per_s": round(tps, 2), "ms_per_token": round(1e3 / tps, 3),
            "ceiling_tokens_per_s": round(ceiling, 2), "mean_cached": mean_cached,
            "fraction": round(tps / ceiling, 4), "prefill_tokens": st.prefill_tokens,
            "temperature": sp.temperature, "top_k": sp.top_k, "top_p": sp.top_p,
            "ttft_s": round(st.ttft_s, 3)}


def profile(eng: Engine, session, prompt: list[int], tokens: int = 16) -> None:
    """Print where a graph decode step's GPU time goes: the top kernels by total time, and the
    GPU busy time per token against the wall time per token (JSON lines)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile
    eng.cuda_graphs = True
    sp = SamplingParams(temperature=0.0, max_new_tokens=tokens)
    list(session.generate(prompt, sp))  # same prompt: the cache is reused, only decode runs
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        list(session.generate(prompt, sp))
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    kernels = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
    busy_us = sum(e.self_device_time_total for e in kernels)
    print(json.dumps({"profile": "totals", "tokens": tokens, "kv_cache": eng.config.kv_cache,
                      "wall_ms_per_token": round(wall * 1e3 / tokens, 3),
                      "gpu_busy_ms_per_token": round(busy_us / 1e3 / tokens, 3),
                      "kernels_per_token": round(sum(e.count for e in kernels) / tokens, 1)}),
          flush=True)
    for e in sorted(kernels, key=lambda e: -e.self_device_time_total)[:15]:
        print(json.dumps({"profile": "kernel", "name": e.key[:90], "calls_per_token":
                          round(e.count / tokens, 1), "us_per_token":
                          round(e.self_device_time_total / tokens, 1)}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="checkpoint folder (default: a random one in --workdir)")
    ap.add_argument("--size", choices=SIZES, default="8b")
    ap.add_argument("--workdir", default="/tmp")
    ap.add_argument("--lengths", type=int, nargs="+", default=[4096, 32768, 131072])
    ap.add_argument("--kv", nargs="+", default=["bf16", "int8"], choices=["bf16", "int8"])
    ap.add_argument("--tokens", type=int, default=128, help="decode tokens timed with graphs")
    ap.add_argument("--eager-tokens", type=int, default=48,
                    help="decode tokens timed eagerly (0: skip eager)")
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--profile", action="store_true",
                    help="also profile graph decode at the shortest length (top kernels)")
    ap.add_argument("--variants", default="default",
                    help="comma-separated: default, base, split_k, fused_store, joined with + "
                         "(an A/B)")
    ap.add_argument("--rounds", type=int, default=1, help="times each variant runs, alternating")
    ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--decode-tiles", default=None,
                    help='JSON: the decode tiles per cache kind replaced for this process, e.g. '
                         '\'{"int8": {"num_warps": 1, "programs_per_sm": 8}}\'')
    args = ap.parse_args()
    try:
        variants = parse_variants(args.variants)
    except ValueError as e:
        ap.error(str(e))
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    # the rate is timed from the first token to the last: one token gives no interval
    if args.tokens < 2 or args.eager_tokens == 1 or args.eager_tokens < 0:
        ap.error("--tokens must be >= 2 and --eager-tokens 0 (skip) or >= 2")
    try:
        sampling(args, 2)
        tiles = decode_tile_overrides(args.decode_tiles) if args.decode_tiles else None
    except ValueError as e:
        ap.error(str(e))
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")

    if tiles:
        apply_decode_tiles(tiles)
    folder = checkpoint(args)
    t0 = time.perf_counter()
    model = load_model(folder, device="cuda", dtype=torch.bfloat16)
    print(json.dumps({"event": "loaded", "path": str(folder),
                      "s": round(time.perf_counter() - t0, 1)}), flush=True)
    lengths = sorted(args.lengths)
    ctx = lengths[-1] + max(args.tokens, args.eager_tokens) + 16
    ids = torch.randint(0, VOCAB_LIMIT, (lengths[-1],),
                        generator=torch.Generator().manual_seed(0)).tolist()
    tokenizer = SimpleNamespace(stop_ids=set(), vocab_limit=VOCAB_LIMIT)  # no early stop
    for kv in args.kv:
        for rnd in range(args.rounds):
            for variant in variants:
                set_variant(variant)
                tag = {"variant": variant, "round": rnd} | ({"decode_tiles": tiles} if tiles
                                                               else {})
                cfg = EngineConfig(str(folder), ctx=ctx, kv_cache=kv, page_size=args.page_size,
                                   device="cuda", attention="triton", cuda_graphs=True)
                eng = Engine(cfg, model=model, tokenizer=tokenizer)
                session = eng.new_session()
                for graphs in (True, False):  # compile the kernels, capture the graph
                    eng.cuda_graphs = graphs
                    list(session.generate(ids[:64], sampling(args, 4)))
                for n in lengths:
                    graph = measure(eng, session, ids[:n], True, args.tokens,
                                    sampling(args, args.tokens)) | tag
                    print(json.dumps(graph), flush=True)
                    if args.eager_tokens:
                        eager = measure(eng, session, ids[:n], False, args.eager_tokens,
                                        sampling(args, args.eager_tokens)) | tag
                        eager["graph_speedup"] = round(graph["tokens_per_s"]
                                                       / eager["tokens_per_s"], 2)
                        print(json.dumps(eager), flush=True)
                    if args.profile and n == lengths[0]:
                        profile(eng, session, ids[:n])
                del session, eng
                gc.collect()
                torch.cuda.empty_cache()
    set_variant("default")

if __name__ == "__main__":
    main()
