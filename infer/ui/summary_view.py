"""``infer summarize``: one reply for a text that fits, map-reduce in parts for one that does not.

``summarize_text`` decides. A text whose summary prompt and reply fit in ``--ctx`` is summarized in
one reply (``one_shot``), and so is (as an error) one whose reply budget alone fills the context.
A longer one (unless ``--no-split``, which keeps it an error) is said to be longer, with both
token counts, then split and summarized in parts (``infer/summarize.py``):
before loading, the capacity check decides how many parts decode together (``--batch``, default
as many as fit, up to 16) and says so; each part summary is shown on stderr as it finishes (part k
of N), the prefill of each part on a progress status, and the final summary streams on stdout
like any reply. ``--json`` adds the parts (level, index, character and token ranges, summary) and
the stage times to the reply's object; the stats line gives the stage times too. Ctrl-C from the
split on (the split, the engine's load and warm-up, the parts) ends the command as during a
one-part summary: the result so far (the parts finished, maybe none; an empty final reply,
``interrupted``), then exit code 130. Before the engine is built the object's header is its
config's (``infer.ui.records.engine_header``).
"""

from __future__ import annotations

from dataclasses import replace

import typer
from rich.markup import escape

from infer.fits import check_fits
from infer.summarize import PART_TOKENS, StageTimes, Summarizer
from infer.summary_prompts import SUMMARY_PROMPT, check_plan
from infer.ui.console import UI, is_ctrl_c
from infer.ui.oneshot import one_shot, reply_once, template_tokens
from infer.ui.prepare import load_engine, warm_engine
from infer.ui.records import reply_record
from infer.ui.startup import empty_reply, sigint_deferred
from infer.wording import counted


def summarize_text(ui: UI, cfg, tok, plan, ids: list[int], text: str, *, no_split: bool,
                   part_tokens: int | None, batch: int | None, extra: dict) -> None:
    """Summarize ``text`` (its one-reply prompt is ``ids``) as the module docstring says;
    ``part_tokens`` and ``batch`` None: not given (``PART_TOKENS``; as many as fit in memory).

    Raises:
        ValueError: a text too long with ``--no-split``, a context too small for parts, a
            ``--batch`` that does not fit in memory.
        typer.Exit(130): Ctrl-C from the split on, or in the final reply (the result is
            shown first).
    """
    max_new = ui.opts.max_new_tokens
    # parts help when the text is too long, not when the prompt fits and the reply budget is
    # what does not (check_fits then says so)
    if no_split or len(ids) + 1 <= cfg.ctx:
        # (with --no-split the command refused both already)
        unused = [f"--{flag} {value}" for flag, value in (("batch", batch),
                                                          ("part-tokens", part_tokens))
                  if value is not None]
        if unused:
            ui.note(f"{' and '.join(unused)} {'does' if len(unused) == 1 else 'do'} nothing: "
                    f"the text fits in the context of {cfg.ctx:,} tokens, so it is summarized "
                    "in one reply, not in parts")
        fixed = template_tokens(tok, None, ui.opts.think, SUMMARY_PROMPT)
        one_shot("summarize", ui, cfg, tok, ids, max_ctx=plan.max_ctx, fixed=fixed, **extra,
                 split=False)
        return
    from infer.textsplit import split_text

    part_tokens = PART_TOKENS if part_tokens is None else part_tokens

    # the prompt is as long as the context or longer: no room for even one reply token
    size = "longer than" if len(ids) > cfg.ctx else "which leaves no room for a reply in"
    try:
        limit = check_plan(tok, cfg.ctx, part_tokens, max_new or None, ui.opts.think,
                           max_ctx=plan.max_ctx)
    except ValueError as e:
        raise ValueError(f"the prompt is {counted(len(ids), 'token')}, {size} the context "
                         f"of {counted(cfg.ctx, 'token')}, and cannot be summarized in parts: "
                         f"{e}") from None
    # Ctrl-C from here on: the interrupted result (_interrupted), whatever stage it cuts
    pieces = engine = load_s = sm = width = sampling = None
    try:
        with ui.status("splitting the text ..."):
            pieces = split_text(text, tok, limit)
        ui.note(f"the prompt is {len(ids):,} tokens, {size} the context of {cfg.ctx:,}: "
                f"summarizing the text in {len(pieces)} parts of at most {limit:,} tokens, then "
                f"combining their summaries (--no-split refuses instead)")
        width = _batch(ui, cfg, plan, min(len(pieces), 16), batch)
        cfg = replace(cfg, max_batch=width)
        engine, load_s = load_engine(ui, cfg, tok)
        # one seed for the parts and the final reply: the record's seed reproduces them all
        sampling = engine.default_sampling(**ui.opts.sampling_overrides()).seeded()
        warm_engine(ui, engine, sampling, batch=cfg.max_batch, prompt_tokens=limit)
        sm = Summarizer(engine, tok, lambda t, m: split_text(t, tok, m), sampling,
                        part_tokens=part_tokens, final_tokens=max_new or None,
                        think=ui.opts.think, speculate=ui.opts.speculation("summarize"))
        with ui.status("summarizing the parts ...") as status:
            def on_prefill(level, index, done, total):
                what = f"part {index + 1}" if level == 0 else f"level {level} group {index + 1}"
                if status is not None and done < total:
                    status.update(f"{what}: prefill {done:,} of {total:,} tokens")
                elif status is not None:
                    status.update("decoding the summaries ...")

            final = sm.run(text, pieces=pieces, on_part=lambda p: _show_part(ui, p),
                           on_prefill=on_prefill)
    except (KeyboardInterrupt, ImportError) as e:  # an interrupted reply, not an error
        if not is_ctrl_c(e):  # (an ImportError: triton's, as the engine loads)
            raise
        _interrupted(ui, cfg, engine, load_s, _result(extra, pieces, width, sm), pieces, sm,
                     sampling)
    if (why := _empty_parts(sm.parts, part_tokens, ui.opts.think)) is not None:
        ui.warn(why)
    check_fits(len(final), cfg.ctx, max_new, max_ctx=plan.max_ctx)
    extra, suffix = _result(extra, pieces, width, sm)
    reply_once("summarize", ui, engine, load_s, final, sampling, extra, stats_suffix=suffix)


