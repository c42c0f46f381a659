"""The engine: load a Qwen3 checkpoint, allocate the KV pool once, run sessions.

``Engine(config)`` checks that ``config.ctx`` (times ``config.max_batch`` sequences) fits in device
memory (before reading any weight), loads the model and tokenizer, and allocates one ``KVPool``.
A ``Session`` (``infer/session.py``) is one conversation; ``Session.generate`` replies to one
prompt, and ``Engine.generate_batch`` replies to several sessions' prompts together: each is
prefilled in turn, then all decode as one batch through the same kernels and CUDA graphs
(``infer/decode_loop.py``, ``infer/graphs.py``).

Design after nano-vllm's ``LLMEngine`` / ``BlockManager`` and nanochat's ``Engine.generate``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

import torch

from infer.attention import make_attention, resolve_attention
from infer.bandwidth import read_bandwidth
from infer.capacity import check_capacity, check_host_capacity
from infer.config import MAX_BATCH, EngineConfig, check_device_available, check_graph_backend
from infer.decode_loop import decode
from infer.graphs import GraphRunner
from infer.kv_pool import KVPool
from infer.sampling_params import SamplingParams
from infer.session import Session
from infer.stats import GenerationStats
from models.config import Qwen3Config
from models.context import plan_context

__all__ = ["Engine", "GenerationStats", "Session"]

BatchPrefillCallback = Callable[[int, int, int], None]  # (request index, done, total)


class DecodeModel(Protocol):
    """What the engine needs of a model (``models/qwen3.py``'s ``Qwen3ForCausalLM``; the tests'
    mock models implement it too)."""

    config: Qwen3Config

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn, meta
                ) -> torch.Tensor: ...

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor: ...


class TokenizerInfo(Protocol):
    """What the engine needs of a tokenizer (``models/tokenizer.py``'s ``Qwen3Tokenizer``).

    Attributes:
        stop_ids: ids that end a reply (not yielded).
        vocab_limit: ids >= this are never sampled (None: no limit).
    """

    stop_ids: set[int] | frozenset[int]
    vocab_limit: int | None


class Engine:
    """A loaded model, its tokenizer and one KV pool sized for ``config.max_batch`` sequences of
    ``config.ctx`` positions.

    Args:
        config: what to load and how much cache to allocate.
        model, tokenizer: already-built objects to use instead of loading from ``config.model``
            (tests pass mock ones): a ``DecodeModel`` and a ``TokenizerInfo``.

    Attributes:
        config, model_config (Qwen3Config: the model's, YaRN included), model, tokenizer, pool
        (KVPool), attn (the attention backend), device, dtype.
        context: the ``models.context.ContextPlan`` of ``config.ctx`` (``max_ctx``, whether
            YaRN was turned on and the note saying so). A model passed in is used as built; one
            the engine loads for an INT8 pool gets its key channels balanced first
            (``models/key_balance.py``: exact for attention, fewer INT8 rounding errors).
        max_batch: the most sessions ``generate_batch`` decodes together.
        warm_up_s: seconds spent in ``infer.warm_up.warm_up`` (0.0 when never called).
        cuda_graphs: bool, whether decode steps replay CUDA graphs (``config.use_cuda_graphs``)
            or run the same runner eagerly; it may be switched between replies (benchmarks
            compare both on one engine and cache).

    Raises:
        ValueError: if ``config.ctx`` is beyond what the checkpoint supports, does not fit in
            free GPU memory (the message names the largest context that fits for each cache
            dtype), or the device is not available.
        FileNotFoundError: if the model folder lacks ``config.json``.
    """

    def __init__(self, config: EngineConfig, *, model=None, tokenizer=None):
        self.config = config
        self.device = config.torch_device
        self.dtype = config.torch_dtype
        check_device_available(self.device)
        # the checkpoint's config, with static YaRN added when ctx is past its native length
        self.context = plan_context(model.config if model is not None
                                    else Qwen3Config.from_json(config.model), config.ctx)
        self.model_config: Qwen3Config = model.config if model is not None \
            else self.context.config
        self.attention_kind = resolve_attention(config.attention, self.device)
        if self.device.type == "cuda" and model is None:
            check_capacity(config, self.model_config, self.attention_kind, self.device,
                           max_ctx=self.context.max_ctx)
        if self.device.type == "cpu":
            check_host_capacity(config, self.model_config, self.attention_kind,
                                max_ctx=self.context.max_ctx, weights=model is None)
        if model is None:
            from infer.warm_up import start_triton_key
            from models.loader import load_model
            key_thread = start_triton_key(self.device)  # hashed while the weights load
            model = load_model(config.model, device=self.device, dtype=self.dtype,
                               config=self.model_config)
            if config.kv_cache == "int8":  # exact for attention; flattens the keys' INT8 codes
                from models.key_balance import balance_keys, default_mode
                balance_keys(model, default_mode())
            if key_thread is not None:
                key_thread.join()
        if tokenizer is None:
            from models.tokenizer import Qwen3Tokenizer
            tokenizer = Qwen3Tokenizer.from_folder(config.model)
        self.model: DecodeModel = model.eval() if isinstance(model, torch.nn.Module) else model
        self.tokenizer: TokenizerInfo = tokenizer
        self.stop_ids = frozenset(tokenizer.stop_ids or ())
        mc = self.model_config
        self.max_batch = config.max_batch
        self.pool = KVPool(mc.num_hidden_layers, mc.num_key_value_heads, mc.head_dim,
                           config.num_pages, config.page_size, config.kv_cache, self.dtype,
                           self.device)
        self.attn = make_attention(self.attention_kind, self.pool, group=mc.gqa_group,
                                   max_batch=self.max_batch)
        self._bandwidth: float | None = None
        self.cuda_graphs = config.use_cuda_graphs
        self._runners: dict[bool, GraphRunner] = {}
        self._capture_taken_s = 0.0
        self.warm_up_s = 0.0  # infer.warm_up.warm_up's seconds (start-up work before a reply)

    @property
    def ctx(self) -> int:
        """Tokens one session can hold (prompt + replies over all turns)."""
        return self.config.ctx

    @property
    def graph_capture_s(self) -> float:
        """Host seconds this engine has spent capturing CUDA graphs (``GraphRunner.capture_s``;
        0.0 without graphs)."""
        return sum((r.capture_s for r in self._runners.values()), 0.0)

    def take_capture_s(self) -> float:
        """The capture seconds since the previous call (the first call: since start-up), for a
        UI that shows the capture time once and then only when new shapes are captured."""
        total = self.graph_capture_s
        new, self._capture_taken_s = total - self._capture_taken_s, total
        return new

    def ceiling_tokens_per_s(self, num_cached: int, batch: int = 1) -> float | None:
        """Decode ceiling (tokens/s, all sequences together) of ``batch`` sequences with
        ``num_cached`` positions cached each: device read bandwidth x batch / bytes read per
        step (the weights without the embedding once, plus every sequence's K/V and INT8
        scales), DESIGN.md "Measuring speed". The bandwidth is measured once, on the first call
        (~0.1 s). None on the CPU."""
        if self.device.type != "cuda":
            return None
        if self._bandwidth is None:
            self._bandwidth = read_bandwidth(self.device)
        weights = self.model_config.weight_bytes_per_token(torch.finfo(self.dtype).bits // 8)
        kv = batch * num_cached * self.pool.bytes_per_position
        return self._bandwidth * batch / (weights + kv)

    def graph_runner(self) -> GraphRunner:
        """The decode runner for the current ``cuda_graphs`` setting (built on first use): it
        captures CUDA graphs when ``cuda_graphs`` is on and the device is CUDA, and runs the same
        static-buffer step eagerly otherwise.

        Raises:
            ValueError: capturing with an attention backend other than triton.
        """
        capture = self.cuda_graphs and self.device.type == "cuda"
        if capture not in self._runners:
            if capture:
                check_graph_backend(self.attention_kind)
            self._runners[capture] = GraphRunner(
                self.model, self.attn, vocab_size=self.model_config.vocab_size,
                page_size=self.config.page_size, max_pages=self.config.num_pages,
                device=self.device, max_batch=self.max_batch, max_rows=MAX_BATCH,
                vocab_limit=self.tokenizer.vocab_limit, capture=capture)
        return self._runners[capture]

    def new_session(self) -> Session:
        """A fresh, empty conversation on this engine's pool."""
        return Session(self)

    def default_sampling(self, **overrides) -> SamplingParams:
        """``SamplingParams`` from the checkpoint's generation_config.json, then ``overrides``
        (None values ignored)."""
        folder = Path(self.config.model) if self.config.model else None
        return SamplingParams.from_generation_config(folder, **overrides)

    def generate_batch(self, requests: Sequence[tuple[Session, Sequence[int]]],
                       sampling: SamplingParams | None = None, *,
                       on_prefill: BatchPrefillCallback | None = None,
                       speculate: bool = False) -> Iterator[tuple[int, int]]:
        """Reply to several sessions' prompts together, yielding ``(request index, token id)``.

        Each prompt is prefilled in turn (prefix reuse as ``Session.generate``), then all replies
        decode as one batch: every step feeds one token to each live reply, and a reply that ends
        (stop id, ``max_new_tokens``, full context) leaves the batch while the others go on. With
        greedy sampling each reply is the same token sequence as ``session.generate`` alone
        gives. Each session's ``stats`` is its own reply's.

        Args:
            requests: ``(session, prompt_ids)`` pairs, 1 to ``max_batch`` of them, distinct
                sessions of this engine.
            sampling: for every reply; None means greedy.
            on_prefill: called as ``on_prefill(index, done, total)``, as ``Session.generate``'s.
            speculate: prompt-lookup speculative decoding (``infer/verify_step.py``): greedy
                replies stay the same token sequences; drafts share the step's 16 rows with the
                batch's sequences, so a full batch of 16 drafts nothing.

        Raises:
            ValueError (at call time): no request, more than ``max_batch``, a session twice or of
                another engine, or a prompt that does not fit (as ``Session.generate``).
        """
        if not requests:
            raise ValueError("generate_batch needs at least one (session, prompt) request")
        if len(requests) > self.max_batch:
            raise ValueError(f"{len(requests)} requests, but this engine decodes at most "
                             f"{self.max_batch} together: raise max_batch or split them")
        sessions = [s for s, _ in requests]
        if len({id(s) for s in sessions}) != len(sessions) or \
                any(s.engine is not self for s in sessions):
            raise ValueError("each request needs its own session of this engine")
        prompts = [s.check_prompt(p) for s, p in requests]
        return self.run_batch(list(zip(sessions, prompts, strict=True)),
                              sampling or SamplingParams(temperature=0.0), on_prefill, speculate)

    def run_batch(self, requests: list[tuple[Session, list[int]]], sp: SamplingParams,
                  on_prefill: BatchPrefillCallback | None, speculate: bool = False
                  ) -> Iterator[tuple[int, int]]:
        """``generate_batch`` after its checks (``Session.generate`` calls it with one request):
        prefill each, then the one decode loop. The decode step's CUDA graph, when new, is
        captured while the first prompt's prefill runs (``GraphRunner.prepare``, once
        ``session.CAPTURE_AHEAD_TOKENS`` are enqueued), not after."""
        t0 = time.perf_counter()
        hidden, stats = [], []
        runner = self.graph_runner()
        try:
            for i, (session, prompt) in enumerate(requests):
                cb = None if on_prefill is None else \
                    (lambda done, total, i=i: on_prefill(i, done, total))
                # the decode step is captured (if new) while the prefill's first chunks run
                capture = (lambda: runner.prepare(sp, len(requests))) if i == 0 else None
                h, st = session._prefill(prompt, cb, capture)
                hidden.append(h)
                stats.append(st)
        except BaseException:
            for st in stats:
                st.stop_reason = "interrupted"
            if len(stats) < len(requests):  # the request being prefilled
                cur = requests[len(stats)][0].stats
                if cur is not None and not cur.stop_reason:
                    cur.stop_reason = "interrupted"
            raise
        yield from decode(self, [s for s, _ in requests], hidden, sp, stats, t0, speculate)
