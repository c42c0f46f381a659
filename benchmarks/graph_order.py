"""One greedy decode graph timed before and after other work on the same engine: what slows it.

Issue 16: a sampled decode step measured ~60 us slower than a greedy one on the 0.6B at 4k.
``benchmarks/step_timeline.py`` lines the two up kernel by kernel; experiments of the same kind
as this script (run as a one-off before it was written; this script itself has not run on a GPU
yet) found the larger part of that difference to be a slowdown of *every* graph replayed after
a sampled step's graph was captured (BENCHMARKS.md). It runs ``--order``'s items in turn on
one engine and one prefilled prompt, and times each decode item (``step_wall_us``: ``--steps``
steps back to back, CUDA events, no profiler):

- ``greedy``, ``sampled`` (Qwen3's temperature 0.6 / top-k 20 / top-p 0.95, the fused draw),
  ``torch_sampled`` (temperature 0.6, top-p 0.95, no top-k: torch's ops draw): decode steps
  through the engine's graph runner (its graph captured on first use);
- ``rows2``: greedy steps of two rows (another greedy graph, of bucket 2);
- ``capture:MODE``: capture MODE's graph only, replay nothing;
- ``gencapture:MODE``: capture MODE's step (a greedy one too) with the runner's generator
  registered with the graph, into the shared pool, and keep it (replayed never);
- ``ownpool:MODE``: capture MODE's step (generator registered when sampled) into a pool of its
  own, and keep it;
- ``eager:MODE``: draw once from random logits with MODE's parameters, outside any graph (the
  kernels and generators used, nothing captured);
- ``register``: register the runner's generator with a new, never captured ``CUDAGraph`` (torch
  allocates the generator's graph seed and offset tensors then), and keep it;
- ``alloc``: keep a new 64 MiB CUDA tensor (a new segment of the caching allocator).

``--keyed-noise`` keeps ``infer.noise_keys.KEYED_NOISE`` on, as shipped: a sampled step then
draws from the rows' keys, with no generator registered with its graph; without it the script
turns it off, and a sampled step draws from the runner's generator.
The ``gencapture``, ``ownpool``, ``eager`` and ``register`` items use the runner's generator
either way (the experiments in BENCHMARKS.md).

JSON lines: a ``device`` line, then one per item (``what``, ``step_wall_us`` for decode items,
``captures``: the runner's graphs captured so far, not counting ``gencapture`` / ``ownpool``
ones). CUDA only.

    PYTHONPATH=. python3 benchmarks/graph_order.py --ckpt /tmp/q0.6b --ctx 4096
"""

from __future__ import annotations

import argparse
import json
import os

import torch

import infer.noise_keys
from benchmarks.profile_decode import DecodeSteps, step_wall_us
from benchmarks.step_timeline import QWEN3_SAMPLED, prefilled
from infer import SamplingParams
from infer.sampling import sample

MODES = {"greedy": SamplingParams(temperature=0.0),
         "sampled": SamplingParams(seed=0, **QWEN3_SAMPLED),
         "torch_sampled": SamplingParams(seed=0, temperature=0.6, top_k=0, top_p=0.95)}
DEFAULT_ORDER = ("greedy,greedy,eager:sampled,eager:torch_sampled,greedy,rows2,greedy,"
                 "capture:torch_sampled,greedy,capture:sampled,greedy,sampled,greedy")
# one process each (gpu_check.sh graphorder: without and with --keyed-noise): whether
# a sampled capture still slows the greedy graph (BENCHMARKS.md)
NEXT_ORDERS = ("greedy,greedy,capture:sampled,greedy,greedy,sampled",)


