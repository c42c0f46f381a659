"""Attention kernel benchmark on one GPU: our paged kernels side by side with torch SDPA.

Shape: Qwen3-8B attention (32 query heads, 8 KV heads, head_dim 128), batch 1, page size 64, pages
in scrambled order, fresh random data (never zeros). Pools in BF16 or INT8 (codes + float32 scale
per position and KV head). Timings are medians of CUDA-event timed runs, each after a cold-L2 read
flush (``benchmarks/timing.py``), so the cache is read from HBM every time. Decode is timed three
ways (the ``timing`` field):

- ``graph``: one decode-attention call (ours: stage 1 + combine; or SDPA) captured alone in a CUDA
  graph, one flush before each replay. The figure includes one graph launch and the start-up of
  one isolated kernel pair, which a real decode step pays once per step, not per layer.
- ``eager``: the same call as launched from Python (host launch overhead included).
- ``graph_layers`` (``--layers L``, default 36 = Qwen3-8B's layer count; 0 or 1 turns it off): L
  distinct layers, each its own pool (random K/V, INT8 scales), q and preallocated output; one
  scrambled page table and one ``seq_lens`` for all L layers (as in the engine, where every layer's
  pool uses the sequence's page table) and one ``DecodeWorkspace`` shared by the L calls (they run
  in sequence, as in the engine). ONE CUDA graph runs the call for layer 0, 1, ..., L-1 in order;
  one cold-L2 read flush precedes each replay, and layer i's cache was last read one replay earlier
  (at least 512 MiB of flush ago), so every layer reads its cache from HBM. ``us = replay time /
  L``: per-layer kernel time plus the in-graph gaps between consecutive kernels, with one graph
  launch amortized over L layers. ``replay_us`` is the whole replay. In the model other kernels sit
  between two attention layers; here attention follows attention, so the gaps are those of two
  dependent kernels in one graph. ``impl=ours_stage1`` is the same graph with stage 1 alone
  (``_decode_stage1``, no combine): ``ours - ours_stage1`` is the combine's in-graph cost per
  layer. If L pools would exceed ``--layers-max-bytes`` (default 48e9 B) L is reduced for that
  case; the record's ``layers`` is the L used. Each case's pools are freed before the next.
  ``impl=read`` is the plain-read peer in the same graph: ``torch.sum`` over L distinct bf16
  tensors holding the case's cache bytes (``bytes`` below), i.e. what merely reading those bytes
  costs per layer at this size, start-up and tail included. It is the peer for INT8, which SDPA
  cannot read.

Printed, one JSON line each (also written to ``--out``), then a short human table:

- ``bandwidth``: the card's measured read bandwidth: ``x.sum()`` over a 4 GiB bf16 tensor,
  bytes / median time. The ``frac_bw`` of every decode line is relative to this figure.
- ``decode`` (one new token at ``positions`` cached positions, i.e. one layer's attention of one
  decode step): ``impl=ours`` is ``kernels.decode_attention.decode_attention`` (split-KV + combine,
  preallocated workspace) on the paged pool; ``impl=sdpa`` is ``F.scaled_dot_product_attention``
  on a contiguous bf16 cache ``[1, 8, S, 128]`` with ``enable_gqa=True`` (default backend).
  ``bytes`` is what the kernel must read from the cache: keys + values (``S*8*128*2`` elements at
  2 B for BF16 or 1 B for INT8) plus, for INT8, the float32 key and value scales (``S*8*2*4`` B).
  ``GB/s = bytes / time``; queries, outputs and page-table reads are not counted. ``us`` is
  microseconds per call (per layer for ``graph_layers``); ``frac_bw = GB/s / bandwidth``.
  ``num_splits`` is the split count passed (``"default"``: the launcher's). ``opts`` (ours only)
  holds ``--decode-opts``, a JSON object whose keys are passed as extra keyword arguments to
  ``decode_attention`` and ``_decode_stage1`` (they win over ``num_splits``). SDPA writes into a
  preallocated output with ``copy_`` (SDPA has no ``out=``), so its figures include that copy.
  A case that fails is one record with ``error`` (the message) instead of the figures.
- ``prefill`` (whole-prompt causal prefill, chunk = all ``S`` positions): ``impl=ours`` is
  ``kernels.prefill_attention.prefill_attention`` on the paged pool; ``sdpa_flash`` and
  ``sdpa_cudnn`` are SDPA restricted to the FlashAttention-2 and cuDNN backends on contiguous bf16
  tensors (``enable_gqa=True``, or K/V expanded to 32 heads if the backend refuses GQA; the line
  says which). FLOPs count every attended (query, key) pair exactly once: query ``i`` attends
  ``i + 1`` keys, so pairs = S(S+1)/2 and FLOPs = 4 * pairs * head_dim * 32 (2 for Q.K^T and 2 for
  P.V per pair and head); the masked half of the square is not counted. Lengths above
  ``--prefill-max`` (default 32768) time one chunk of ``--chunk`` (4096) new tokens after
  ``S - chunk`` cached positions instead (ours only: SDPA's ``is_causal`` cannot offset queries),
  FLOPs = 4 * (chunk * (S - chunk) + chunk(chunk+1)/2) * head_dim * 32.

Usage (on the GPU machine, from the repository root)::

    python benchmarks/attention.py                       # 4k, 32k, 128k; bf16 and int8; both
    python benchmarks/attention.py --what prefill --sweep --out prefill.jsonl
    python benchmarks/attention.py --lengths 32768 --dtypes int8 --what decode
    python benchmarks/attention.py --what decode --layers 36 --decode-opts '{"int8_magic": 2}'

``--sweep`` adds prefill tile configurations (BLOCK_M 32/64/128, BLOCK_N, warps, stages, pointer
or TMA loads) and decode split counts (single call and layered), one line each, to pick the
launchers' defaults from. The prefill ``config`` field is ``[BLOCK_M, BLOCK_N, num_warps,
num_stages, tma, warp_specialize]`` or ``"default"`` (the launcher's heuristic).
``--warp-specialize`` adds two warp-specialized TMA configs (last, since Triton 3.6 documents warp
specialization for Blackwell).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.reference import quantize_int8  # noqa: E402

HQ, HKV, D, PAGE = 32, 8, 128, 64
DEVICE = "cuda"
# Prefill tile sweep: (BLOCK_M, BLOCK_N, num_warps, num_stages, TMA loads, warp-specialized loop).
SWEEP_PREFILL = [(128, 64, 8, 3, False, False), (128, 128, 8, 3, False, False),
                 (128, 64, 8, 4, False, False), (128, 64, 4, 3, False, False),
                 (64, 64, 4, 3, False, False), (64, 128, 4, 3, False, False),
                 (64, 64, 4, 4, False, False), (32, 64, 4, 3, False, False),
                 (32, 32, 4, 4, False, False),
                 (128, 64, 8, 3, True, False), (128, 64, 8, 4, True, False),
                 (64, 64, 4, 3, True, False), (128, 64, 4, 3, True, False),
                 (128, 64, 4, 4, True, False), (128, 64, 4, 2, True, False),
                 (64, 64, 4, 4, True, False)]
# Warp-specialized key loop: opt-in (--warp-specialize). With Triton 3.6 on sm_90 the 4-warp
# config aborts the compiler (an assertion ends the process) and the 8-warp one compiles to the
# same SASS as without (BENCHMARKS.md, prefill).
SWEEP_WS = [(128, 64, 8, 3, True, True), (128, 64, 4, 3, True, True)]
SWEEP_SPLITS = [8, 16, 33, 64]


def emit(rec: dict, records: list, out) -> None:
    records.append(rec)
    line = json.dumps(rec)
    print(line, flush=True)
    if out is not None:
        out.write(line + "\n")
        out.flush()


def bench(fn, rep_ms: int) -> float:
    """Median milliseconds of ``fn`` as launched (cold L2 before each run)."""
    from benchmarks.timing import bench_eager
    return bench_eager(fn, rep_ms)


def bench_graph(fn, rep_ms: int) -> float:
    """Median milliseconds of ``fn`` replayed from a CUDA graph (no host launch overhead)."""
    from benchmarks.timing import bench_graph as _bench_graph
    return _bench_graph(fn, rep_ms)


def bench_graph_many(fns, rep_ms: int) -> float:
    """Median milliseconds per replay of ONE CUDA graph running ``fns`` in order."""
    from benchmarks.timing import bench_graph_many as _bench_graph_many
    return _bench_graph_many(fns, rep_ms)


def error_text(e: Exception) -> str:
    """One line for a record's ``error`` (keeps no reference to the traceback or its tensors)."""
    return f"{type(e).__name__}: {e}"[:300]


