"""The ``--json`` objects the commands print: one home for their fields.

Every object starts with the same header (``engine_header``: command, model, device, ctx, kv_cache,
cache_dtype, attention, cuda_graphs, page_size, load_s, warm_up_s: the start-up's warm-up seconds
(``infer/warm_up.py``; 0 on the CPU), graph_capture_s: the host seconds spent capturing CUDA
graphs so far, the warm-up's included); ``reply_record`` adds one reply's text and
stats (generate, summarize, one line per reply in chat), ``bench_record`` the measured lengths.

Numbers are rounded for people who read them: seconds (``*_s``) to the millisecond, rates
(``*_per_s``) to 0.1, fractions, ``speedup`` and ``mean_accepted`` to 0.001 (``rounded``); the
measurements are not finer than that.
"""

from __future__ import annotations


def rounded(d: dict) -> dict:
    """A copy of ``d`` with its float values rounded by their key: ``*_per_s`` to 1 decimal,
    ``*_s`` to 3 (milliseconds), ``*fraction_*``, ``speedup`` and ``mean_accepted`` to 3; others
    (and None) unchanged."""
    out = {}
    for key, value in d.items():
        if isinstance(value, float):
            if key.endswith("_per_s"):
                value = round(value, 1)
            elif key.endswith("_s") or "fraction_" in key or key in ("speedup",
                                                                     "mean_accepted"):
                value = round(value, 3)
        out[key] = value
    return out


def engine_header(command: str, engine, load_s: float) -> dict:
    """The fields every ``--json`` object shares. ``engine``: ``infer.engine.Engine``."""
    from infer.bench import cache_dtype  # torch, through infer.config: not for --help

    cfg = engine.config
    return {"command": command, "model": str(cfg.model), "device": str(engine.device),
            "ctx": cfg.ctx, "kv_cache": cfg.kv_cache, "cache_dtype": cache_dtype(engine),
            "attention": engine.attention_kind, "cuda_graphs": engine.cuda_graphs,
            "page_size": cfg.page_size, "load_s": round(load_s, 3),
            "warm_up_s": round(engine.warm_up_s, 3),
            "graph_capture_s": round(engine.graph_capture_s, 3)}


def reply_record(command: str, engine, reply, load_s: float, **extra) -> dict:
    """The object for one reply (``infer.ui.render.Reply``); ``extra`` fields go before the
    reply's own (summarize: ``input_chars``, ``replaced_bytes``)."""
    return {**engine_header(command, engine, load_s), **extra, **rounded(reply.to_dict())}


def bench_record(engine, load_s: float, results: list, interrupted: bool) -> dict:
    """The object of ``infer bench``: ``results`` are ``infer.bench.BenchResult`` per length
    (with ``--speculate`` each also has its speculative fields; without, they are absent)."""
    return {**engine_header("bench", engine, load_s), "interrupted": interrupted,
            "results": [rounded(r.to_dict()) for r in results]}
