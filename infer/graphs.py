"""CUDA graphs for the decode steady state: one sequence, one new token per step.

An eager decode step launches ~36 layers x (about 15 torch ops + 3 Triton kernels), and the
Triton launcher alone costs ~80 us of host time per launch, so eager decode is launch-bound. The
``GraphRunner`` captures the whole step once per sampling mode and replays it::

    static buffers (StaticBuffers)            captured region (_run)
    input_ids   int64 [1]  ─┐                 presence[input_ids] = True   (penalty only)
    step        int64 [2]  ─┼─ positions [1]  seq_lens = positions + 1     (int32 [1])
    (pinned host copy)      └─ slot_mapping   hidden = model.forward(input_ids, positions, attn,
    page_table  int32 [1, max_pages]                                 meta of the static buffers)
    query_start_loc int32 [2] = [0, 1]        logits = model.compute_logits(hidden[-1:])
    presence    bool [vocab]                  next_token = sample(logits, params, generator)
    next_token  int64 [1]  <──────────────────┘

Replay = write (position, slot) into pinned host memory and copy it in (non_blocking), copy the
fed token (already on the device) into ``input_ids``, write a page id into the page table only
when the sequence gained a page, ``graph.replay()``. The engine then reads ``next_token`` (its
one host sync per token). Nothing in the captured region allocates outside the graph's pool,
syncs, or branches on device values: ``sample`` branches only on host values of the sampling
parameters, which is why there is one graph per sampling mode (``graph_key``), all sharing one
memory pool (NOTE: so only the graph just replayed has valid ``hidden``/``logits``; a graph's
intermediates may share memory with another graph's outputs, and all inputs are static buffers
outside the pool). The attention metadata is built once from the static buffers with
``max_query_len=1``; the decode kernels never read ``max_seq_len`` and their grid is fixed
(``kernels/decode_attention.py``), so one graph serves every context length.

Randomness: the runner owns one ``torch.Generator``, registered with every graph
(``CUDAGraph.register_generator_state``); torch then feeds each replay the generator's current
Philox seed and offset and advances the offset by the graph's total increment, exactly as the same
ops would eagerly (torch's note "CUDA Graph-safe RNG states"). The engine samples the first token
of a reply eagerly with the same generator, reseeded per reply, so a seeded reply is the same with
graphs as without.

With ``capture=False`` (any device) the runner runs the same step eagerly on the same static
buffers: the CPU tests use it to check the bookkeeping against the plain engine loop.

Design after vLLM's ``CUDAGraphRunner`` and gpt-fast's static decode step; STYLE.md rule 12.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from infer.config import SamplingParams
from infer.meta import AttnMeta
from infer.sampling import resolve_seed, sample

MAX_GRAPHS = 4  # captured sampling modes kept; the least recently begun one is dropped


def graph_key(params: SamplingParams) -> SamplingParams:
    """The part of ``params`` a captured step depends on (seed, token budget and ``ignore_eos``,
    which the host applies, dropped; greedy steps ignore temperature, top-k, top-p and min-p)."""
    if params.greedy:
        return SamplingParams(temperature=0.0, presence_penalty=params.presence_penalty)
    return SamplingParams(temperature=params.temperature, top_k=params.top_k,
                          top_p=params.top_p, min_p=params.min_p,
                          presence_penalty=params.presence_penalty)


@dataclass
class StaticBuffers:
    """Device tensors a captured step reads and writes (their addresses are baked in the graph).

    Attributes:
        input_ids: int64 [1], the token fed this step.
        step: int64 [2], (position, slot) of that token; ``positions`` and ``slot_mapping`` are
            views of it, so one copy from ``host_step`` sets both.
        positions, slot_mapping: int64 [1] views of ``step``.
        seq_lens: int32 [1], written inside the step as ``positions + 1``.
        query_start_loc: int32 [2], always ``[0, 1]``.
        page_table: int32 [1, max_pages], the sequence's page ids (entries past its length are
            stale but valid ids, never read).
        presence: bool [vocab], tokens generated so far in the reply (presence penalty).
        next_token: int64 [1], the sampled token.
        host_step: int64 [2] on the host (pinned on CUDA), staging for ``step``.
        host_token: int64 [1] on the host (pinned on CUDA), where ``token_to_host`` copies a
            sampled token.
    """

    input_ids: torch.Tensor
    step: torch.Tensor
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: torch.Tensor
    page_table: torch.Tensor
    presence: torch.Tensor
    next_token: torch.Tensor
    host_step: torch.Tensor
    host_token: torch.Tensor

    @classmethod
    def allocate(cls, vocab_size: int, max_pages: int, device: torch.device) -> StaticBuffers:
        i64 = dict(dtype=torch.int64, device=device)
        i32 = dict(dtype=torch.int32, device=device)
        step = torch.zeros(2, **i64)
        return cls(
            input_ids=torch.zeros(1, **i64), step=step, positions=step[0:1],
            slot_mapping=step[1:2], seq_lens=torch.ones(1, **i32),
            query_start_loc=torch.tensor([0, 1], **i32),
            page_table=torch.zeros(1, max_pages, **i32),
            presence=torch.zeros(vocab_size, dtype=torch.bool, device=device),
            next_token=torch.zeros(1, **i64),
            host_step=torch.zeros(2, dtype=torch.int64, pin_memory=device.type == "cuda"),
            host_token=torch.zeros(1, dtype=torch.int64, pin_memory=device.type == "cuda"))

    def meta(self, page_size: int) -> AttnMeta:
        """The step's ``AttnMeta`` over these buffers (``max_seq_len`` is the capacity bound)."""
        return AttnMeta(positions=self.positions, slot_mapping=self.slot_mapping,
                        seq_lens=self.seq_lens, query_start_loc=self.query_start_loc,
                        page_table=self.page_table, max_query_len=1,
                        max_seq_len=self.page_table.shape[1] * page_size)


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    hidden: torch.Tensor  # [1, hidden] model dtype, in the graph's pool
    logits: torch.Tensor  # float32 [1, vocab]