def measure_bandwidth() -> dict:
    x = torch.randn(2 << 30, dtype=torch.bfloat16, device=DEVICE)  # 4 GiB
    ms = bench(lambda: x.sum(), 200)
    nbytes = x.numel() * x.element_size()
    return {"what": "bandwidth", "bytes": nbytes, "us": ms * 1e3, "GB/s": nbytes / ms / 1e6}


def make_pool(seq_len: int, kv: str):
    """A paged pool holding ``seq_len`` random positions of one sequence, pages scrambled."""
    n_pages = math.ceil(seq_len / PAGE)
    num_pages = n_pages + 16
    shape = (num_pages, HKV, PAGE, D)
    k = torch.randn(shape, dtype=torch.bfloat16, device=DEVICE)
    v = torch.randn(shape, dtype=torch.bfloat16, device=DEVICE)
    ks = vs = None
    if kv == "int8":
        (k, ks), (v, vs) = quantize_int8(k), quantize_int8(v)
        v = v.transpose(2, 3).contiguous()  # INT8 pools store V pages transposed
    table = torch.randperm(num_pages, device=DEVICE)[:n_pages].to(torch.int32)[None, :]
    seq_lens = torch.tensor([seq_len], dtype=torch.int32, device=DEVICE)
    return k, v, ks, vs, table, seq_lens


