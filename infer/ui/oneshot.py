"""One prompt, one reply: the flow of ``generate`` and ``summarize`` after the flags are checked.

``one_shot`` checks that the prompt and its reply fit, loads the engine, shows the reply
(``infer.ui.render.ReplyView``), then prints the stats line (``infer.ui.stats_line``) on stderr
or, with ``--json``, the reply's object on stdout; a reply cut by Ctrl-C ends the command with
exit code 130 after that. A Ctrl-C before the reply began (loading the engine, warming it up)
ends it the same way, with the reply that never began, as in every command
(``infer.ui.startup.not_begun``, from what ``ui.startup`` holds): one line on stderr, or its
object with ``--json`` (``load_s`` null before the load finished), not the ``{"error": ...}``
object of a failure.
"""

from __future__ import annotations

import typer

from infer.fits import check_fits
from infer.ui.console import UI
from infer.ui.prepare import load_engine, warm_engine
from infer.ui.records import reply_record
from infer.ui.render import ReplyView
from infer.ui.stats_line import capture_note, format_stats


def chat_messages(system: str | None, user: str) -> list[dict]:
    """The messages of a one-turn conversation, for ``Qwen3Tokenizer.chat_ids``."""
    return ([{"role": "system", "content": system}] if system else []) + \
        [{"role": "user", "content": user}]


def template_tokens(tokenizer, system: str | None, think: bool, template: str = "{text}") -> int:
    """Tokens of a one-turn chat prompt that are not its input: the chat template, ``system``
    and ``template``'s own words around ``{text}`` (``one_shot``'s ``fixed``)."""
    content = template.format(text="")
    return len(tokenizer.chat_ids(chat_messages(system, content), enable_thinking=think))


def one_shot(command: str, ui: UI, cfg, tokenizer, ids: list[int], *, max_ctx: int,
             fixed: int = 0, **extra) -> None:
    """Load, reply once to ``ids``, print the stats (or the JSON object, with ``extra`` fields).
    ``fixed``: the tokens of ``ids`` that are not the input (``template_tokens``; 0 for a raw
    prompt), for ``check_fits``' advice.

    Raises:
        ValueError: the prompt and ``--max-new-tokens`` do not fit in the context (or beyond
            ``max_ctx``, the largest the checkpoint supports).
        typer.Exit(130): Ctrl-C cut the reply (its stats are printed first). One before it
            began (the load, the warm-up) is ``infer.ui.console.errors``' (``ui.startup``).
    """
    ui.startup.prompt_tokens, ui.startup.extra = len(ids), extra
    check_fits(len(ids), cfg.ctx, ui.opts.max_new_tokens, max_ctx=max_ctx, fixed=fixed)
    engine, load_s = load_engine(ui, cfg, tokenizer)
    sampling = engine.default_sampling(**ui.opts.sampling_overrides())
    warm_engine(ui, engine, sampling, prompt_tokens=len(ids))
    reply_once(command, ui, engine, load_s, ids, sampling, extra)


def reply_once(command: str, ui: UI, engine, load_s: float, ids: list[int], sampling,
               extra: dict, stats_suffix: str = "") -> None:
    """Show one reply to ``ids`` on a fresh session of ``engine``, then its stats line (with
    ``stats_suffix``) or, with ``--json``, its object (with ``extra`` fields).

    Raises:
        typer.Exit(130): Ctrl-C cut the reply (its stats are printed first).
    """
    ui.startup.began()
    session = engine.new_session()
    reply = ReplyView(ui.text, ui.err, engine, session, hide_thinking=ui.opts.hide_thinking,
                      speculate=ui.opts.speculation(command)).run(ids, sampling)
    if ui.opts.json:
        ui.emit_json(reply_record(command, engine, reply, load_s, **extra))
    else:
        ui.err.print(format_stats(reply.stats, ceiling=reply.ceiling) + stats_suffix
                     + capture_note(engine.take_capture_s()), style="dim")
    if (why := reply.only_thinking()) is not None:
        ui.warn(why)
    if reply.interrupted:
        raise typer.Exit(130)
