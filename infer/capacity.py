"""How much context fits on the GPU, computed before any weight is loaded.

Budget = free device memory (``torch.cuda.mem_get_info``) - weight bytes - activation margin; the KV
pool must fit in what is left. Weight bytes are the checkpoint's ``*.safetensors`` sizes (rescaled
to the run dtype), or derived from ``config.json`` when there are none. The activation margin covers
one prefill chunk: hidden/MLP activations, the last row's logits, and for the reference attention
its float32 score matrix over the whole context (the Triton kernels never materialize it).

A refusal suggests the largest context that fits in the budget less ``HINT_MARGIN_PERCENT`` of it
(``hint_budget``): free memory drifts a little between runs (the CUDA context, other processes,
the page cache), and a context that fit to the page on one run was refused on the next.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from infer.config import KV_CACHES, MAX_BATCH, EngineConfig, pool_pages
from infer.host_memory import available_host_bytes
from infer.kv_pool import KVPool
from infer.wording import counted
from models.config import Qwen3Config

FIXED_MARGIN = 1 << 30  # CUDA context leftovers, allocator fragmentation, workspaces (bytes)
HINT_MARGIN_PERCENT = 5  # of the budget, left unused by a suggested context (module docstring)
# NOTE: the smallest --prefill-chunk a refusal suggests. Each chunk reads every weight once (and
# the reference attention gathers the whole cached K/V), so the cost per token grows as the chunk
# shrinks, steeply below a few dozen rows (BENCHMARKS.md, "The CPU").
MIN_HINT_CHUNK = 64


def weight_bytes(folder: str | Path, mc: Qwen3Config, dtype: torch.dtype) -> int:
    """Bytes the weights take in ``dtype``: from the safetensors file sizes, else the config."""
    dtype_bytes = torch.finfo(dtype).bits // 8
    files = [f for f in Path(folder).glob("*.safetensors") if f.is_file()]  # the loader's
    # checks word a folder or a broken link in a file's place
    if files:
        stored = torch.finfo(mc.dtype).bits // 8
        return sum(f.stat().st_size for f in files) * dtype_bytes // stored
    h = mc.hidden_size
    n = mc.weight_bytes_per_token(dtype_bytes)  # lm_head included, embedding excluded
    return n + (0 if mc.tie_word_embeddings else dtype_bytes * mc.vocab_size * h)


def activation_bytes(mc: Qwen3Config, chunk: int, ctx: int, attention: str, dtype_bytes: int
                     ) -> int:
    """Peak transient bytes of one prefill chunk of ``chunk`` tokens at context ``ctx`` (the
    prefill's working set, next to the KV pool and the weights), on the GPU or the host.

    With h = hidden_size, i = intermediate_size, q/kv = the query and K/V projection widths,
    b = ``dtype_bytes``, V = vocab_size::

        FIXED_MARGIN + 2 * chunk * (4h + 3i + 2(q + 2kv)) * b     hidden/MLP activations
                     + 4 * V                                      the last row's float32 logits

    and for the ``"reference"`` attention (always on the CPU; ``kernels/reference.py``), which
    materializes float32 tensors over the whole context, with Hq query heads of dimension d:
    ``+ 4 * (3 * Hq * chunk * ctx + 4 * ctx * Hq * d + 2 * chunk * Hq * d)``: scores, mask and
    softmax [Hq, chunk, ctx]; K and V gathered and repeated to Hq heads; the chunk's queries and
    output. The Triton kernels never materialize the scores.
    """
    h, i = mc.hidden_size, mc.intermediate_size
    per_tok = 4 * h + 3 * i + 2 * (mc.q_size + 2 * mc.kv_size)
    act = 2 * chunk * per_tok * dtype_bytes + 4 * mc.vocab_size
    if attention == "reference":
        hq, d = mc.num_attention_heads, mc.head_dim
        # scores, mask and softmax in float32 [Hq, chunk, ctx], K/V gathered and repeated
        act += 4 * (3 * hq * chunk * ctx + 4 * ctx * hq * d + 2 * chunk * hq * d)
    return FIXED_MARGIN + act


def bytes_needed(cfg: EngineConfig, mc: Qwen3Config, attention: str, kv_cache: str,
                 ctx: int) -> int:
    """KV pool (``cfg.max_batch`` contexts of ``ctx``) plus activation margin (weights
    excluded)."""
    dtype_bytes = torch.finfo(cfg.torch_dtype).bits // 8
    pages = pool_pages(ctx, cfg.page_size, cfg.max_batch)
    per_page = KVPool.bytes_per_page(mc.num_hidden_layers, mc.num_key_value_heads, mc.head_dim,
                                     cfg.page_size, kv_cache, dtype_bytes)
    return pages * per_page + activation_bytes(mc, min(cfg.chunk, ctx), ctx, attention,
                                               dtype_bytes)


def largest_ctx(budget: int, cfg: EngineConfig, mc: Qwen3Config, attention: str,
                kv_cache: str) -> int:
    """The largest context (tokens, a multiple of the page size) whose needs fit in ``budget``;
    0 if none does."""
    lo, hi = 0, 1 << 24
    while lo < hi:  # largest page multiple m * page_size that fits
        mid = (lo + hi + 1) // 2
        if bytes_needed(cfg, mc, attention, kv_cache, mid * cfg.page_size) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo * cfg.page_size


def largest_chunk(budget: int, cfg: EngineConfig, mc: Qwen3Config, attention: str,
                  kv_cache: str) -> int:
    """The largest prefill chunk (tokens), at least ``MIN_HINT_CHUNK`` and smaller than
    ``cfg``'s, with which ``cfg.ctx`` fits in ``budget`` (bytes); 0 if none does (a smaller chunk
    would make the prefill too slow to suggest). A chunk's working set (``activation_bytes``)
    grows with the chunk: for the reference attention its float32 scores are [Hq, chunk, ctx]."""
    lo, hi = MIN_HINT_CHUNK - 1, min(cfg.chunk, cfg.ctx) - 1  # lo: none fits (yet)
    while lo < hi:  # largest chunk that fits
        mid = (lo + hi + 1) // 2
        if bytes_needed(replace(cfg, prefill_chunk=mid), mc, attention, kv_cache,
                        cfg.ctx) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo if lo >= MIN_HINT_CHUNK else 0


def hint_budget(budget: int) -> int:
    """The part of ``budget`` (bytes) a context suggested in a message may take: all but
    ``HINT_MARGIN_PERCENT`` of it, so that the suggestion still fits when the free memory is a
    little lower on the next run. A budget of 0 or less stays as it is (nothing fits)."""
    return budget - max(budget, 0) * HINT_MARGIN_PERCENT // 100


def kv_cache_words(cfg: EngineConfig) -> str:
    """``--kv-cache NAME`` as an error message says it, naming the dtype the pool really stores:
    bf16 is K/V in the activation dtype, e.g. ``--kv-cache bf16 (float32 on the CPU)``."""
    stored = str(cfg.torch_dtype).removeprefix("torch.")
    if cfg.kv_cache == "int8" or cfg.torch_dtype == torch.bfloat16:
        return f"--kv-cache {cfg.kv_cache}"
    where = f"with --dtype {cfg.dtype}" if cfg.dtype else f"on the {cfg.torch_device.type.upper()}"
    return f"--kv-cache {cfg.kv_cache} ({stored} {where})"


def check_capacity(cfg: EngineConfig, mc: Qwen3Config, attention: str,
                   device: torch.device, *, max_ctx: int) -> None:
    """Raise ``ValueError`` if ``cfg.ctx`` does not fit on ``device`` next to the weights.

    The message gives the free memory, the weight bytes and, for each cache dtype, the largest
    context that fits with ``HINT_MARGIN_PERCENT`` of the budget to spare (``hint_budget``), at
    most ``max_ctx``: the largest context the checkpoint supports (tokens,
    ``ContextPlan.max_ctx``), not ``mc``'s own limit, which YaRN added for ``cfg.ctx`` sets
    lower (a factor 3 for 96k stops at 98,304 where the checkpoint runs 131,072).
    CUDA only (call it before loading the weights).
    """
    free, _total = torch.cuda.mem_get_info(device)
    weights = weight_bytes(cfg.model, mc, cfg.torch_dtype)
    budget = free - weights
    if bytes_needed(cfg, mc, attention, cfg.kv_cache, cfg.ctx) <= budget:
        return
    hint = hint_budget(budget)
    fits = ", ".join(  # no hint past what the checkpoint supports
        f"{kv}: {counted(min(largest_ctx(hint, cfg, mc, attention, kv), max_ctx), 'token')}"
        for kv in KV_CACHES)
    gib = 1 << 30
    raise ValueError(f"--ctx {cfg.ctx:,} with {kv_cache_words(cfg)} does not fit: "
                     f"{free / gib:.1f} GiB free, weights take {weights / gib:.1f} GiB. "
                     f"Largest context that fits: {fits} (with a {HINT_MARGIN_PERCENT} % margin, "
                     "as free memory varies between runs). Lower --ctx"
                     + ("" if cfg.kv_cache == "int8" else " or use --kv-cache int8"))


def largest_batch(cfg: EngineConfig, mc: Qwen3Config, attention: str, device: torch.device,
                  limit: int = MAX_BATCH) -> int:
    """The most sequences of ``cfg.ctx`` positions (up to ``limit``) whose KV pool fits on
    ``device`` next to the weights: what ``EngineConfig.max_batch`` may be. CUDA: free memory
    (``torch.cuda.mem_get_info``); CPU: available host memory
    (``available_host_bytes``, capped by a container's limit). 0 if not even one fits.
    Call it before loading the weights."""
    if torch.device(device).type == "cuda":
        budget = torch.cuda.mem_get_info(device)[0] - weight_bytes(cfg.model, mc, cfg.torch_dtype)
    else:
        avail = available_host_bytes()
        if avail is None:
            return limit
        budget = avail - weight_bytes(cfg.model, mc, cfg.torch_dtype)
    for b in range(limit, 0, -1):
        if bytes_needed(replace(cfg, max_batch=b), mc, attention, cfg.kv_cache, cfg.ctx) <= budget:
            return b
    return 0


def check_host_capacity(cfg: EngineConfig, mc: Qwen3Config, attention: str, *, max_ctx: int,
                        weights: bool = True) -> None:
    """Raise ``ValueError`` if ``cfg.ctx`` does not fit in available host memory
    (``available_host_bytes``: a container's memory limit caps it) on a CPU run, before anything
    is allocated: the KV pool plus one prefill chunk's working set
    (``bytes_needed``: ``activation_bytes`` of ``attention``, the same estimate as the GPU
    check's) plus the weights, when ``weights``. ``max_ctx``: the largest context the
    checkpoint supports, the most a suggestion names (as ``check_capacity``).

    The message names the dtype the pool stores, the largest context that fits one sequence,
    and, unless the cache is int8 already, the largest one ``--kv-cache int8`` fits, each with
    ``HINT_MARGIN_PERCENT`` of the budget to spare (``hint_budget``); and when a smaller
    ``--prefill-chunk`` of at least ``MIN_HINT_CHUNK`` tokens makes ``cfg.ctx`` itself fit (with
    this cache, else with int8), the largest such chunk (``_chunk_hint``). Does nothing when the
    available memory cannot be read.
    """
    avail = available_host_bytes()
    if avail is None:
        return
    wbytes = weight_bytes(cfg.model, mc, cfg.torch_dtype) if weights else 0
    need = bytes_needed(cfg, mc, attention, cfg.kv_cache, cfg.ctx)
    if need + wbytes <= avail:
        return
    one = replace(cfg, max_batch=1)

    def largest(kv_cache: str) -> int:  # one sequence, at most what the checkpoint supports
        return min(largest_ctx(hint_budget(avail - wbytes), one, mc, attention, kv_cache),
                   max_ctx)

    pool = need - activation_bytes(mc, min(cfg.chunk, cfg.ctx), cfg.ctx, attention,
                                   torch.finfo(cfg.torch_dtype).bits // 8)
    gib = 1 << 30
    raise ValueError(f"--ctx {cfg.ctx:,} with {kv_cache_words(cfg)} does not fit in host "
                     f"memory: it needs {(need + wbytes) / gib:.1f} GiB (KV cache "
                     f"{pool / gib:.1f} GiB, a prefill chunk's working set "
                     f"{(need - pool) / gib:.1f} GiB"
                     + (f", weights {wbytes / gib:.1f} GiB" if weights else "")
                     + f"), {avail / gib:.1f} GiB available. The largest context that fits is "
                     f"{counted(largest(cfg.kv_cache), 'token')} (with a {HINT_MARGIN_PERCENT} % "
                     "margin, as available memory varies between runs): lower --ctx"
                     + ("" if cfg.kv_cache == "int8" or largest("int8") <= largest(cfg.kv_cache)
                        else f", or use --kv-cache int8 (it fits "
                             f"{counted(largest('int8'), 'token')})")
                     + _chunk_hint(hint_budget(avail - wbytes), cfg, mc, attention,
                                   largest("int8") >= cfg.ctx))


def _chunk_hint(budget: int, cfg: EngineConfig, mc: Qwen3Config, attention: str,
                int8_fits: bool) -> str:
    """The refusal's ending that names the largest ``--prefill-chunk`` with which ``cfg.ctx``
    fits in ``budget``: with ``cfg.kv_cache``, else (unless ``int8_fits`` already, which the
    message says) with ``--kv-cache int8``; "" when no chunk of at least ``MIN_HINT_CHUNK``
    tokens does (the message's other remedies stand alone)."""
    chunk = largest_chunk(budget, cfg, mc, attention, cfg.kv_cache)
    kv = cfg.kv_cache
    if not chunk and kv != "int8" and not int8_fits:
        chunk, kv = largest_chunk(budget, cfg, mc, attention, "int8"), "int8"
    if not chunk:
        return ""
    with_kv = "" if kv == cfg.kv_cache else "--kv-cache int8 and "
    return (f", or keep --ctx {cfg.ctx:,} with {with_kv}--prefill-chunk {chunk:,} or less "
            f"(now {cfg.chunk:,}: a smaller chunk has a smaller working set)")
