"""The ``--json`` objects the commands print: one home for their fields.

Every object starts with the same header (``engine_header``: command, model, device, ctx, kv_cache,
cache_dtype, attention, cuda_graphs, page_size, load_s, warm_up_s: the start-up's warm-up seconds
(``infer/warm_up.py``; 0 on the CPU), graph_capture_s: the host seconds spent capturing CUDA
graphs so far, the warm-up's included); ``reply_record`` adds one reply's text and
stats (generate, summarize, one line per reply in chat), ``bench_record`` the measured lengths.
A command cut by Ctrl-C before its engine was built (``infer.ui.startup``) has the header of the
config that would have built it (``load_s``, ``warm_up_s`` and ``graph_capture_s`` null: not
measured), or before the config was made (its flags checked, its model found) the header's fields
null but ``command``; one cut during its warm-up has ``warm_up_s`` and ``graph_capture_s`` null.

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


def engine_header(command: str, engine, load_s: float | None, *, cfg=None,
                  warm_cut: bool = False) -> dict:
    """The fields every ``--json`` object shares. ``engine``: ``infer.engine.Engine``; None when
    a Ctrl-C came before it was built: then the fields its ``EngineConfig`` ``cfg`` gives (the
    attention backend and the stored dtype as the engine would resolve them), ``load_s`` None
    (the load did not finish) and the warm-up and capture seconds None (not measured); with no
    ``cfg`` either (a Ctrl-C before it was made, maybe in torch's import) all but ``command``
    None. ``warm_cut``: a Ctrl-C cut the engine's warm-up, whose seconds (and so the capture
    seconds) are None too."""
    if engine is not None:
        from infer.bench import cache_dtype  # torch, through infer.config: not for --help

        cfg, device, attention, graphs = (engine.config, engine.device, engine.attention_kind,
                                          engine.cuda_graphs)
        stored, warm_s, capture_s = cache_dtype(engine), engine.warm_up_s, engine.graph_capture_s
    elif cfg is not None:
        from infer.attention import resolve_attention

        device = cfg.torch_device
        attention, graphs = resolve_attention(cfg.attention, device), cfg.use_cuda_graphs
        # (as cache_dtype: int8, else the activation dtype the pool would be allocated in)
        stored = "int8" if cfg.kv_cache == "int8" else str(cfg.torch_dtype).removeprefix("torch.")
    else:  # nothing is known but the command (and that nothing was loaded)
        device = attention = graphs = stored = None
    if engine is None or warm_cut:  # not measured (README: unknown values are null)
        warm_s = capture_s = None
    return {"command": command, "model": None if cfg is None else str(cfg.model),
            "device": None if device is None else str(device), "ctx": getattr(cfg, "ctx", None),
            "kv_cache": getattr(cfg, "kv_cache", None), "cache_dtype": stored,
            "attention": attention, "cuda_graphs": graphs,
            "page_size": getattr(cfg, "page_size", None),
            "load_s": None if load_s is None else round(load_s, 3),
            "warm_up_s": None if warm_s is None else round(warm_s, 3),
            "graph_capture_s": None if capture_s is None else round(capture_s, 3)}


def reply_record(command: str, engine, reply, load_s: float | None, *, cfg=None,
                 warm_cut: bool = False, **extra) -> dict:
    """The object for one reply (``infer.ui.render.Reply``); ``extra`` fields go before the
    reply's own (summarize: ``input_chars``, ``replaced_bytes``). ``engine`` None and
    ``warm_cut``: see ``engine_header`` (``cfg`` stands in for the engine)."""
    return {**engine_header(command, engine, load_s, cfg=cfg, warm_cut=warm_cut), **extra,
            **rounded(reply.to_dict())}


def bench_record(engine, load_s: float | None, results: list, interrupted: bool, *,
                 cfg=None) -> dict:
    """The object of ``infer bench``: ``results`` are ``infer.bench.BenchResult`` per length
    (with ``--speculate`` each also has its speculative fields; without, they are absent).
    ``engine`` None: see ``engine_header`` (a Ctrl-C before the load finished: no results)."""
    return {**engine_header("bench", engine, load_s, cfg=cfg), "interrupted": interrupted,
            "results": [rounded(r.to_dict()) for r in results]}
