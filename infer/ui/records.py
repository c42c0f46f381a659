"""The ``--json`` objects the commands print: one home for their fields.

Every object starts with the same header (``engine_header``: command, model, device, ctx, kv_cache,
cache_dtype, attention, cuda_graphs, page_size, load_s); ``reply_record`` adds one reply's text and
stats (generate, summarize, one line per reply in chat), ``bench_record`` the measured lengths.
"""

from __future__ import annotations

from infer.bench import cache_dtype


def engine_header(command: str, engine, load_s: float) -> dict:
    """The fields every ``--json`` object shares. ``engine``: ``infer.engine.Engine``."""
    cfg = engine.config
    return {"command": command, "model": str(cfg.model), "device": str(engine.device),
            "ctx": cfg.ctx, "kv_cache": cfg.kv_cache, "cache_dtype": cache_dtype(engine),
            "attention": engine.attention_kind, "cuda_graphs": engine.cuda_graphs,
            "page_size": cfg.page_size, "load_s": round(load_s, 3)}


def reply_record(command: str, engine, reply, load_s: float, **extra) -> dict:
    """The object for one reply (``infer.ui.render.Reply``); ``extra`` fields go before the
    reply's own (summarize: ``input_chars``, ``replaced_bytes``)."""
    return {**engine_header(command, engine, load_s), **extra, **reply.to_dict()}


def bench_record(engine, load_s: float, results: list, interrupted: bool) -> dict:
    """The object of ``infer bench``: ``results`` are ``infer.bench.BenchResult`` per length."""
    return {**engine_header("bench", engine, load_s), "interrupted": interrupted,
            "results": [r.to_dict() for r in results]}
