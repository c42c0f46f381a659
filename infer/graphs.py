"""The decode runner: every decode step of every reply goes through ``GraphRunner.step``.

A step feeds one new token to each of R rows and samples each row's next token, all on the
device: model forward over the paged pool, lm_head, sampling (presence penalty included). A row
is one sequence of a batch, or, in a speculative verify step, one of the k + 1 tokens fed to a
sequence (its last token and k drafts at consecutive positions): each such row is a one-query
sequence of its own over the same pages, so it computes exactly what the one-row step at that
position would, bit for bit (the batch invariance below). On CUDA
with the Triton attention the step is captured as a CUDA graph per (batch bucket, sampling mode)
and replayed; otherwise (``capture=False``: the CPU, ``--no-cuda-graphs``) the same code runs
eagerly on the same static buffers, so both modes share one set of stop rules, presence state and
page bookkeeping (``infer/decode_loop.py``).

This file owns the runner's API (a batch's ``begin``, its tickets and buckets, ``step``) and the
step itself (``_run``). The static buffers are ``infer/step_buffers.py``'s, the host side of a
step (its rows into the buffers, padding rows and slabs, the sampled tokens back)
``infer/step_io.py``'s, the captured graphs (capture, the shared pool, which are kept)
``infer/graph_capture.py``'s, the noise a sampled step draws (per-row keys or the runner's
generator) ``infer/step_noise.py``'s. The decode kernels' grid depends only on the bucket
(``kernels/decode_attention.py``), never on the context length, so one graph serves every length.
Replay = write the host staging buffer, one copy, ``replay()``; the only host sync per step is
reading the sampled ids.

Buckets are 1, 2, 4, 8 ... up to ``max_rows`` (at most 16: the projections' GEMM is row-invariant
for up to 16 rows, and the split count is fixed per engine, so a sequence's tokens are the same
bit for bit whatever the batch it decodes in). A fed id of -1 (``sampling.NON_FINITE``: the
previous step's logits were not finite) is clamped to 0 on the device; the host raises on it.

Design after vLLM's ``CUDAGraphRunner``, mini-sglang's ``engine/graph.py`` and gpt-fast's static
decode step; STYLE.md rule 12.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from infer.config import MAX_BATCH
from infer.graph_capture import MAX_GRAPHS, Captured, StepGraphs, step_key
from infer.sampling import sample, verify_sample
from infer.sampling_params import SamplingParams
from infer.step_buffers import StaticBuffers, batch_buckets
from infer.step_io import Row, StepIO
from infer.step_noise import StepNoise

__all__ = ["MAX_GRAPHS", "GraphRunner"]  # MAX_GRAPHS: infer/graph_capture.py's, re-exported


class GraphRunner:
    """Runs the decode step of B sequences x 1 token (model, lm_head, sampling): captured CUDA
    graphs per (batch bucket, sampling mode), or eagerly with ``capture=False``.

    Args:
        model: a ``models/qwen3.py``-style model (``forward``, ``compute_logits``).
        attn: the attention backend; for capture it must be graph-safe (``TritonAttention``),
            with a workspace for ``max_batch`` sequences.
        vocab_size: the model's vocabulary (columns of the logits and the presence buffer).
        page_size: positions per KV page.
        max_pages: width of the page table (the pool's page count).
        device: where the model runs.
        max_batch: the most sequences one batch holds (1..16).
        max_rows: the most rows one step holds (``max_batch`` .. 16; default ``max_batch``):
            room for speculative verify steps.
        vocab_limit: ids >= this are never sampled (None: no limit).
        capture: True records CUDA graphs (CUDA only); False runs the same step eagerly.

    Raises:
        ValueError: ``capture=True`` on a non-CUDA device, ``max_batch`` outside 1..16 or
            ``max_rows`` outside ``max_batch``..16.

    Use: ``ticket, gen, presence = runner.begin(params, pages_per_seq)`` once per batch of
    replies (after prefill; sample the first tokens eagerly with ``gen`` and ``presence``), then
    per step ``next_tokens = runner.step(ticket, tokens, rows)``, read on the host with
    ``runner.io.tokens_to_host(next_tokens)`` then ``runner.io.host_tokens(n)``. One batch at a
    time.

    Attributes:
        io: the host side of the steps (``infer/step_io.py``'s ``StepIO``).
        noise: where sampled steps draw their noise (``infer/step_noise.py``'s ``StepNoise``; its
            ``generator`` is the runner's).
        capture_s: host seconds spent capturing graphs so far (warm-up calls, which compile
            the kernels on a first run, and recording; the device is not waited for, so most of
            it overlaps a prefill when ``prepare`` runs during one). 0.0 without capture.
        captures: graphs captured so far (a graph dropped past ``MAX_GRAPHS`` and captured
            again counts twice).
        step_costs: per batch size, the decode loop's ``speculate.StepCost`` (plain and verify
            step times, kept across replies).
    """

    def __init__(self, model, attn, *, vocab_size: int, page_size: int, max_pages: int,
                 device: torch.device | str, max_batch: int = 1, max_rows: int | None = None,
                 vocab_limit: int | None = None, capture: bool = True):
        self.device = torch.device(device)
        if capture and self.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, got {self.device}: use "
                             f"capture=False (or --no-cuda-graphs)")
        if not 1 <= max_batch <= MAX_BATCH:
            raise ValueError(f"the batch must hold 1 to {MAX_BATCH} sequences, got {max_batch}")
        max_rows = max_batch if max_rows is None else max_rows
        if not max_batch <= max_rows <= MAX_BATCH:
            raise ValueError(f"a step holds max_batch ({max_batch}) to {MAX_BATCH} rows, got "
                             f"max_rows={max_rows}")
        self.model, self.attn, self.page_size = model, attn, page_size
        self.vocab_limit, self.capture, self.max_batch = vocab_limit, capture, max_batch
        self.max_rows = max_rows
        self.buckets = batch_buckets(max_rows)
        with torch.inference_mode(False):  # plain tensors: writable in and out of it
            self.bufs = StaticBuffers.allocate(max_rows, vocab_size, max_pages, self.device)
        self._metas = {b: self.bufs.meta(b, page_size) for b in self.buckets}
        self.noise = StepNoise(vocab_size, self.device)
        self.io = StepIO(self.bufs, page_size, getattr(attn, "slab_tokens", 1),
                         getattr(attn, "slab_block_n", 1))
        self._graphs = StepGraphs(self.bufs, self.device) if capture else None
        self._params: SamplingParams | None = None
        self._bucket = 0
        self._gen: torch.Generator | None = None
        self._out: tuple[torch.Tensor, torch.Tensor] | None = None
        self._ticket = 0
        self.capture_s, self.captures = 0.0, 0
        self.step_costs: dict = {}

    @property
    def num_graphs(self) -> int:
        """Captured graphs held (one per bucket and sampling mode, at most ``MAX_GRAPHS``)."""
        return len(self._graphs) if self._graphs is not None else 0

    @property
    def bucket(self) -> int:
        """Rows of the latest step (or of the batch's first bucket, after ``begin``)."""
        return self._bucket

    @property
    def hidden(self) -> torch.Tensor:
        """[bucket, hidden] model dtype: the last step's final hidden states (overwritten by the
        next step; clone to keep)."""
        return self._out[0]

    @property
    def logits(self) -> torch.Tensor:
        """float32 [bucket, vocab]: the last step's logits (overwritten by the next step)."""
        return self._out[1]

    def bucket_for(self, num_rows: int) -> int:
        """The smallest bucket that holds ``num_rows`` rows.

        Raises:
            ValueError: more than ``max_rows`` rows.
        """
        for b in self.buckets:
            if num_rows <= b:
                return b
        raise ValueError(f"{num_rows} rows in one step, but this engine's steps hold at most "
                         f"{self.max_rows} (max_batch {self.max_batch})")

    def prepare(self, params: SamplingParams, num_rows: int, verify: bool = False) -> None:
        """Capture the step of ``num_rows`` rows for ``params`` (a sampled verify step with
        ``verify``) now, if it is not captured yet (``begin`` and ``step`` would capture it
        otherwise). Called while a prefill runs on the device, so that the capture's host work
        (kernel loading and compiling, recording) overlaps it: capturing never waits for the
        device. Does nothing without capture; never between ``begin`` and a batch's end.

        Raises:
            ValueError: more rows than ``max_rows``.
        """
        if self.capture:
            self._params = params
            self._graph(self.bucket_for(num_rows), verify)

    def begin(self, params: SamplingParams, pages: Sequence[list[int]]
              ) -> tuple[int, torch.Generator | None, torch.Tensor | None]:
        """Start a batch of replies: capture the step for its bucket and ``params`` if new, load
        the page table, clear the presence state, reseed the generator with ``params.seed``.

        Args:
            params: the replies' sampling parameters (one for the whole batch).
            pages: per sequence, its page ids so far (at least one each); 1..max_batch of them.

        Returns:
            ``(ticket, generator, presence)``: pass ``ticket`` to ``step``; sample the first
            tokens eagerly with ``generator`` (None when greedy) and ``presence`` (bool
            [len(pages), vocab], None without a presence penalty), as the steps will.

        Raises:
            ValueError: more sequences than ``max_batch``.
        """
        if len(pages) > self.max_batch:
            raise ValueError(f"{len(pages)} sequences in one batch, but this engine decodes at "
                             f"most {self.max_batch} together (its max_batch)")
        bucket = self.bucket_for(len(pages))
        self._params = params
        self._graph(bucket, False)
        b = self.bufs
        self.io.rows.reset(pages, bucket)
        self._bucket = bucket
        b.presence[:bucket].zero_()
        self._gen = self.noise.begin(params)
        self._ticket += 1
        presence = b.presence[:len(pages)] if params.presence_penalty else None
        return self._ticket, self._gen, presence

    def step(self, ticket: int, tokens: torch.Tensor | Sequence[int], rows: Sequence[Row], *,
             drafts: Sequence[int] | None = None) -> torch.Tensor:
        """Feed one token per row and sample each row's next token (no host sync).

        Args:
            ticket: from this batch's ``begin``.
            tokens: the tokens to feed, one per row from row 0: an int64 device tensor (a
                previous step's output; rows past it keep their input, which padding rows
                ignore), or host ints, one per row of ``rows``.
            rows: per row, ``(pages, position)``: the sequence's page ids, enough for
                ``position + 1`` positions (pages appended since the last step are copied; a
                row whose sequence changed is reloaded), and the fed token's position (= tokens
                cached before it); or None for a padding row. Rows past ``len(rows)`` are
                padding. A sequence's pages may only grow during a batch.
            drafts: a sampled verify step: per row, the drafted token
                its sample is checked against (-1: none). None: a plain step.

        Returns:
            ``bufs.next_token[:bucket]``, int64 on the device, or for a sampled verify step
            ``bufs.verify_out[:, :bucket]`` (tokens, acceptance flags); overwritten by the next
            step. A step of a bucket or kind not captured yet captures it first (leaving the
            generator's state as it was, so a seeded reply does not depend on it).

        Raises:
            RuntimeError: another batch began on this runner since ``ticket`` was issued.
            ValueError: more rows than ``max_rows``.
        """
        self.check_ticket(ticket)
        b = self.bufs
        verify = drafts is not None and not self._params.greedy
        bucket = self.bucket_for(len(rows))
        if self.capture and step_key(bucket, self._params, verify) not in self._graphs and \
                isinstance(tokens, torch.Tensor):
            tokens = tokens.clone()  # capturing overwrites next_token
        cap = self._graph(bucket, verify)
        self._bucket = bucket
        self.io.stage(bucket, tokens, rows, drafts if verify else None,
                      self.noise.step_keys(bucket))
        if cap is not None:
            cap.graph.replay()
        else:
            with torch.inference_mode():
                self._out = self._run(bucket, self._params, self._gen, verify)
        return b.verify_out[:, :bucket] if verify else b.next_token[:bucket]

    def check_ticket(self, ticket: int) -> None:
        """Raise ``RuntimeError`` unless ``ticket`` is the latest ``begin``'s (the static buffers,
        ``next_token`` included, belong to that batch)."""
        if ticket != self._ticket:
            raise RuntimeError("decoding runs one reply at a time per engine (or one batch): "
                               "another began since this one; finish or close it first")

    # ------------------------------------------------------------------ internals

    def _graph(self, bucket: int, verify: bool) -> Captured | None:
        """The captured step of ``bucket`` rows for the batch's parameters (captured now if new,
        ``StepGraphs.capture``; the least recently used dropped past ``MAX_GRAPHS``); None when
        not capturing."""
        if not self.capture:
            return None
        key = step_key(bucket, self._params, verify)
        if key not in self._graphs:
            gen = None if self.noise.keyed(self._params) else self.noise.generator
            self.capture_s += self._graphs.capture(key, self._run, gen)
            self.captures += 1
        cap = self._graphs.get(key)
        self._out = (cap.hidden, cap.logits)
        return cap

    def _run(self, bucket: int, params: SamplingParams, gen: torch.Generator | None,
             verify: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The step itself (captured as is): returns (hidden [bucket, H], logits float32
        [bucket, V])."""
        b = self.bufs
        ids = b.input_ids[:bucket].clamp(min=0)  # a NON_FINITE (-1) id: the host raises on it
        presence = b.presence[:bucket] if params.presence_penalty else None
        if presence is not None:
            presence.scatter_(1, ids[:, None], True)  # the fed token was generated
        b.lens[:, :bucket].copy_(b.step[2:4, :bucket])
        meta = self._metas[bucket]
        hidden = self.model.forward(ids, meta.positions, self.attn, meta)
        logits = self.model.compute_logits(hidden)
        keys = b.step[6, :bucket] if self.noise.keyed(params) else None
        if verify:
            b.verify_out[:, :bucket].copy_(verify_sample(
                logits, b.step[5, :bucket], params, gen, vocab_limit=self.vocab_limit,
                noise_keys=keys))
        else:
            b.next_token[:bucket].copy_(sample(logits, params, gen, presence=presence,
                                               vocab_limit=self.vocab_limit, noise_keys=keys))
        return hidden, logits
