"""The engine: load a Qwen3 checkpoint, allocate the KV pool once, run sessions.

``Engine(config)`` checks that ``config.ctx`` fits in device memory (before reading any weight),
loads the model and tokenizer, and allocates one ``KVPool`` of ``ceil(ctx / page_size) + 1`` pages.
A ``Session`` is one conversation: it owns a list of pages and the token ids whose K/V they hold.
``Session.generate(prompt_ids, sampling)`` is a token generator:

1. prefix reuse: keep the longest common prefix of the cached ids and the prompt (at most
   ``len(prompt) - 1`` tokens, so at least one token is prefilled and gives logits); drop the rest;
2. chunked prefill of the remaining prompt, ``config.chunk`` tokens per step, each chunk attending
   to everything cached before it; only the last row of hidden states goes to the lm_head;
3. decode: sample on device, copy the one id to the host (the only sync per token), stop on a stop
   id (not yielded), on ``max_new_tokens`` or when the context is full, else yield it and feed it.
   With ``engine.cuda_graphs`` the feed-and-sample step after the first token is a CUDA graph
   replay (``infer/graphs.py``, one ``GraphRunner`` per engine, one reply at a time); the first
   token is sampled eagerly with the runner's generator, so seeded replies do not depend on it.
   The graph steps run one token ahead of the host: the step that feeds a token is enqueued
   before the host reads that token, so the GPU decodes while the host checks, yields and
   renders it (the CPU time per token no longer adds to the GPU's). A step that fed a stop id
   is dropped from the cache afterwards; no step is enqueued for a token that must be the last
   (``max_new_tokens``, a full context).

NOTE: invariant: ``session.cached_ids`` are exactly the tokens whose K/V are stored in the
session's pages, at positions ``0 .. len(cached_ids) - 1`` (for graph steps: enqueued; later work
on the stream runs after them). The ids are appended only once the step that stores them has
completed or been enqueued, so closing the generator (Ctrl-C in the CLI) at any point leaves the
session consistent. Eagerly, a sampled but not yet fed token is not cached; with graphs, a
yielded token is already fed, so it is cached unless it was the reply's last.

Design after nano-vllm's ``LLMEngine`` / ``BlockManager`` and nanochat's ``Engine.generate``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from infer.attention import make_attention, resolve_attention
from infer.capacity import check_capacity, check_host_capacity, measure_read_bandwidth
from infer.config import EngineConfig, SamplingParams, check_device_available
from infer.kv_pool import KVPool
from infer.meta import build_meta
from infer.sampling import make_generator, sample
from models.config import Qwen3Config


@dataclass
class GenerationStats:
    """Statistics of one reply.

    Attributes:
        prompt_tokens: tokens in the prompt passed to ``generate``.
        reused_tokens: prompt tokens whose K/V were reused from the previous turn (not prefilled).
        new_tokens: tokens yielded (a stop token is not counted).
        ttft_s: seconds from the ``generate`` call's first step to the first sampled token on the
            host (prefill included).
        decode_s: seconds from the first sampled token to the last one.
        stop_reason: ``"stop"`` (a stop id), ``"length"`` (max_new_tokens), ``"context"`` (the
            context is full), ``"interrupted"`` (the consumer closed the generator or an error
            was raised), or ``""`` while running.
    """

    prompt_tokens: int
    reused_tokens: int = 0
    new_tokens: int = 0
    ttft_s: float = 0.0
    decode_s: float = 0.0
    stop_reason: str = ""

    @property
    def prefill_tokens(self) -> int:
        return self.prompt_tokens - self.reused_tokens

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens per second after the first one (0.0 when fewer than 2 tokens were sampled)."""
        return (self.new_tokens - 1) / self.decode_s if self.new_tokens > 1 and self.decode_s > 0 \
            else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["prefill_tokens"] = self.prefill_tokens
        d["decode_tokens_per_s"] = self.decode_tokens_per_s
        return d


def _token_arrived(stats: GenerationStats, t0: float, t_first: float) -> float:
    """Time a token that just reached the host: ``ttft_s`` for the reply's first (``t_first`` is
    0.0 until then), else ``decode_s`` since the first. ``t0`` and the return value are
    ``time.perf_counter()`` seconds; returns the first token's time."""
    now = time.perf_counter()
    if t_first == 0.0:
        stats.ttft_s = now - t0
        return now
    stats.decode_s = now - t_first
    return t_first