def parse_order(text: str) -> list[tuple[str, str]]:
    """``--order`` as ``[(kind, mode)]``: kind ``decode``, ``rows2``, ``capture``, ``gencapture``,
    ``ownpool``, ``eager``, ``register`` or ``alloc`` (the last two with mode ``greedy``,
    unused).

    Raises:
        ValueError: an unknown item (the message names it and the known ones).
    """
    out = []
    for item in (x.strip() for x in text.split(",")):
        kind, _, mode = item.rpartition(":")
        if item in ("rows2", "register", "alloc"):
            out.append((item, "greedy"))
        elif kind in ("", "capture", "eager", "gencapture", "ownpool") and mode in MODES:
            out.append((kind or "decode", mode))
        else:
            raise ValueError(f"unknown --order item {item!r}: use {', '.join(MODES)}, rows2, "
                             "register, alloc, capture:MODE, gencapture:MODE, ownpool:MODE or "
                             "eager:MODE")
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    """Run ``--order``; print and return the JSON records."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", required=True, help="checkpoint folder")
    ap.add_argument("--ctx", type=int, default=4096, help="prompt length")
    ap.add_argument("--kv", default="bf16", choices=["bf16", "int8"])
    ap.add_argument("--steps", type=int, default=200, help="steps timed per decode item")
    ap.add_argument("--order", default=DEFAULT_ORDER, help="comma-separated items (module notes)")
    ap.add_argument("--keyed-noise", action="store_true",
                    help="sampled steps draw from per-row keys, no generator registered "
                    "(infer.noise_keys.KEYED_NOISE on, as shipped; without it: off)")
    args = ap.parse_args(argv)
    try:
        order = parse_order(args.order)
    except ValueError as e:
        ap.error(str(e))
    if args.steps < 1:
        ap.error("--steps must be >= 1")
    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU: it times captured CUDA graphs")
    infer.noise_keys.KEYED_NOISE = args.keyed_noise
    eng, session, first = prefilled(args.ckpt, args.ctx, args.kv, torch.device("cuda"),
                                    2 * args.steps + 128)
    records = [{"what": "device", "device": torch.cuda.get_device_name(),
                "commit": os.environ.get("INFER_COMMIT", "unknown"), "ckpt": args.ckpt,
                "ctx": args.ctx, "kv_cache": args.kv, "steps": args.steps,
                "keyed_noise": args.keyed_noise}]
    print(json.dumps(records[0]), flush=True)
    kept = []  # what the items made outside the runner (graphs, a tensor), alive to the end
    for kind, mode in order:
        bare = kind in ("rows2", "register", "alloc")  # items without a mode
        rec = {"what": mode if kind == "decode" else kind if bare else f"{kind}:{mode}"}
        if kind == "register":
            graph = torch.cuda.CUDAGraph()
            graph.register_generator_state(eng.graph_runner().noise.generator)
            kept.append(graph)
            torch.cuda.synchronize()
        elif kind == "alloc":
            kept.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))
            torch.cuda.synchronize()
        elif kind == "eager":
            runner = eng.graph_runner()
            sample(torch.randn(1, eng.model_config.vocab_size, device="cuda"), MODES[mode],
                   runner.noise.generator)
            torch.cuda.synchronize()
        elif kind in ("gencapture", "ownpool"):  # no begin: it would capture the runner's own
            runner = eng.graph_runner()
            kept.append(_capture_outside(runner, MODES[mode], kind))
            rec["captures"] = runner.captures
        else:
            run = DecodeSteps(eng, session, first, rows=2 if kind == "rows2" else 1,
                              sampling=MODES[mode])
            if kind == "capture":
                run.runner._graph(1, False)  # the runner's capture of a 1-row step, no replay
                torch.cuda.synchronize()
            else:
                run.run(3)  # capture if new, warm up
                rec["step_wall_us"] = round(step_wall_us(run, args.steps), 2)
            rec["captures"] = run.runner.captures
        print(json.dumps(rec), flush=True)
        records.append(rec)
    return records


def _capture_outside(runner, params: SamplingParams, kind: str):
    """A 1-row step of ``params`` captured by ``infer.graph_capture.capture_step`` beside the
    runner's own graphs: ``gencapture`` registers the runner's generator even for a greedy step
    and uses the shared pool; ``ownpool`` a new pool (the generator only when sampling)."""
    from infer.graph_capture import capture_step

    gen = runner.noise.generator if kind == "gencapture" or not params.greedy else None
    pool = runner._graphs._pool if kind == "gencapture" else torch.cuda.graph_pool_handle()
    with torch.cuda.device(runner.device), torch.inference_mode():  # as StepGraphs.capture
        runner.bufs.pad_all()
        cap = capture_step(lambda: runner._run(1, params, gen, False),
                           stream=torch.cuda.Stream(), pool=pool, generator=gen)
    torch.cuda.synchronize()
    return cap


if __name__ == "__main__":
    main()
