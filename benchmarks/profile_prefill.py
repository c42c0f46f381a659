"""Where a long prompt's prefill time goes: kernel time by kind against the compute ceiling.

Issue 16's prefill target (TTFT at 32k in ``infer bench``) asks why the prefill takes what it
takes. For a checkpoint (``--ckpt``) and a prompt of ``--tokens`` pseudo-random ids, this
prefills the prompt once to compile and load everything, times a second prefill (``ttft_s``:
the prefill and the first token, as ``infer bench`` reports it), and profiles a third with
``torch.profiler``. Each CUDA kernel's time is put in one of these kinds by its name:

- ``projections``: the cuBLAS matmuls (q/k/v/o, gate/up, down; names holding ``gemm``,
  ``nvjet``, ``cutlass`` or ``xmma``) and our ``_gemv_kernel`` (a chunk's last rows, the
  lm_head);
- ``attention``: the paged prefill attention kernel (``_prefill``);
- ``norm_rope``: RMSNorm, q/k-norm + RoPE; ``kv_store``: the pool writes (``store_kv``);
- ``activation``: SwiGLU and other elementwise kernels (``elementwise``, ``silu``);
- ``other``: the rest (embedding, copies, sampling).

One JSON line: ``ttft_s``, ``busy_s`` (the profiled prefill's kernel time, summed),
``by_kind_s``, ``top`` (the 10 kernel names of most time: name, kind, seconds, calls), and
the FLOP ceilings: ``projection_flop`` (2 x the layers' weight parameters x
tokens) and ``attention_flop`` (causal: 2 x 2 x heads x head_dim x tokens^2 / 2 per layer),
each kind's ``tflops`` (its FLOP over its kernel time), and ``compute_floor_s`` (both FLOP
counts at ``--peak-tflops``, default 790: the dense BF16 rate an H200 sustains in practice,
issue 16's figure). On the CPU (a smoke test) the kinds come from aten ops' self CPU time
(the reference attention's ``bmm`` and softmax count as ``attention``).

    PYTHONPATH=. python3 benchmarks/profile_prefill.py --ckpt /tmp/qwen3-8b-random \\
        --tokens 32768 [--kv bf16] [--chunk 2048]
"""

from __future__ import annotations

import argparse
import json
import re

import torch
from torch.profiler import ProfilerActivity, profile

from infer import Engine, EngineConfig, SamplingParams

KINDS = (  # (kind, name pattern), first match wins
    ("attention", re.compile(r"_prefill|flash|fmha|attention|aten::(bmm|_softmax)", re.I)),
    ("projections", re.compile(r"gemm|nvjet|cutlass|xmma|_gemv|aten::(mm|addmm|linear|matmul)",
                               re.I)),
    ("norm_rope", re.compile(r"norm|rope", re.I)),
    ("kv_store", re.compile(r"store_kv", re.I)),
    ("activation", re.compile(r"elementwise|silu|swiglu|aten::(mul|silu)", re.I)),
)


TOP = 10  # kernel names listed in ``top``


def kind_of(name: str) -> str:
    """The kind (``KINDS``) of a kernel or op name; ``"other"`` when none matches."""
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return "other"


def prefill_flop(cfg, tokens: int) -> tuple[float, float]:
    """(projection FLOP, causal attention FLOP) of prefilling ``tokens`` positions of a Qwen3
    with config ``cfg`` (``models.config.Qwen3Config``); the lm_head's one row is left out."""
    h, q, kv = cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim, \
        cfg.num_key_value_heads * cfg.head_dim
    per_layer = h * (q + 2 * kv) + q * h + 3 * h * cfg.intermediate_size
    proj = 2.0 * per_layer * cfg.num_hidden_layers * tokens
    attn = 2.0 * 2.0 * cfg.num_attention_heads * cfg.head_dim * tokens * tokens / 2.0 \
        * cfg.num_hidden_layers
    return proj, attn


def by_kind(events: list, cuda: bool) -> tuple[dict[str, float], list[list]]:
    """Seconds per kind, and the ``TOP`` names of most time as ``[name, kind, seconds,
    calls]``."""
    sums: dict[str, float] = {}
    names: dict[str, list] = {}
    for e in events:
        s = (e.time_range.elapsed_us() if cuda else e.self_cpu_time_total) * 1e-6
        k = kind_of(e.name)
        sums[k] = sums.get(k, 0.0) + s
        entry = names.setdefault(e.name, [e.name[:60], k, 0.0, 0])
        entry[2] += s
        entry[3] += 1
    top = sorted(names.values(), key=lambda v: -v[2])[:TOP]
    return sums, [[n, k, round(s, 4), c] for n, k, s, c in top]


def run(args) -> dict:
    """Prefill three times (compile, time, profile); the record the module docstring gives."""
    eng = Engine(EngineConfig(args.ckpt, ctx=args.ctx or args.tokens + 256, kv_cache=args.kv,
                              device=args.device, prefill_chunk=args.chunk))
    gen = torch.Generator().manual_seed(0)
    hi = min(100_000, eng.model_config.vocab_size)
    prompt = torch.randint(hi // 4, hi, (args.tokens,), generator=gen).tolist()
    sp = SamplingParams(temperature=0.0, max_new_tokens=1, ignore_eos=True)
    cuda = eng.device.type == "cuda"

    def one() -> float:
        s = eng.new_session()
        list(s.generate(prompt, sp))
        ttft = s.stats.ttft_s
        s.reset()
        return ttft

    one()  # compiles, loads modules, captures
    ttft = one()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        one()
        if cuda:
            torch.cuda.synchronize(eng.device)
    want = torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU
    events = [e for e in prof.events() if e.device_type == want]
    sums, top = by_kind(events, cuda)
    proj_flop, attn_flop = prefill_flop(eng.model_config, args.tokens)
    tflops = {k: round(f / sums[k] / 1e12, 1) for k, f in
              (("projections", proj_flop), ("attention", attn_flop)) if sums.get(k)}
    return {"bench": "profile_prefill", "device": torch.cuda.get_device_name(eng.device)
            if cuda else "cpu", "activity": "cuda" if cuda else "cpu", "kv": args.kv,
            "tokens": args.tokens, "chunk": eng.config.chunk,
            "ttft_s": round(ttft, 4), "busy_s": round(sum(sums.values()), 4),
            "by_kind_s": {k: round(v, 4) for k, v in sorted(sums.items())},
            "top": top, "projection_flop": proj_flop, "attention_flop": attn_flop,
            "tflops": tflops,
            "compute_floor_s": round((proj_flop + attn_flop) / (args.peak_tflops * 1e12), 4)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ckpt", required=True, help="checkpoint folder")
    ap.add_argument("--tokens", type=int, default=32768, help="prompt tokens")
    ap.add_argument("--ctx", type=int, default=0, help="context size (default: tokens + 256)")
    ap.add_argument("--kv", default="bf16", choices=("bf16", "int8"))
    ap.add_argument("--chunk", type=int, default=None, help="prefill chunk (engine default)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--peak-tflops", type=float, default=790.0,
                    help="dense BF16 TFLOP/s for compute_floor_s")
    args = ap.parse_args(argv)
    record = run(args)
    print(json.dumps(record), flush=True)
    return record


if __name__ == "__main__":
    main()