class Engine:
    """A loaded model, its tokenizer and one KV pool sized for ``config.ctx``.

    Args:
        config: what to load and how much cache to allocate.
        model, tokenizer: already-built objects to use instead of loading from ``config.model``
            (tests pass mock ones); the model must follow the ``models/qwen3.py`` interface and
            have a ``config`` attribute (``Qwen3Config``) or ``config.model`` must hold a
            ``config.json``.

    Attributes:
        config, model_config (Qwen3Config), model, tokenizer, pool (KVPool), attn (the attention
        backend), device, dtype.
        cuda_graphs: bool, whether decode replays CUDA graphs (``config.use_cuda_graphs``); it may
            be switched between replies (benchmarks compare both on one engine and cache).

    Raises:
        ValueError: if ``config.ctx`` does not fit in free GPU memory (the message names the
            largest context that fits for each cache dtype), or the device is not available.
        FileNotFoundError: if the model folder lacks ``config.json``.
    """

    def __init__(self, config: EngineConfig, *, model=None, tokenizer=None):
        self.config = config
        self.device = config.torch_device
        self.dtype = config.torch_dtype
        check_device_available(self.device)
        cfg = getattr(model, "config", None)
        self.model_config: Qwen3Config = cfg if isinstance(cfg, Qwen3Config) \
            else Qwen3Config.from_json(config.model)
        self.attention_kind = resolve_attention(config.attention, self.device)
        if self.device.type == "cuda" and model is None:
            check_capacity(config, self.model_config, self.attention_kind, self.device)
        if self.device.type == "cpu":
            check_host_capacity(config, self.model_config, weights=model is None)
        if model is None:
            from models.loader import load_model
            model = load_model(config.model, device=self.device, dtype=self.dtype)
        if tokenizer is None:
            from models.tokenizer import Qwen3Tokenizer
            tokenizer = Qwen3Tokenizer.from_folder(config.model)
        self.model = model.eval() if hasattr(model, "eval") else model
        self.tokenizer = tokenizer
        mc = self.model_config
        self.pool = KVPool(mc.num_hidden_layers, mc.num_key_value_heads, mc.head_dim,
                           config.num_pages, config.page_size, config.kv_cache, self.dtype,
                           self.device)
        self.attn = make_attention(self.attention_kind, self.pool, group=mc.gqa_group)
        self._bandwidth: float | None = None
        self.cuda_graphs = config.use_cuda_graphs
        self._graph_runner = None

    @property
    def ctx(self) -> int:
        """Tokens one session can hold (prompt + replies over all turns)."""
        return self.config.ctx

    def ceiling_tokens_per_s(self, num_cached: int) -> float | None:
        """Decode ceiling (tokens/s) with ``num_cached`` positions cached: device read bandwidth
        / bytes read per token (weights without the embedding, plus K/V and INT8 scales of the
        cached positions), DESIGN.md "Measuring speed". The bandwidth is measured once, on the
        first call (~0.1 s). None on the CPU."""
        if self.device.type != "cuda":
            return None
        if self._bandwidth is None:
            self._bandwidth = measure_read_bandwidth(self.device)
        mc, dtype_bytes = self.model_config, torch.finfo(self.dtype).bits // 8
        kv = mc.kv_bytes_per_token(self.config.kv_cache)
        if self.config.kv_cache == "bf16":
            kv = kv * dtype_bytes // 2
        return self._bandwidth / (mc.weight_bytes_per_token(dtype_bytes) + num_cached * kv)

    def graph_runner(self):
        """The engine's ``infer.graphs.GraphRunner`` (built on first use). On a CPU it runs the
        same static-buffer step without capture (tests).

        Raises:
            ValueError: on CUDA with an attention backend other than triton.
        """
        if self._graph_runner is None:
            from infer.graphs import GraphRunner

            capture = self.device.type == "cuda"
            if capture and self.attention_kind != "triton":
                raise ValueError(f"CUDA graphs need the triton attention backend, not "
                                 f"{self.attention_kind}: use --attention triton or "
                                 f"--no-cuda-graphs")
            self._graph_runner = GraphRunner(
                self.model, self.attn, vocab_size=self.model_config.vocab_size,
                page_size=self.config.page_size, max_pages=self.config.num_pages,
                device=self.device, vocab_limit=getattr(self.tokenizer, "vocab_limit", None),
                capture=capture)
        return self._graph_runner

    def new_session(self) -> Session:
        """A fresh, empty conversation on this engine's pool."""
        return Session(self)

    def default_sampling(self, **overrides) -> SamplingParams:
        """``SamplingParams`` from the checkpoint's generation_config.json, then ``overrides``
        (None values ignored)."""
        folder = Path(self.config.model) if self.config.model else None
        return SamplingParams.from_generation_config(folder, **overrides)


