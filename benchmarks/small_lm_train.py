"""The training loop of ``benchmarks/train_small_qwen3.py``: ``train(model, data, args, ...)``.

AdamW (betas 0.9/0.95, weight decay 0.1 on matrices), linear warmup then cosine decay to 10 % of
the peak (``lr_at``), gradient clipping at 1.0, bfloat16 autocast on CUDA, rows of ``--seq``
tokens (``--long-seq`` after the copying steps: ``rows_at``) drawn at random offsets of the
token stream, a ``--repeat-frac`` share of the rows
(default 0.25) random tokens repeated with a period drawn per row (``--copy-chunks`` of them,
default 0.5, repeat text chunks rather than single tokens), a ``--summary-frac`` share
summary requests answered by quoting the text (``benchmarks/small_lm_summaries.py``), and
before them
``--copy-steps`` (default 1400) steps of such rows only (``sample_batch``, ``repeat_frac_at``:
teaches in-context copying, which the text alone, 1M tokens seen many times over, does not; the
evaluation's passages are held out), cross-entropy through the lm_head in row chunks
(``benchmarks/linear_cross_entropy.py``: the [tokens, 151936] logits never exist whole). The
schedule follows ``step / steps``; only when the measured speed projects past ``--minutes`` does
it switch to ``max(step / steps, elapsed / minutes)`` (``_Clock``; ``time_bound`` in the report),
so that a slow run still ends decayed, when the time is up. ``args`` is the script's parsed
command line.
"""

from __future__ import annotations

import math
import time

import torch

from benchmarks.linear_cross_entropy import linear_cross_entropy
from benchmarks.small_lm import forward_batch
from benchmarks.small_lm_eval import heldout_loss


def lr_at(progress: float, peak: float, warmup: float, floor: float = 0.1) -> float:
    """Learning rate at ``progress`` in [0, 1] of the run: linear warmup over the first
    ``warmup`` fraction, then cosine from ``peak`` down to ``floor * peak``."""
    if progress < warmup:
        return peak * (progress / warmup)
    t = min(1.0, (progress - warmup) / max(1e-9, 1.0 - warmup))
    return peak * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * t)))