def _empty_parts(parts: list, part_tokens: int, think: bool) -> str | None:
    """A warning for the part replies that gave no summary (their thinking, cut or closed, was
    all of them; or an empty reply), saying which flag would help; None when every part gave
    one."""
    empty = [p for p in parts if not p.summary]
    if not empty:
        return None
    them = "it" if len(empty) == 1 else "them"
    head = (f"{counted(len(empty), 'part reply', 'part replies')} of {len(parts)} gave no "
            f"summary")
    if not think:
        return f"{head}: nothing of {them} is in the final summary"
    if any(p.stop_reason == "length" for p in empty):
        return (f"{head}, their --part-tokens ({part_tokens:,}) spent on thinking: nothing of "
                f"{them} is in the final summary; raise --part-tokens, or leave out --think")
    return (f"{head}, only thinking: nothing of {them} is in the final summary; leave out "
            f"--think")


def _result(extra: dict, pieces: list[str] | None, width: int | None,
            sm: Summarizer | None) -> tuple[dict, str]:
    """``(the --json fields, the stats line's suffix)`` of the parts: ``extra`` with ``split``,
    ``stages`` and ``parts``. What a Ctrl-C left unknown is None: the parts before the split,
    the batch before it was chosen; with no ``sm`` yet, no part ran (times 0, no parts)."""
    t = sm.times if sm is not None else StageTimes()
    done = sorted(sm.parts, key=lambda p: (p.level, p.index)) if sm is not None else []
    n = None if pieces is None else len(pieces)
    stages = {"parts": n, "batch": width, "map_prefill_s": round(t.map_prefill_s, 3),
              "map_decode_s": round(t.map_decode_s, 3), "reduce_s": round(t.reduce_s, 3)}
    suffix = ""
    if n is not None and width is not None:
        suffix = (f" · {counted(n, 'part')}, {width} at a time: prefill {t.map_prefill_s:.1f} s, "
                  f"decode {t.map_decode_s:.1f} s, reduce {t.reduce_s:.1f} s")
    drafted = sum(p.drafted for p in done)
    if drafted:
        suffix += f" · part drafts: {sum(p.accepted for p in done):,} of {drafted:,} accepted"
    return {**extra, "split": True, "stages": stages, "parts": [p.to_dict() for p in done]}, suffix


def _interrupted(ui: UI, cfg, engine, load_s: float | None, result: tuple[dict, str],
                 pieces: list[str] | None, sm: Summarizer | None, sampling=None) -> None:
    """Ctrl-C from the split on: the result as a one-part summary cut by Ctrl-C shows it (the
    ``--json`` object with ``result``'s fields, the parts finished; or a stats line with its
    suffix), for a final reply that never began (no prompt, no tokens, ``interrupted``).
    ``engine`` None: it was not built yet, the object's header is ``cfg``'s. ``sampling``: the
    parts' ``SamplingParams`` (their seed reproduces the parts finished), None before it was set.

    Raises:
        typer.Exit(130): always, after the result.
    """
    extra, suffix = result
    if ui.opts.json:
        obj = reply_record("summarize", engine, empty_reply(0), load_s, cfg=cfg,
                           warm_cut=ui.startup.warming, **extra)
        obj["prompt_tokens"] = None  # the final reply's prompt was never formed: unknown
        obj["sampling"] = sampling.record() if sampling is not None else None
        ui.emit_json(obj)
    else:
        done = 0 if sm is None else sum(p.level == 0 for p in sm.parts)
        of = ("" if pieces is None else
              f" of {counted(len(pieces), 'part summary', 'part summaries')}")
        ui.err.print(f"interrupted summarizing the parts: {done}{of} finished"
                     f"{' (while splitting the text)' if pieces is None else ''}{suffix}",
                     style="dim")
    raise typer.Exit(130)


def _batch(ui: UI, cfg, plan, want: int, batch: int | None) -> int:
    """The parts decoded together: ``--batch``, or as many as fit (up to ``want``); said once.

    Raises:
        ValueError: ``--batch`` outside 1..16 or more than fit.
    """
    with sigint_deferred():  # triton's first import here (as in infer.ui.prepare.load_engine)
        from infer.attention import resolve_attention
    from infer.capacity import kv_cache_words, largest_batch

    kind = resolve_attention(cfg.attention, cfg.torch_device)
    fits = largest_batch(cfg, plan.config, kind, cfg.torch_device)
    if batch is not None and batch > max(fits, 1):
        raise ValueError(f"--batch {batch} does not fit: {counted(fits, 'sequence')} of --ctx "
                         f"{cfg.ctx:,} {'fits' if fits == 1 else 'fit'} in memory with "
                         f"{kv_cache_words(cfg)}")
    if fits == 0:  # the engine's capacity check (the same count, prefill working set
        # included) refuses it, naming the largest context that fits
        return 1
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
                 f"{part.tokens[0]:,}-{part.tokens[1]:,}, {part.new_tokens:,} new)[/]")
    ui.err.print(escape(part.summary), style="dim")
