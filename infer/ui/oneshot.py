"""One prompt, one reply: the flow of ``generate`` and ``summarize`` after the flags are checked.

``one_shot`` checks that the prompt and its reply fit, loads the engine, shows the reply
(``infer.ui.render.ReplyView``), then prints the stats line on stderr or, with ``--json``, the
reply's object on stdout; a reply cut by Ctrl-C ends the command with exit code 130 after that.
"""

from __future__ import annotations

import typer

from infer.ui.console import UI
from infer.ui.prepare import check_fits, load_engine
from infer.ui.records import reply_record
from infer.ui.render import ReplyView, format_stats


def chat_messages(system: str | None, user: str) -> list[dict]:
    """The messages of a one-turn conversation, for ``Qwen3Tokenizer.chat_ids``."""
    return ([{"role": "system", "content": system}] if system else []) + \
        [{"role": "user", "content": user}]


def one_shot(command: str, ui: UI, cfg, tokenizer, ids: list[int], **extra) -> None:
    """Load, reply once to ``ids``, print the stats (or the JSON object, with ``extra`` fields).

    Raises:
        ValueError: the prompt and ``--max-new-tokens`` do not fit in the context.
        typer.Exit(130): Ctrl-C cut the reply (its stats are printed first).
    """
    check_fits(len(ids), cfg.ctx, ui.opts.max_new_tokens)
    engine, load_s = load_engine(ui, cfg, tokenizer)
    session = engine.new_session()
    sampling = engine.default_sampling(**ui.opts.sampling_overrides())
    reply = ReplyView(ui.text, ui.err, engine, session,
                      hide_thinking=ui.opts.hide_thinking).run(ids, sampling)
    if ui.opts.json:
        ui.emit_json(reply_record(command, engine, reply, load_s, **extra))
    else:
        ui.err.print(format_stats(reply.stats, ceiling=reply.ceiling), style="dim")
    if reply.interrupted:
        raise typer.Exit(130)