def make_layer(seq_len: int, kv: str) -> dict:
    """One layer for decode: a pool (``make_pool``), its query [1, 32, 128] bf16 and an output."""
    k, v, ks, vs, table, seq_lens = make_pool(seq_len, kv)
    q = torch.randn(1, HQ, D, dtype=torch.bfloat16, device=DEVICE)
    return dict(q=q, k=k, v=v, ks=ks, vs=vs, table=table, seq_lens=seq_lens,
                out=torch.empty_like(q))


def cache_bytes(seq_len: int, kv: str) -> int:
    """Bytes one decode call must read from the cache (see the module docstring)."""
    elt = 1 if kv == "int8" else 2
    return seq_len * HKV * D * 2 * elt + (seq_len * HKV * 2 * 4 if kv == "int8" else 0)


def pool_bytes(seq_len: int, kv: str) -> int:
    """Bytes ``make_pool`` keeps allocated for one layer: K and V pages (16 spare pages) plus the
    float32 scales for INT8 (the page table, q and out are negligible)."""
    slots = (math.ceil(seq_len / PAGE) + 16) * HKV * PAGE
    return 2 * slots * (D * (1 if kv == "int8" else 2) + (4 if kv == "int8" else 0))


def fit_layers(layers: int, per_layer: int, max_bytes: float) -> int:
    """``layers``, reduced so that ``layers * per_layer`` bytes stay within ``max_bytes`` (>= 1)."""
    return max(1, min(layers, int(max_bytes // per_layer)))


def decode_kwargs(num_splits: int | None, opts: dict) -> dict:
    """Keyword arguments of our decode call besides tensors and workspace: ``num_splits`` (None:
    the launcher's default) and the ``--decode-opts`` keys, which win."""
    return {"num_splits": num_splits, **opts}


def make_workspace(dec, kws: list, kv_dtype: torch.dtype):
    """One ``DecodeWorkspace`` (batch 1) large enough for the calls of each kwargs in ``kws``."""
    dev = torch.device(DEVICE)
    splits = max(kw["num_splits"] or dec.default_num_splits(1, HKV, dev, kv_dtype) for kw in kws)
    return dec.DecodeWorkspace.allocate(1, HKV, HQ // HKV, splits, D, dev)


def ours_fn(dec, layer: dict, kw: dict, ws, stage1: bool = False):
    """A no-argument call of our decode on one layer, into its preallocated ``out`` (or of stage 1
    alone, which writes only the workspace): allocates nothing, so it can be captured."""
    args = (layer["q"], layer["k"], layer["v"], layer["seq_lens"], layer["table"])
    common = dict(num_queries=1, sm_scale=D ** -0.5, k_scale=layer["ks"], v_scale=layer["vs"],
                  workspace=ws, **kw)
    if stage1:  # no PDL: back-to-back stage-1 kernels, which never follow each other in the model,
        # would be scheduled early onto SMs the previous layer's stage 1 still fills
        return lambda: dec._decode_stage1(*args, **{**common, "pdl": False})
    return lambda: dec.decode_attention(*args, out=layer["out"], **common)


def sdpa_fn(q4: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, o4: torch.Tensor):
    """A no-argument SDPA decode call on a contiguous cache, copied into ``o4``."""
    return lambda: o4.copy_(F.scaled_dot_product_attention(q4, kc, vc, enable_gqa=True))


def figures(nbytes: int, ms: float, bw: float) -> dict:
    """``bytes``, ``us``, ``GB/s`` and ``frac_bw`` of one call reading ``nbytes`` in ``ms``."""
    return {"bytes": nbytes, "us": ms * 1e3, "GB/s": nbytes / ms / 1e6,
            "frac_bw": nbytes / ms / 1e6 / bw}


def bench_decode(seq_len: int, kv: str, bw: float, splits: list, opts: dict, rep_ms: int):
    """Yields single-call decode records (``timing`` graph and eager): ours at each split count
    (with ``opts``), SDPA for bf16."""
    base = {"what": "decode", "kv": kv, "positions": seq_len, "new_tokens": 1}
    layer = make_layer(seq_len, kv)
    nbytes = cache_bytes(seq_len, kv)
    for ns in splits:
        kw = decode_kwargs(ns or None, opts)
        rec = {**base, "impl": "ours", "num_splits": kw["num_splits"] or "default", "opts": opts}
        err = None
        try:  # the decode kernel or an option may fail: report it, keep benchmarking
            from kernels import decode_attention as dec
            fn = ours_fn(dec, layer, kw, make_workspace(dec, [kw], layer["k"].dtype))
            fn()
            for timing, timer in (("graph", bench_graph), ("eager", bench)):
                yield {**rec, "timing": timing, **figures(nbytes, timer(fn, rep_ms), bw)}
        except Exception as e:
            err = error_text(e)
        if err is not None:
            yield {**rec, "error": err}
    if kv != "bf16":
        return
    err = None
    try:
        kc = torch.randn(1, HKV, seq_len, D, dtype=torch.bfloat16, device=DEVICE)
        q4 = layer["q"].view(1, HQ, 1, D)
        fn = sdpa_fn(q4, kc, torch.randn_like(kc), torch.empty_like(q4))
        for timing, timer in (("graph", bench_graph), ("eager", bench)):
            yield {**base, "impl": "sdpa", "timing": timing,
                   **figures(nbytes, timer(fn, rep_ms), bw)}
    except Exception as e:
        err = error_text(e)
    if err is not None:
        yield {**base, "impl": "sdpa", "error": err}


def bench_decode_layers(seq_len: int, kv: str, bw: float, splits: list, opts: dict,
                        layers: int, max_bytes: float, rep_ms: int):
    """Yields per-layer decode records timed as ONE CUDA graph of ``layers`` calls on distinct
    layers (``timing="graph_layers"``, see the module docstring): ours and ours_stage1 at each
    split count (with ``opts``), then SDPA for bf16. Each part's memory is freed before the next
    (the parts are separate generators: their locals go when they finish)."""
    base = {"what": "decode", "kv": kv, "positions": seq_len, "new_tokens": 1,
            "timing": "graph_layers"}
    yield from _layers_ours(base, bw, splits, opts, layers, max_bytes, rep_ms)
    torch.cuda.empty_cache()
    yield from _layers_read(base, bw, layers, max_bytes, rep_ms)
    torch.cuda.empty_cache()
    if kv == "bf16":
        yield from _layers_sdpa(base, bw, layers, max_bytes, rep_ms)
        torch.cuda.empty_cache()


def _layer_record(base: dict, impl: str, n: int, ms: float, bw: float, **extra) -> dict:
    """A ``graph_layers`` record: ``ms`` per replay of ``n`` layers, figures per layer."""
    nbytes = cache_bytes(base["positions"], base["kv"])
    return {**base, "impl": impl, "layers": n, **extra, **figures(nbytes, ms / n, bw),
            "replay_us": ms * 1e3}


def _layers_ours(base: dict, bw: float, splits: list, opts: dict, layers: int,
                 max_bytes: float, rep_ms: int):
    """Ours and ours_stage1 on L pools; per split count one workspace shared by the L layers."""
    seq_len, kv = base["positions"], base["kv"]
    n = fit_layers(layers, pool_bytes(seq_len, kv), max_bytes)
    pool_layers, err = [], None
    try:
        from kernels import decode_attention as dec
        pool_layers = [make_layer(seq_len, kv) for _ in range(n)]
        for layer in pool_layers[1:]:  # one page table and length for all layers, as in the model
            layer["table"], layer["seq_lens"] = pool_layers[0]["table"], pool_layers[0]["seq_lens"]
    except Exception as e:  # e.g. out of memory: no ours figures for this case
        err = error_text(e)
    if err is not None:
        yield {**base, "impl": "ours", "layers": n, "opts": opts, "error": err}
        return
    for ns in splits:
        kw = decode_kwargs(ns or None, opts)
        extra = {"num_splits": kw["num_splits"] or "default", "opts": opts}
        for impl, stage1 in (("ours", False), ("ours_stage1", True)):
            err = None
            try:
                ws = make_workspace(dec, [kw], pool_layers[0]["k"].dtype)
                fns = [ours_fn(dec, layer, kw, ws, stage1) for layer in pool_layers]
                fns[0]()  # a bad option fails here, before any capture
                yield _layer_record(base, impl, n, bench_graph_many(fns, rep_ms), bw, **extra)
            except Exception as e:
                err = error_text(e)
            if err is not None:
                yield {**base, "impl": impl, "layers": n, **extra, "error": err}


def _layers_sdpa(base: dict, bw: float, layers: int, max_bytes: float, rep_ms: int):
    """SDPA on L contiguous bf16 caches [1, 8, S, 128], each with its own q and output."""
    seq_len = base["positions"]
    n = fit_layers(layers, cache_bytes(seq_len, "bf16"), max_bytes)
    caches, err = [], None
    try:
        for _ in range(n):
            kc = torch.randn(1, HKV, seq_len, D, dtype=torch.bfloat16, device=DEVICE)
            q4 = torch.randn(1, HQ, 1, D, dtype=torch.bfloat16, device=DEVICE)
            caches.append((q4, kc, torch.randn_like(kc), torch.empty_like(q4)))
        fns = [sdpa_fn(*c) for c in caches]
        fns[0]()
        ms = bench_graph_many(fns, rep_ms)
    except Exception as e:
        err = error_text(e)
    if err is not None:
        yield {**base, "impl": "sdpa", "layers": n, "error": err}
    else:
        yield _layer_record(base, "sdpa", n, ms, bw)


def _layers_read(base: dict, bw: float, layers: int, max_bytes: float, rep_ms: int):
    """The plain-read peer: ``torch.sum`` over L distinct bf16 tensors of the cache's byte count
    (``cache_bytes``), one graph, figures per layer: what reading those bytes costs at this size
    with no attention at all (start-up and tail included, as for ours)."""
    nbytes = cache_bytes(base["positions"], base["kv"])
    n = fit_layers(layers, nbytes, max_bytes)
    err = None
    try:
        xs = [torch.randn(nbytes // 2, dtype=torch.bfloat16, device=DEVICE) for _ in range(n)]
        outs = [torch.empty((), dtype=torch.bfloat16, device=DEVICE) for _ in range(n)]
        fns = [lambda x=x, o=o: torch.sum(x, dim=0, out=o) for x, o in zip(xs, outs, strict=True)]
        ms = bench_graph_many(fns, rep_ms)
    except Exception as e:
        err = error_text(e)
    if err is not None:
        yield {**base, "impl": "read", "layers": n, "error": err}
    else:
        yield _layer_record(base, "read", n, ms, bw)


def causal_flops(n_new: int, seq_len: int) -> float:
    """4 * head_dim * Hq FLOPs per attended (query, key) pair; query t of the chunk attends
    ``seq_len - n_new + t + 1`` keys."""
    ctx = seq_len - n_new
    return 4.0 * (n_new * ctx + n_new * (n_new + 1) / 2) * D * HQ


def bench_prefill(seq_len: int, n_new: int, kv: str, configs: list, rep_ms: int):
    """Yields prefill records: ours per tile config for the last ``n_new`` positions of a
    ``seq_len`` sequence; SDPA flash and cuDNN for bf16 whole-prompt prefill (n_new = seq_len)."""
    from kernels.prefill_attention import prefill_attention
    base = {"what": "prefill", "kv": kv, "positions": seq_len, "new_tokens": n_new}
    flops = causal_flops(n_new, seq_len)
    k, v, ks, vs, table, seq_lens = make_pool(seq_len, kv)
    q = torch.randn(n_new, HQ, D, dtype=torch.bfloat16, device=DEVICE)
    qsl = torch.tensor([0, n_new], dtype=torch.int32, device=DEVICE)
    out = torch.empty_like(q)
    for cfg in configs:
        bm, bn, nw, st, tma, ws = cfg or (None, None, None, None, None, False)
        try:
            fn = lambda bm=bm, bn=bn, nw=nw, st=st, tma=tma, ws=ws: prefill_attention(  # noqa: E731
                q, k, v, seq_lens, qsl, table, max_query_len=n_new, sm_scale=D ** -0.5,
                k_scale=ks, v_scale=vs, out=out, block_m=bm, block_n=bn, num_warps=nw,
                num_stages=st, use_tma=tma, warp_specialize=ws)
            fn()
            ms = bench(fn, rep_ms)
            yield {**base, "impl": "ours", "config": list(cfg) if cfg else "default",
                   "us": ms * 1e3, "TFLOP/s": flops / ms / 1e9}
        except Exception as e:  # e.g. out of shared memory for a large tile
            yield {**base, "impl": "ours", "config": list(cfg) if cfg else "default",
                   "error": f"{type(e).__name__}: {e}"[:300]}
    if kv != "bf16" or n_new != seq_len:  # SDPA's is_causal has no cached-prefix offset
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q4 = q.view(1, seq_len, HQ, D).transpose(1, 2)  # [1, Hq, S, D]
    kc = torch.randn(1, HKV, seq_len, D, dtype=torch.bfloat16, device=DEVICE)
    vc = torch.randn_like(kc)
    for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION),
                          ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
        rec = {**base, "impl": name}
        for gqa in ("enable_gqa", "expanded"):
            try:
                if gqa == "enable_gqa":
                    kk, vv, kw = kc, vc, {"enable_gqa": True}
                else:
                    kk = kc.repeat_interleave(HQ // HKV, dim=1)
                    vv = vc.repeat_interleave(HQ // HKV, dim=1)
                    kw = {}

                def fn(kk=kk, vv=vv, kw=kw, backend=backend):
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(q4, kk, vv, is_causal=True, **kw)
                fn()
                ms = bench(fn, rep_ms)
                rec.update(gqa=gqa, us=ms * 1e3, **{"TFLOP/s": flops / ms / 1e9})
                rec.pop("error", None)
                break
            except Exception as e:  # backend unavailable for this shape/build
                rec["error"] = f"{type(e).__name__}: {e}"[:300]
        yield rec


def table(records: list) -> str:
    """The human summary: one row per record. Decode rows name their timing after the split
    count: ``graph``, ``eager`` or ``graph_layers xL`` (per-layer figures of an L-layer graph)."""
    rows = [f"{'what':9} {'impl':11} {'kv':5} {'positions':>9} {'new':>6} {'config':26} {'us':>10} "
            f"{'GB/s':>8} {'%bw':>6} {'TFLOP/s':>8}"]
    for r in records:
        if r["what"] == "bandwidth":
            rows.append(f"{'bandwidth':9} {'x.sum()':11} {'':5} {'':>9} {'':>6} {'':26} "
                        f"{r['us']:10.1f} {r['GB/s']:8.0f}")
            continue
        cfg = r.get("config", r.get("num_splits", r.get("gqa", "")))
        if isinstance(cfg, list):
            bm, bn, nw, st, tma, ws = cfg
            cfg = f"{bm}x{bn} w{nw} s{st}{' tma' if tma else ''}{' ws' if ws else ''}"
        timing = r.get("timing", "")
        if timing == "graph_layers":
            timing += f" x{r.get('layers', '?')}"
        cfg = f"{cfg} {timing}".strip()
        if "error" in r:
            rows.append(f"{r['what']:9} {r['impl']:11} {r['kv']:5} {r['positions']:>9} "
                        f"{'':>6} {cfg:26.26} ERROR {r['error'][:60]}")
            continue
        gbs = f"{r['GB/s']:8.0f}" if "GB/s" in r else " " * 8
        frac = f"{100 * r['frac_bw']:6.1f}" if "frac_bw" in r else " " * 6
        tf = f"{r['TFLOP/s']:8.1f}" if "TFLOP/s" in r else ""
        rows.append(f"{r['what']:9} {r['impl']:11} {r['kv']:5} {r['positions']:>9} "
                    f"{r['new_tokens']:>6} {cfg:26.26} {r['us']:10.1f} {gbs} {frac} {tf}")
    if any(r.get("timing") == "graph_layers" for r in records):
        rows.append("graph_layers xL: us, GB/s, %bw per layer = one replay of an L-layer graph "
                    "/ L (cold L2 per replay)")
    opts = {json.dumps(r["opts"]) for r in records if r.get("opts")}
    if opts:
        rows.append(f"ours decode options (--decode-opts): {', '.join(sorted(opts))}")
    return "\n".join(rows)


def guarded(records, base: dict):
    """``records`` (a generator of records) with an exception that escapes it, e.g. out of memory
    while building a pool, turned into one last ``error`` record: the run goes on."""
    err = None
    try:
        yield from records
    except Exception as e:
        err = error_text(e)
    if err is not None:
        yield {**base, "impl": "all", "error": err}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="4096,32768,131072",
                    help="positions, comma-separated")
    ap.add_argument("--dtypes", default="bf16,int8", help="KV pool dtypes: bf16,int8")
    ap.add_argument("--what", default="decode,prefill", help="decode,prefill")
    ap.add_argument("--prefill-max", type=int, default=32768,
                    help="whole-prompt prefill up to this length; longer ones time one chunk")
    ap.add_argument("--chunk", type=int, default=4096,
                    help="new tokens of the chunk timed at lengths > --prefill-max (0: skip)")
    ap.add_argument("--sweep", action="store_true", help="also sweep tile configs / splits")
    ap.add_argument("--warp-specialize", action="store_true",
                    help="also time warp-specialized prefill configs (TMA loads)")
    ap.add_argument("--rep-ms", type=int, default=200, help="repetitions per figure = rep_ms / 2")
    ap.add_argument("--layers", type=int, default=36,
                    help="decode only: also time L distinct layers in one CUDA graph, per-layer "
                         "figures (timing graph_layers; default 36 = Qwen3-8B; 0 or 1: off)")
    ap.add_argument("--layers-max-bytes", type=float, default=48e9,
                    help="fewer layers for a case whose L pools (or SDPA caches) would exceed "
                         "this many bytes (default 48e9)")
    ap.add_argument("--decode-opts", default="{}",
                    help="JSON object of extra keyword arguments for our decode_attention and "
                         "_decode_stage1, e.g. '{\"int8_magic\": 2}' (default {})")
    ap.add_argument("--out", default=None, help="also write the JSON lines to this file")
    args = ap.parse_args()
    try:
        opts = json.loads(args.decode_opts)
    except json.JSONDecodeError as e:
        sys.exit(f"--decode-opts is not valid JSON: {e}")
    if not isinstance(opts, dict):
        sys.exit(f"--decode-opts must be a JSON object, got {args.decode_opts!r}")
    if args.layers < 0 or args.layers_max_bytes <= 0:
        sys.exit("--layers must be >= 0 and --layers-max-bytes > 0")
    if not torch.cuda.is_available():
        sys.exit("benchmarks/attention.py needs a CUDA GPU")
    lengths = [int(x) for x in args.lengths.split(",") if x]
    dtypes = [x for x in args.dtypes.split(",") if x]
    what = set(args.what.split(","))
    if bad := [d for d in dtypes if d not in ("bf16", "int8")]:
        sys.exit(f"unknown --dtypes {bad}: use bf16 and/or int8")
    torch.manual_seed(0)
    out = open(args.out, "w") if args.out else None
    records: list = []
    import triton
    # INFER_COMMIT wins: a copied working tree (a remote GPU machine) may carry a stale .git
    commit = os.environ.get("INFER_COMMIT")
    try:
        commit = commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                          capture_output=True, text=True,
                                          cwd=Path(__file__).parent).stdout.strip() or None
    except OSError:
        commit = None
    emit({"what": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__,
          "triton": triton.__version__, "commit": commit,
          "sms": torch.cuda.get_device_properties(0).multi_processor_count,
          "layers": args.layers, "decode_opts": opts}, [], out)
    bw_rec = measure_bandwidth()
    emit(bw_rec, records, out)
    bw = bw_rec["GB/s"]
    for kv in dtypes:
        for s in lengths:
            if "decode" in what:
                # a num_splits in --decode-opts overrides every split count: time it once
                sweep = args.sweep and "num_splits" not in opts
                splits = [None] + (SWEEP_SPLITS if sweep else [])
                base = {"what": "decode", "kv": kv, "positions": s, "new_tokens": 1}
                for rec in guarded(bench_decode(s, kv, bw, splits, opts, args.rep_ms),
                                   {**base, "timing": "graph,eager"}):
                    emit(rec, records, out)
                torch.cuda.empty_cache()  # the single-call pool is gone with its generator
                if args.layers > 1:
                    for rec in guarded(bench_decode_layers(s, kv, bw, splits, opts, args.layers,
                                                           args.layers_max_bytes, args.rep_ms),
                                       {**base, "timing": "graph_layers"}):
                        emit(rec, records, out)
                    torch.cuda.empty_cache()
            if "prefill" in what:
                configs = [None] + (SWEEP_PREFILL if args.sweep else []) \
                    + (SWEEP_WS if args.warp_specialize else [])
                n_new = s if s <= args.prefill_max else min(s, args.chunk)
                if n_new > 0:
                    base = {"what": "prefill", "kv": kv, "positions": s, "new_tokens": n_new}
                    for rec in guarded(bench_prefill(s, n_new, kv, configs,
                                                     max(args.rep_ms, 100)), base):
                        emit(rec, records, out)
            torch.cuda.empty_cache()
    print()
    print(table(records))
    if out is not None:
        out.close()


if __name__ == "__main__":
    main()