class Session:
    """One conversation: owns pages of the engine's pool and the ids whose K/V they hold.

    Attributes:
        stats: ``GenerationStats`` of the latest reply (None before the first).
    """

    def __init__(self, engine: Engine):
        self.engine = engine
        self._pages: list[int] = []
        self._ids: list[int] = []
        self.stats: GenerationStats | None = None

    @property
    def cached_ids(self) -> list[int]:
        """Token ids whose K/V are stored, position order (a copy)."""
        return list(self._ids)

    @property
    def num_cached(self) -> int:
        return len(self._ids)

    def reset(self) -> None:
        """Forget the conversation and return its pages to the pool."""
        self._truncate(0)

    close = reset

    def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams | None = None, *,
                 on_prefill: Callable[[int, int], None] | None = None) -> Iterator[int]:
        """Reply to ``prompt_ids`` (the whole conversation so far), yielding new token ids.

        Args:
            prompt_ids: the full token sequence to continue (all turns, rendered); its common
                prefix with ``cached_ids`` is reused, the rest prefilled.
            sampling: None means greedy (temperature 0).
            on_prefill: called as ``on_prefill(done, total)`` with the prompt tokens prefilled so
                far and the number to prefill (reused ones excluded): once with ``done = 0``
                before the first chunk, then after each chunk has completed on the device (the
                callback makes the host wait for each chunk; without it prefill runs ahead).

        Returns:
            An iterator of token ids (host ints). Stop ids are not yielded. ``self.stats`` is
            updated while it runs and final once it is exhausted or closed.

        Raises:
            ValueError (at call time): an empty prompt, or one that does not leave room for a
                reply (``len(prompt_ids) + 1 > ctx``; the message gives both counts).
        """
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise ValueError("the prompt is empty: give at least one token")
        ctx = self.engine.ctx
        if len(prompt) + 1 > ctx:
            raise ValueError(f"the prompt has {len(prompt)} tokens but the context holds {ctx} "
                             f"(prompt + at least 1 new token): raise --ctx above "
                             f"{len(prompt)} or shorten the prompt")
        return self._generate(prompt, sampling or SamplingParams(temperature=0.0), on_prefill)

    # ------------------------------------------------------------------ internals

    def _truncate(self, n: int) -> None:
        """Keep the first ``n`` cached positions; free the pages past them.

        Ids go first, then the pages leave the session, then they go back to the pool: a Ctrl-C
        in between can leave the session owning a page it no longer needs (the next truncation
        frees it) or leak pages, never list positions without a page or leave one page both
        free and owned (a later step would share it).
        """
        keep = self.engine.pool.pages_for(n)
        del self._ids[n:]
        tail = self._pages[keep:]
        del self._pages[keep:]
        self.engine.pool.free(tail)

    def _forward(self, ids: list[int], ids_t: torch.Tensor | None = None) -> torch.Tensor:
        """Run the model on new tokens after the cached ones; return the last row's hidden [1, H].

        ``ids``: the new token ids (host); ``ids_t``: the same as an int64 device tensor [n] if
        already there. Extends ``cached_ids`` only once the step has completed.
        """
        eng = self.engine
        start, n = len(self._ids), len(ids)
        need = eng.pool.pages_for(start + n) - len(self._pages)
        if need > 0:
            self._pages.extend(eng.pool.allocate(need))
        meta = build_meta([(self._pages, start, n)], eng.config.page_size, eng.device)
        if ids_t is None:
            ids_t = torch.tensor(ids, dtype=torch.int64, device=eng.device)
        with torch.inference_mode():
            hidden = eng.model.forward(ids_t, meta.positions, eng.attn, meta)
            last = hidden[-1:]
        self._ids.extend(ids)
        return last

    def _decode_ahead(self, runner, ticket: int, tok_t: torch.Tensor, sp: SamplingParams,
                      stats: GenerationStats, t0: float, stop_ids: set[int]) -> Iterator[int]:
        """Graph decode after the eagerly sampled first token ``tok_t`` (device int64 [1]): each
        token is fed (its step enqueued) before the host reads it, so the GPU runs one step ahead
        of the host. Yields tokens and sets ``stats`` like the eager loop.

        A token is fed ahead only if the page its step may need is free; otherwise the host
        reads the token first, so that a stop id never fails for want of a page (as eagerly).

        Raises:
            RuntimeError: another reply began on the runner (``GraphRunner.check_ticket``).
            OutOfPages: the pool has no page for a token that must be fed (as eagerly).
        """
        eng = self.engine
        t_first = 0.0

        def feed_step(pos: int, need: int) -> torch.Tensor:
            if need > 0:
                self._pages.extend(eng.pool.allocate(need))
            return runner.step(ticket, tok_t, self._pages, pos)

        while True:
            runner.check_ticket(ticket)  # tok_t lives in the runner's buffers
            pos = len(self._ids)
            # a step for this token is needed only if another token may follow it
            feed = pos < eng.ctx and (sp.max_new_tokens is None
                                      or stats.new_tokens + 1 < sp.max_new_tokens)
            need = eng.pool.pages_for(pos + 1) - len(self._pages)
            ahead = feed and need <= eng.pool.num_free_pages
            runner.token_to_host(tok_t)  # before the next step overwrites it
            if ahead:
                nxt_t = feed_step(pos, need)
            tok = runner.host_token()  # the one device->host sync per token
            t_first = _token_arrived(stats, t0, t_first)
            if tok in stop_ids:
                if ahead:
                    self._truncate(pos)  # the step that fed the stop id: not cached
                stats.stop_reason = "stop"
                return
            if feed and not ahead:
                nxt_t = feed_step(pos, need)  # no page free: raises OutOfPages, as eagerly
            if feed:
                self._ids.append(tok)
            stats.new_tokens += 1
            yield tok
            if not feed:
                limit = sp.max_new_tokens is not None and stats.new_tokens >= sp.max_new_tokens
                stats.stop_reason = "length" if limit else "context"
                return
            tok_t = nxt_t

    def _generate(self, prompt: list[int], sp: SamplingParams,
                  on_prefill: Callable[[int, int], None] | None = None) -> Iterator[int]:
        eng = self.engine
        t0 = time.perf_counter()
        reuse = 0
        limit = min(len(self._ids), len(prompt) - 1)
        while reuse < limit and self._ids[reuse] == prompt[reuse]:
            reuse += 1
        self._truncate(reuse)
        stats = self.stats = GenerationStats(prompt_tokens=len(prompt), reused_tokens=reuse)
        stop_ids = set() if sp.ignore_eos else set(getattr(eng.tokenizer, "stop_ids", ()) or ())
        vocab_limit = getattr(eng.tokenizer, "vocab_limit", None)
        chunk = eng.config.chunk
        runner = eng.graph_runner() if eng.cuda_graphs else None
        try:
            if on_prefill is not None:
                on_prefill(0, len(prompt) - reuse)
            for s in range(reuse, len(prompt), chunk):
                hidden = self._forward(prompt[s:s + chunk])
                if on_prefill is not None:
                    if eng.device.type == "cuda":
                        torch.cuda.synchronize(eng.device)
                    on_prefill(min(s + chunk, len(prompt)) - reuse, len(prompt) - reuse)
            if runner is not None:  # captures the step on first use of this sampling mode
                ticket, gen, seen = runner.begin(sp, self._pages)
                with torch.inference_mode():  # the first token: eager, with the runner's state
                    logits = eng.model.compute_logits(hidden)  # float32 [1, vocab]
                    tok_t = sample(logits, sp, gen, presence=seen, vocab_limit=vocab_limit)
                yield from self._decode_ahead(runner, ticket, tok_t, sp, stats, t0, stop_ids)
                return
            gen = None if sp.greedy else make_generator(sp.seed, eng.device)
            seen = None
            if sp.presence_penalty:
                seen = torch.zeros(self.engine.model_config.vocab_size, dtype=torch.bool,
                                   device=eng.device)
            t_first = 0.0
            while True:
                with torch.inference_mode():
                    logits = eng.model.compute_logits(hidden)  # float32 [1, vocab]
                    tok_t = sample(logits, sp, gen, presence=seen, vocab_limit=vocab_limit)
                tok = int(tok_t.item())  # the one device->host sync per token
                t_first = _token_arrived(stats, t0, t_first)
                if tok in stop_ids:
                    stats.stop_reason = "stop"
                    return
                stats.new_tokens += 1
                yield tok
                if sp.max_new_tokens is not None and stats.new_tokens >= sp.max_new_tokens:
                    stats.stop_reason = "length"
                    return
                if len(self._ids) >= eng.ctx:
                    stats.stop_reason = "context"
                    return
                if seen is not None:
                    seen[tok_t] = True
                hidden = self._forward([tok], tok_t.view(1))
        finally:
            if not stats.stop_reason:
                stats.stop_reason = "interrupted"
