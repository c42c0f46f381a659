"""Decode cases of the attention benchmark (``benchmarks/attention.py``; its module docstring
defines the records): one call timed alone (``graph`` and ``eager``) and L distinct layers in ONE
CUDA graph (``graph_layers``: ours, ours_stage1, the plain-read peer and SDPA).
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F

from benchmarks.attention_common import (
    DEVICE,
    HKV,
    HQ,
    PAGE,
    D,
    bench,
    error_text,
    make_pool,
)

SWEEP_SPLITS = [8, 16, 33, 64]


def bench_graph(fn, rep_ms: int) -> float:
    """Median milliseconds of ``fn`` replayed from a CUDA graph (no host launch overhead)."""
    from benchmarks.timing import bench_graph as _bench_graph
    return _bench_graph(fn, rep_ms)


def bench_graph_many(fns, rep_ms: int) -> float:
    """Median milliseconds per replay of ONE CUDA graph running ``fns`` in order."""
    from benchmarks.timing import bench_graph_many as _bench_graph_many
    return _bench_graph_many(fns, rep_ms)


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
    the launcher's default; a ``num_splits`` key of ``--decode-opts`` wins) and ``tile_opts``,
    the other ``--decode-opts`` keys (``kernels.tiles.DecodeTiles`` fields, see ``ours_fn``)."""
    opts = dict(opts)
    return {"num_splits": opts.pop("num_splits", num_splits), "tile_opts": opts}


def make_workspace(dec, kws: list, kv_dtype: torch.dtype):
    """One ``DecodeWorkspace`` (batch 1) large enough for the calls of each kwargs in ``kws``."""
    dev = torch.device(DEVICE)
    splits = max(kw["num_splits"] or dec.default_num_splits(1, HKV, dev, kv_dtype) for kw in kws)
    return dec.DecodeWorkspace.allocate(1, HKV, HQ // HKV, splits, D, dev)


def ours_fn(dec, layer: dict, kw: dict, ws, stage1: bool = False):
    """A no-argument call of our decode on one layer, into its preallocated ``out`` (or of stage 1
    alone, which writes only the workspace): allocates nothing, so it can be captured."""
    from kernels.tiles import decode_tiles

    args = (layer["q"], layer["k"], layer["v"], layer["seq_lens"], layer["table"])
    default = decode_tiles(layer["q"].device, layer["k"].dtype, page_size=PAGE, rows=HQ // HKV)
    tiles = dataclasses.replace(default, **kw["tile_opts"])
    common = dict(num_queries=1, sm_scale=D ** -0.5, k_scale=layer["ks"], v_scale=layer["vs"],
                  workspace=ws, num_splits=kw["num_splits"])
    if stage1:  # no PDL: back-to-back stage-1 kernels, which never follow each other in the model,
        # would be scheduled early onto SMs the previous layer's stage 1 still fills
        no_pdl = dataclasses.replace(tiles, pdl=False)
        return lambda: dec._decode_stage1(*args, **common, tiles=no_pdl)
    return lambda: dec.decode_attention(*args, out=layer["out"], tiles=tiles, **common)


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


def _timed_layers(base: dict, impl: str, n: int, bw: float, make_fns, rep_ms: int) -> dict:
    """``make_fns()`` builds the L layers' calls (and may run one); their one-graph replay as a
    ``graph_layers`` record, or an ``error`` record if building or timing raised (the error is
    returned after the ``except`` block, so no traceback keeps the tensors alive)."""
    err = None
    try:
        ms = bench_graph_many(make_fns(), rep_ms)
    except Exception as e:
        err = error_text(e)
    if err is not None:
        return {**base, "impl": impl, "layers": n, "error": err}
    return _layer_record(base, impl, n, ms, bw)


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

    def make_fns():
        fns = []
        for _ in range(n):
            kc = torch.randn(1, HKV, seq_len, D, dtype=torch.bfloat16, device=DEVICE)
            q4 = torch.randn(1, HQ, 1, D, dtype=torch.bfloat16, device=DEVICE)
            fns.append(sdpa_fn(q4, kc, torch.randn_like(kc), torch.empty_like(q4)))
        fns[0]()
        return fns

    yield _timed_layers(base, "sdpa", n, bw, make_fns, rep_ms)


def _layers_read(base: dict, bw: float, layers: int, max_bytes: float, rep_ms: int):
    """The plain-read peer: ``torch.sum`` over L distinct bf16 tensors of the cache's byte count
    (``cache_bytes``), one graph, figures per layer: what reading those bytes costs at this size
    with no attention at all (start-up and tail included, as for ours)."""
    nbytes = cache_bytes(base["positions"], base["kv"])
    n = fit_layers(layers, nbytes, max_bytes)

    def make_fns():
        xs = [torch.randn(nbytes // 2, dtype=torch.bfloat16, device=DEVICE) for _ in range(n)]
        outs = [torch.empty((), dtype=torch.bfloat16, device=DEVICE) for _ in range(n)]
        return [lambda x=x, o=o: torch.sum(x, dim=0, out=o) for x, o in zip(xs, outs, strict=True)]

    yield _timed_layers(base, "read", n, bw, make_fns, rep_ms)