class GraphRunner:
    """Captures and replays the batch-1, one-token decode step (model, lm_head row, sampling).

    Args:
        model: a ``models/qwen3.py``-style model (``forward``, ``compute_logits``).
        attn: the attention backend; for capture it must be graph-safe (``TritonAttention``).
        vocab_size: the model's vocabulary (rows of the logits, size of the presence buffer).
        page_size: positions per KV page.
        max_pages: width of the page table (the pool's page count).
        device: where the model runs.
        vocab_limit: ids >= this are never sampled (None: no limit).
        capture: True records CUDA graphs (CUDA only); False runs the same step eagerly.

    Raises:
        ValueError: ``capture=True`` on a non-CUDA device.

    Use: ``ticket, gen, presence = runner.begin(params, pages)`` once per reply (after prefill;
    sample the reply's first token eagerly with ``gen`` and ``presence``), then per token
    ``next_token = runner.step(ticket, token, pages, position)``. One reply at a time.
    """

    def __init__(self, model, attn, *, vocab_size: int, page_size: int, max_pages: int,
                 device: torch.device | str, vocab_limit: int | None = None,
                 capture: bool = True):
        self.device = torch.device(device)
        if capture and self.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, got {self.device}: use "
                             f"capture=False (or --no-cuda-graphs)")
        self.model, self.attn, self.page_size = model, attn, page_size
        self.vocab_limit, self.capture = vocab_limit, capture
        with torch.inference_mode(False):  # plain tensors: writable in and out of it
            self.bufs = StaticBuffers.allocate(vocab_size, max_pages, self.device)
        self.meta = self.bufs.meta(page_size)
        self.generator = torch.Generator(device=self.device)
        self._host = self.bufs.host_step.numpy()  # fast scalar writes into the pinned buffer
        self._copied = torch.cuda.Event() if self.device.type == "cuda" else None
        self._token_copied = torch.cuda.Event() if self.device.type == "cuda" else None
        self._mempool = torch.cuda.graph_pool_handle() if capture else None
        self._stream: torch.cuda.Stream | None = None  # warm-up side stream
        self._graphs: OrderedDict[SamplingParams, _Captured] = OrderedDict()
        self._params: SamplingParams | None = None
        self._gen: torch.Generator | None = None
        self._out: tuple[torch.Tensor, torch.Tensor] | None = None
        self._ticket, self._loaded = 0, 0

    @property
    def num_graphs(self) -> int:
        """Captured graphs held (one per sampling mode, at most ``MAX_GRAPHS``)."""
        return len(self._graphs)

    @property
    def hidden(self) -> torch.Tensor:
        """[1, hidden] model dtype: the last step's final hidden state (overwritten by the next
        step; clone to keep)."""
        return self._out[0]

    @property
    def logits(self) -> torch.Tensor:
        """float32 [1, vocab]: the last step's logits (overwritten by the next step)."""
        return self._out[1]

    def begin(self, params: SamplingParams, pages: list[int]
              ) -> tuple[int, torch.Generator | None, torch.Tensor | None]:
        """Start a reply: capture the step for ``params`` if new, load the page table, clear the
        presence state and reseed the generator with ``params.seed`` (fresh if None).

        Args:
            params: the reply's sampling parameters.
            pages: the sequence's page ids so far (at least one).

        Returns:
            ``(ticket, generator, presence)``: pass ``ticket`` to ``step``; sample the reply's
            first token eagerly with ``generator`` (None when greedy) and ``presence`` (bool
            [vocab], None without a presence penalty), as the steps will.
        """
        key = graph_key(params)
        if self.capture:
            if key not in self._graphs:
                if len(self._graphs) >= MAX_GRAPHS:
                    self._graphs.popitem(last=False)
                self._graphs[key] = self._capture(key)
            self._graphs.move_to_end(key)
            cap = self._graphs[key]
            self._out = (cap.hidden, cap.logits)
        b = self.bufs
        b.page_table[0, :len(pages)].copy_(torch.tensor(pages, dtype=torch.int32))
        self._loaded = len(pages)
        b.presence.zero_()
        self._params = key
        self._gen = None
        if not params.greedy:
            self._gen = self.generator
            self._gen.manual_seed(resolve_seed(params.seed))
        self._ticket += 1
        return self._ticket, self._gen, (b.presence if params.presence_penalty else None)

    def step(self, ticket: int, token: torch.Tensor, pages: list[int],
             position: int) -> torch.Tensor:
        """Feed ``token`` at ``position`` and sample the next one (no host sync).

        Args:
            ticket: from this reply's ``begin``.
            token: int64 [1] (or []) device tensor, the token to feed.
            pages: the sequence's page ids, enough for ``position + 1`` positions (only pages
                appended since the last call are copied).
            position: the token's position (= tokens cached before it).

        Returns:
            ``bufs.next_token``, int64 [1] on the device (overwritten by the next step).

        Raises:
            RuntimeError: another reply began on this runner since ``ticket`` was issued.
        """
        self.check_ticket(ticket)
        b, ps = self.bufs, self.page_size
        for i in range(self._loaded, len(pages)):  # a new page: at most one per step
            b.page_table[0, i].fill_(pages[i])
        self._loaded = len(pages)
        if self._copied is not None:
            self._copied.synchronize()  # NOTE: the previous copy has read the pinned buffer
        self._host[0] = position
        self._host[1] = pages[position // ps] * ps + position % ps
        b.step.copy_(b.host_step, non_blocking=True)
        if self._copied is not None:
            self._copied.record()
        b.input_ids.copy_(token.view(1))
        if self.capture:
            self._graphs[self._params].graph.replay()
        else:
            with torch.inference_mode():
                self._out = self._run(self._params, self._gen)
        return b.next_token

    def check_ticket(self, ticket: int) -> None:
        """Raise ``RuntimeError`` unless ``ticket`` is the latest ``begin``'s (the static buffers,
        ``next_token`` included, belong to that reply)."""
        if ticket != self._ticket:
            raise RuntimeError("CUDA-graph decode runs one reply at a time per engine: another "
                               "reply began since this one; finish or close it first (or build "
                               "the engine with cuda_graphs=False)")

    def token_to_host(self, token: torch.Tensor) -> None:
        """Start copying ``token`` (device int64 [1]) to the host, in stream order: the copy
        reads it before any step enqueued later overwrites it. ``host_token`` waits for it."""
        self.bufs.host_token.copy_(token.view(1), non_blocking=True)
        if self._token_copied is not None:
            self._token_copied.record()

    def host_token(self) -> int:
        """The token of the latest ``token_to_host``, once copied (the host waits for it; steps
        enqueued after that copy keep running)."""
        if self._token_copied is not None:
            self._token_copied.synchronize()
        return int(self.bufs.host_token[0])

    # ------------------------------------------------------------------ internals

    def _run(self, params: SamplingParams, gen: torch.Generator | None
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """The step itself (captured as is): returns (hidden [1, H], logits float32 [1, V])."""
        b = self.bufs
        presence = b.presence if params.presence_penalty else None
        if presence is not None:
            presence.index_fill_(0, b.input_ids, True)  # the fed token was generated
        b.seq_lens.copy_(b.positions + 1)
        hidden = self.model.forward(b.input_ids, b.positions, self.attn, self.meta)
        logits = self.model.compute_logits(hidden[-1:])
        b.next_token.copy_(sample(logits, params, gen, presence=presence,
                                  vocab_limit=self.vocab_limit))
        return hidden, logits

    def _capture(self, params: SamplingParams) -> _Captured:
        """Warm up on a side stream (compiles kernels), then record ``_run`` into one graph.

        Warm-up and capture run with slot -1 (store_kv skips it: no cache write) at position 0;
        the static buffers they leave behind are reset by ``begin``.
        """
        b = self.bufs
        gen = None if params.greedy else self.generator
        with torch.cuda.device(self.device), torch.inference_mode():
            b.step[0].fill_(0)
            b.step[1].fill_(-1)
            b.input_ids.zero_()
            if self._stream is None:
                self._stream = torch.cuda.Stream()
            stream = self._stream
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self._run(params, gen)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            if gen is not None:
                graph.register_generator_state(gen)
            with torch.cuda.graph(graph, pool=self._mempool):
                hidden, logits = self._run(params, gen)
        return _Captured(graph, hidden, logits)
