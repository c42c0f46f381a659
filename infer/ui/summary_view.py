"""``infer summarize``: one reply for a text that fits, map-reduce in parts for one that does not.

``summarize_text`` decides. A text whose summary prompt and reply fit in ``--ctx`` is summarized in
one reply (``one_shot``), and so is (as an error) one whose reply budget alone fills the context.
A longer one (unless ``--no-split``, which keeps it an error) is said to be longer, with both
token counts, then split and summarized in parts (``infer/summarize.py``):
before loading, the capacity check decides how many parts decode together (``--batch``, default
as many as fit, up to 16) and says so; each part summary is shown on stderr as it finishes (part k
of N), the prefill of each part on a progress status, and the final summary streams on stdout
like any reply. ``--json`` adds the parts (level, index, character and token ranges, summary) and
the stage times to the reply's object; the stats line gives the stage times too. Ctrl-C during the
parts ends the command as during a one-part summary: the result so far (the parts finished; an
empty final reply, ``interrupted``), then exit code 130.
"""

from __future__ import annotations

from dataclasses import replace

import typer
from rich.markup import escape

from infer.fits import check_fits
from infer.stats import GenerationStats
from infer.summarize import Summarizer
from infer.summary_prompts import check_plan
from infer.ui.console import UI
from infer.ui.oneshot import one_shot, reply_once
from infer.ui.prepare import load_engine, warm_engine
from infer.ui.records import reply_record
from infer.ui.render import Reply
from infer.wording import counted


def summarize_text(ui: UI, cfg, tok, plan, ids: list[int], text: str, *, no_split: bool,
                   part_tokens: int, batch: int | None, extra: dict) -> None:
    """Summarize ``text`` (its one-reply prompt is ``ids``) as the module docstring says.

    Raises:
        ValueError: a text too long with ``--no-split``, a context too small for parts, a
            ``--batch`` that does not fit in memory.
        typer.Exit(130): Ctrl-C cut the parts or the final reply (the result is shown first).
    """
    max_new = ui.opts.max_new_tokens
    # parts help when the text is too long, not when the prompt fits and the reply budget is
    # what does not (check_fits then says so)
    if no_split or len(ids) + 1 <= cfg.ctx:
        one_shot("summarize", ui, cfg, tok, ids, max_ctx=plan.max_ctx, **extra, split=False)
        return
    from infer.textsplit import split_text

    try:
        limit = check_plan(tok, cfg.ctx, part_tokens, max_new or None, ui.opts.think)
    except ValueError as e:
        raise ValueError(f"the prompt is {len(ids)} tokens, longer than the context of {cfg.ctx} "
                         f"tokens, and cannot be summarized in parts: {e}") from None
    with ui.status("splitting the text ..."):
        pieces = split_text(text, tok, limit)
    ui.note(f"the prompt is {len(ids):,} tokens, longer than the context of {cfg.ctx:,}: "
            f"summarizing the text in {len(pieces)} parts of at most {limit:,} tokens, then "
            f"combining their summaries (--no-split refuses instead)")
    cfg = replace(cfg, max_batch=_batch(ui, cfg, plan, min(len(pieces), 16), batch))
    engine, load_s = load_engine(ui, cfg, tok)
    sampling = engine.default_sampling(**ui.opts.sampling_overrides())
    warm_engine(ui, engine, sampling, batch=cfg.max_batch, prompt_tokens=limit)
    sm = Summarizer(engine, tok, lambda t, m: split_text(t, tok, m), sampling,
                    part_tokens=part_tokens, final_tokens=max_new or None, think=ui.opts.think,
                    speculate=ui.opts.speculation("summarize"))
    with ui.status("summarizing the parts ...") as status:
        def on_prefill(level, index, done, total):
            what = f"part {index + 1}" if level == 0 else f"level {level} group {index + 1}"
            if status is not None and done < total:
                status.update(f"{what}: prefill {done:,} of {total:,} tokens")
            elif status is not None:
                status.update("decoding the summaries ...")

        try:
            final = sm.run(text, pieces=pieces, on_part=lambda p: _show_part(ui, p),
                           on_prefill=on_prefill)
        except KeyboardInterrupt:  # shown below as an interrupted reply, not as an error
            final = None
    if final is not None:
        check_fits(len(final), cfg.ctx, max_new, max_ctx=plan.max_ctx)
    t = sm.times
    stages = {"parts": len(pieces), "batch": cfg.max_batch,
              "map_prefill_s": round(t.map_prefill_s, 3),
              "map_decode_s": round(t.map_decode_s, 3), "reduce_s": round(t.reduce_s, 3)}
    suffix = (f" · {counted(stages['parts'], 'part')}, {cfg.max_batch} at a time: prefill "
              f"{t.map_prefill_s:.1f} s, decode {t.map_decode_s:.1f} s, reduce {t.reduce_s:.1f} s")
    drafted = sum(p.drafted for p in sm.parts)
    if drafted:
        suffix += f" · part drafts: {sum(p.accepted for p in sm.parts):,} of {drafted:,} accepted"
    extra = {**extra, "split": True, "stages": stages,
             "parts": [p.to_dict() for p in sorted(sm.parts, key=lambda p: (p.level, p.index))]}
    if final is None:
        _interrupted(ui, engine, load_s, extra, suffix, sm, len(pieces))
    reply_once("summarize", ui, engine, load_s, final, sampling, extra, stats_suffix=suffix)