def sample_batch(data: torch.Tensor, gen: torch.Generator, batch: int, seq: int,
                 repeat_frac: float, min_period: int = 16, chunk_frac: float = 0.0,
                 chunk_len: tuple[int, int] = (8, 32), summaries: torch.Tensor | None = None,
                 summary_frac: float = 0.0) -> torch.Tensor:
    """int64 [batch, seq + 1] rows of ``data`` (int64 [N], on the training device) at random
    offsets drawn from ``gen`` (CPU); the first ``round(repeat_frac * batch)`` rows are copying
    rows: ``P`` tokens drawn one by one from random positions of ``data`` (real token
    frequencies, no sentence to remember), repeated to fill the row, with ``P`` drawn per row
    from ``min_period .. ceil((seq + 1) / 2)`` (so at least two copies).

    Only copying from the context predicts a copying row past its first period, whereas a
    repeated window of the training text can be predicted from memory (a model trained that way
    memorized and did not copy). The period varies per row because with one fixed period a
    model learns to read the token that far back (a relative-position shortcut: on a passage
    repeated at another distance it is confidently wrong) instead of an induction head that
    finds the earlier occurrence of the current token.

    The last ``round(chunk_frac * copying rows)`` copying rows fill their period with text
    chunks instead of single tokens: runs of ``C`` consecutive tokens of ``data`` (``C`` drawn
    per row from ``chunk_len``, inclusive) from random offsets. Inside a chunk the text can be
    predicted from memory; the chunk that follows cannot, except by copying. Rows of single
    random tokens teach a model to copy text that looks random, and nothing else: a model
    trained on them alone copied shuffled tokens but kept predicting repeated prose from its
    prior (BENCHMARKS.md); the chunks make prose-like text that must be copied.

    With ``summaries`` (int64 [pool, seq + 1] on the training device:
    ``benchmarks/small_lm_summaries.py``), the ``round(summary_frac * batch)`` rows after the
    copying rows (fewer if the copying rows leave less room) are rows of that pool drawn at
    random: summary requests answered by quoting the text."""
    n_rep = int(repeat_frac * batch + 0.5)
    half = (seq + 2) // 2
    offsets = torch.randint(0, data.numel() - seq - 1, (batch,), generator=gen)
    idx = offsets[:, None] + torch.arange(seq + 1)  # (batch, seq + 1)
    if n_rep:
        lo = min(min_period, half)
        periods = torch.randint(lo, half + 1, (n_rep, 1), generator=gen)
        noise = torch.randint(0, data.numel(), (n_rep, half), generator=gen)
        n_chunk = int(chunk_frac * n_rep + 0.5)
        if n_chunk:
            lo_c, hi_c = chunk_len
            clen = torch.randint(lo_c, hi_c + 1, (n_chunk, 1), generator=gen)
            starts = torch.randint(0, data.numel() - hi_c, (n_chunk, half // lo_c + 1),
                                   generator=gen)
            j = torch.arange(half)[None, :]
            noise[n_rep - n_chunk:] = starts.gather(1, j // clen) + j % clen
        idx[:n_rep] = noise.gather(1, torch.arange(seq + 1)[None, :] % periods)
    rows = data[idx.to(data.device)]
    n_sum = min(int(summary_frac * batch + 0.5), batch - n_rep) if summaries is not None else 0
    if n_sum > 0:
        pick = torch.randint(0, summaries.shape[0], (n_sum,), generator=gen)
        rows[n_rep:n_rep + n_sum] = summaries[pick.to(summaries.device)]
    return rows


def repeat_frac_at(step: int, args) -> float:
    """The share of copying rows at ``step``: all of them for the first ``--copy-steps`` steps
    (a curriculum: with the 151936-token vocabulary copying is learned slowly when it is a
    quarter of the rows among memorizable text), then ``--repeat-frac``."""
    return 1.0 if step < args.copy_steps else args.repeat_frac


def rows_at(step: int, args) -> tuple[int, int]:
    """(rows, tokens per row) of the batch at ``step``: ``--batch`` x ``--seq`` during the
    ``--copy-steps`` and without ``--long-seq``; after them ``--long-seq`` tokens a row and as
    many rows as keep the tokens per step (at least one). A curriculum: induction heads form on
    short rows sooner than on long ones (BENCHMARKS.md), and the summary rows then span requests
    as long as the benchmark's."""
    long_seq = getattr(args, "long_seq", 0)
    if not long_seq or step < args.copy_steps:
        return args.batch, args.seq
    return max(1, args.batch * args.seq // long_seq), long_seq


def train(model, data: torch.Tensor, args, heldout: list[int], emit,
          summaries: torch.Tensor | None = None) -> dict:
    """Train ``model`` in place on ``data`` (int64 [N] on its device) as the module docstring
    says, with ``--summary-frac`` rows drawn from ``summaries`` (``sample_batch``); ``emit``
    receives the progress lines. Returns the ``train`` record."""
    dev = model.device
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=dev.type == "cuda")
    forward = torch.compile(model.forward) if args.compile else None
    amp = torch.autocast("cuda", dtype=torch.bfloat16, enabled=dev.type == "cuda")
    gen = torch.Generator().manual_seed(args.seed + 1)
    clock = _Clock(args.minutes * 60.0, args.steps)
    losses, stopped_by, step, tokens = [], "steps", args.steps, 0
    for i in range(args.steps):
        if clock.elapsed() >= clock.budget:
            stopped_by, step = "minutes", i
            break
        lr = lr_at(clock.progress(i), args.lr, args.warmup)
        for group in opt.param_groups:
            group["lr"] = lr
        batch, seq = rows_at(i, args)
        rows = sample_batch(data, gen, batch, seq, repeat_frac_at(i, args),
                            chunk_frac=args.copy_chunks, summaries=summaries,
                            summary_frac=args.summary_frac)
        tokens += batch * seq
        with amp:
            hidden = forward_batch(model, rows[:, :-1], forward)
            loss = linear_cross_entropy(hidden, model.lm_head.weight, rows[:, 1:].reshape(-1),
                                        chunk=args.ce_chunk)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        done = i + 1
        if done == 1 or done % args.log_every == 0 or done == args.steps:
            value = float(losses[-1])  # waits for the step: the clock below is exact
            clock.mark(done)
            if done > 1:
                emit({"what": "train_progress", "step": done, "loss": round(value, 4),
                      "lr": round(lr, 6), "elapsed_s": round(clock.elapsed(), 1),
                      "tokens_per_s": round(tokens / clock.elapsed())})
        if args.eval_every and done % args.eval_every == 0 and done < args.steps:
            model.eval()
            with amp:
                rec = heldout_loss(model, heldout, args.seq, max_tokens=args.eval_tokens)
            model.train()
            emit({**rec, "what": "heldout_progress", "step": done})
    if dev.type == "cuda":
        torch.cuda.synchronize()
    wall = clock.elapsed()
    tail = float(torch.stack(losses[-10:]).float().mean()) if losses else float("nan")
    return {"what": "train", "steps": step, "tokens": tokens,
            "epochs": round(tokens / data.numel(), 2), "final_loss": round(tail, 4),
            "wall_s": round(wall, 1), "tokens_per_s": round(tokens / wall) if wall > 0 else None,
            "first_step_s": round(clock.first_step_s or 0.0, 2), "stopped_by": stopped_by,
            "time_bound": clock.time_bound}


class _Clock:
    """The training loop's wall clock and its schedule progress.

    Progress is ``step / steps`` (deterministic) until a synchronized ``mark`` projects that
    the run would pass the budget: the first step's time (warm-up, compilation) plus the mean
    time of the later steps times the steps left. From then on (``time_bound``) progress is
    ``max(step / steps, elapsed / budget)``, so the schedule still decays to its end in time.
    """

    def __init__(self, budget_s: float, steps: int):
        self.budget, self.steps = budget_s, steps
        self.t0 = time.perf_counter()
        self.first_step_s: float | None = None
        self.time_bound = False

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def progress(self, step: int) -> float:
        p = step / self.steps
        return max(p, self.elapsed() / self.budget) if self.time_bound else p

    def mark(self, done: int) -> None:
        """Called after step ``done`` has completed on the device."""
        now = self.elapsed()
        if done == 1:
            self.first_step_s = now
            return
        per_step = (now - self.first_step_s) / (done - 1)
        if self.first_step_s + per_step * (self.steps - 1) > self.budget:
            self.time_bound = True