def _interrupted(ui: UI, engine, load_s: float, extra: dict, suffix: str, sm, n: int) -> None:
    """Ctrl-C during the parts: the result as a one-part summary cut by Ctrl-C shows it (the
    ``--json`` object, ``extra`` with the parts finished, or a stats line with ``suffix``), for a
    final reply that never began (no prompt, no tokens, ``interrupted``).

    Raises:
        typer.Exit(130): always, after the result.
    """
    if ui.opts.json:
        stats = GenerationStats(prompt_tokens=0, stop_reason="interrupted")
        reply = Reply(raw="", answer="", thinking="", stats=stats, interrupted=True, ceiling=None)
        ui.emit_json(reply_record("summarize", engine, reply, load_s, **extra))
    else:
        done = sum(p.level == 0 for p in sm.parts)
        ui.err.print(f"interrupted summarizing the parts: {done} of "
                     f"{counted(n, 'part summary', 'part summaries')} finished{suffix}",
                     style="dim")
    raise typer.Exit(130)


def _batch(ui: UI, cfg, plan, want: int, batch: int | None) -> int:
    """The parts decoded together: ``--batch``, or as many as fit (up to ``want``); said once.

    Raises:
        ValueError: ``--batch`` outside 1..16 or more than fit.
    """
    from infer.attention import resolve_attention
    from infer.capacity import kv_cache_words, largest_batch

    kind = resolve_attention(cfg.attention, cfg.torch_device)
    fits = largest_batch(cfg, plan.config, kind, cfg.torch_device)
    if fits == 0:
        return 1  # the engine's capacity check names the largest context that fits
    if batch is not None and batch > fits:
        raise ValueError(f"--batch {batch} does not fit: {fits} sequences of --ctx {cfg.ctx} "
                         f"fit in memory with {kv_cache_words(cfg)}")
    chosen = min(batch or want, want, fits)
    cache = kv_cache_words(cfg).removeprefix("--kv-cache ")
    ui.note(f"decoding {counted(chosen, 'part')} at a time ({fits} fit in "
            f"memory): {_size(_kv_bytes(cfg, plan.config))} of {cache} KV cache each")
    return chosen


def _kv_bytes(cfg, mc) -> int:
    """KV pool bytes of one sequence of ``cfg.ctx`` positions."""
    from infer.kv_pool import KVPool, pages_for

    per_page = KVPool.bytes_per_page(mc.num_hidden_layers, mc.num_key_value_heads, mc.head_dim,
                                     cfg.page_size, cfg.kv_cache, cfg.torch_dtype.itemsize)
    return pages_for(cfg.ctx, cfg.page_size) * per_page


def _size(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


def _show_part(ui: UI, part) -> None:
    """A finished part summary on stderr (not with --json: the object holds them)."""
    if ui.opts.json:
        return
    what = "part" if part.level == 0 else f"level {part.level} group"  # the JSON's level
    ui.err.print(f"[bold]{what} {part.index + 1} of {part.count}[/] [dim](tokens "
                 f"{part.tokens[0]:,}-{part.tokens[1]:,}, {part.new_tokens} new)[/]")
    ui.err.print(escape(part.summary), style="dim")
