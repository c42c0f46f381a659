"""The ``infer chat`` loop: read a line, run a command or a turn, show the reply.

Owns the chat commands (``/reset``, ``/stats``, ``/exit``, ``/quit``; ``//text`` sends ``/text``)
and the per-turn error handling: a failed turn prints its error, drops the message, and the chat
goes on; ``run_repl`` returns the exit code the failures call for. Before the chat starts,
``check_reply_budget`` refuses a ``--max-new-tokens`` that no turn can fit; before each turn,
``check_turn`` refuses a message that, with the conversation so far and its reply, does not fit
(the reply would otherwise be cut short by a full context, and every later turn refused). The
messages and each turn's prompt ids are ``infer/ui/conversation.py``'s. No tensor math here.
"""

from __future__ import annotations

import contextlib
import re
import sys
import traceback

from rich.markup import escape

from infer.fits import check_fits, fits
from infer.ui.console import UI, OutputError, error_message
from infer.ui.conversation import Conversation
from infer.ui.oneshot import template_tokens
from infer.ui.piped_lines import PipedLines, piped_lines
from infer.ui.prepare import warn_replaced
from infer.ui.records import reply_record
from infer.ui.render import ReplyView
from infer.ui.stats_line import capture_note, format_stats
from infer.ui.textio import mostly_invalid, replace_surrogates
from infer.wording import counted

CHAT_HELP = ("/reset clears the conversation, /stats shows the last reply's numbers, /exit "
             "(or /quit) quits, /help shows this, //text sends /text")
CHAT_COMMANDS = ("/reset", "/stats", "/exit", "/quit", "/help")

_COMMAND = re.compile(r"/[A-Za-z]")


def check_reply_budget(tokenizer, system: str | None, ctx: int, max_new: int, *, think: bool,
                       max_ctx: int) -> None:
    """Refuse a ``--max-new-tokens`` that no turn can fit, before the chat starts: the prompt of
    the shortest first message a user can send (empty lines are skipped, so one token: the
    template and ``system`` with an empty message, plus one) and its reply must fit, as
    ``check_fits`` demands of ``generate``.

    Raises:
        ValueError: they do not (``check_fits``'s message, said of a one-token message).
    """
    n = template_tokens(tokenizer, system, think) + 1  # a one-token message
    try:
        check_fits(n, ctx, max_new, max_ctx=max_ctx, fixed=n - 1)  # nothing left to shorten
    except ValueError as e:
        raise ValueError(f"no chat turn fits: even with a one-token message {e}") from None


def check_turn(conv: Conversation, ids: list[int], ctx: int, max_new: int, *,
               max_ctx: int) -> None:
    """Refuse a turn whose prompt ``ids`` (the conversation so far, then the message just added to
    ``conv``) does not fit in ``ctx`` with its reply (``max_new`` tokens; 0: no limit, so at least
    one), by ``fits``' rule: before any work, so nothing is prefilled and the chat goes on.

    Raises:
        ValueError: it does not fit: the tokens the message and its reply need, those left of the
            context beside the conversation so far, and what would make room.
    """
    if fits(len(ids), ctx, max_new):
        return
    fixed = conv.fixed_tokens()
    reply = max(max_new, 1)
    need, left = len(ids) - fixed + reply, max(ctx - fixed, 0)
    budget = f"up to {max_new:,} (--max-new-tokens)" if max_new > 0 else "at least 1"
    held = ("the conversation so far" if conv.has_history else
            "the system prompt and the chat template" if conv.system else "the chat template")
    fixes = ["send a shorter message"] if fits(fixed + 1, ctx, max_new) else []
    fixes += ["/reset"] if conv.has_history else []
    if ctx < max_ctx:  # a lower budget helps only if the prompt fits with one reply token
        fixes.append("restart with a larger --ctx" + (
            " or a lower --max-new-tokens" if max_new > 0 and fits(len(ids), ctx) else ""))
    how = ": " + ", ".join(fixes[:-1] + [f"or {fixes[-1]}"] if len(fixes) > 1 else fixes)
    # NOTE: fixed can pass ctx: a reply that filled the context, rendered again by the template
    # (its text re-encoded, its turn closed, the next turn opened), is longer than it was
    room = (f"{left:,} of the context's {ctx:,} are left ({fixed:,} hold {held})" if fixed < ctx
            else f"{held} already takes {fixed:,} tokens as the chat template renders it, "
                 f"{'more than' if fixed > ctx else 'all of'} the context's {ctx:,}")
    raise ValueError(f"the message does not fit: it is {counted(need - reply, 'token')} and its "
                     f"reply {budget}, {need:,} in all, but {room}{how if fixes else ''}")


def run_repl(ui: UI, engine, system: str | None, load_s: float) -> int:
    """The chat loop; returns on /exit, Ctrl-D, or Ctrl-C outside a reply (at the prompt, or
    between turns: as a message is tokenized, after a reply is shown); one in a reply stops it.

    A line starting with ``/`` and a letter is a command (unknown: a warning); ``//text`` sends
    ``/text``. A failed turn (the message looks binary or does not fit, or the engine raised)
    prints the error, drops the message and the chat goes on. Returns the exit code the failures
    call for: 0 none, 2 bad input, 1 a runtime failure (which wins over 2). With ``--json`` each
    reply is one ``reply_record`` line, each failed turn one ``{"error", "turn"}`` line.
    """
    ui.startup.began()  # a Ctrl-C from here: a reply's (ReplyView), else the chat's end
    # Piped input: the prompts go to stderr, so stdout holds only the replies.
    prompt_to = ui.text if sys.stdin.isatty() else ui.err
    turn, code = 0, 0
    try:
        o = ui.opts
        sampling = engine.default_sampling(**o.sampling_overrides())
        session = engine.new_session()
        conv = Conversation(engine.tokenizer, system, enable_thinking=o.think)
        last = None
        # Piped: the bytes decoded after their byte-order mark (UTF-16 from a file, ...).
        piped = piped_lines()
        # A terminal's invalid bytes: lone surrogates (replaced by _read_message), not a
        # UnicodeDecodeError that would end the chat (stdin is strict outside the C/POSIX locales).
        with contextlib.suppress(AttributeError, ValueError, OSError):
            sys.stdin.reconfigure(errors="surrogateescape")
        if sys.stdin.isatty():
            try:  # line editing and history for input()
                import readline  # noqa: F401
            except ImportError:  # not on every platform
                pass
        ui.err.print(f"[dim]{escape(CHAT_HELP)}; Ctrl-C stops a reply, Ctrl-D quits[/]")
        while True:
            try:
                line, n_bad = _read_message(prompt_to, piped)
            except EOFError:  # Ctrl-D (Ctrl-C: below)
                prompt_to.print()
                return code
            line = line.removesuffix("\r")  # a CRLF line through input() (PipedLines drops it)
            cmd = line.strip()
            if not cmd:
                continue
            if _COMMAND.match(cmd):
                word, _, rest = cmd.partition(" ")
                word = word.lower()  # /Stats, /EXIT: the same commands
                if word not in CHAT_COMMANDS:
                    ui.warn(f"unknown command {word}: {CHAT_HELP}")
                    continue
                if rest.strip():
                    ui.warn(f"{word} takes no argument: {CHAT_HELP}")
                    continue
                cmd = word
            elif cmd.startswith("//"):
                line = line.replace("/", "", 1)
            if cmd in ("/exit", "/quit"):
                return code
            if cmd == "/reset":
                session.reset()
                conv.reset()  # (the last reply's numbers stay: /stats still shows them)
                ui.err.print("[dim]conversation cleared[/]")
                continue
            if cmd == "/help":
                ui.err.print(CHAT_HELP)
                continue
            if cmd == "/stats":
                used = f"context: {session.num_cached:,} of {engine.ctx:,} tokens cached"
                ui.err.print(format_stats(last.stats, ceiling=last.ceiling, chat=True) + "; " + used
                             if last else f"no reply yet; {used}; model loaded in {load_s:.1f} s")
                continue
            turn += 1
            refused = _binary(line, n_bad, piped.encoding if piped else "utf-8")
            if refused:  # generate - and summarize refuse such input too
                code = code or 2
                _turn_error(ui, refused, turn)
                continue
            warn_replaced(ui, n_bad, "the message")
            try:
                ids = conv.add_user(line)
                check_turn(conv, ids, engine.ctx, o.max_new_tokens, max_ctx=engine.context.max_ctx)
                reply = ReplyView(ui.text, ui.err, engine, session, hide_thinking=o.hide_thinking,
                                  speculate=o.speculation("chat")).run(ids, sampling)
            except (BrokenPipeError, OutputError):  # stdout is gone or full: the chat ends
                raise
            except Exception as e:  # noqa: BLE001 - one failed turn; the chat goes on
                conv.drop_user()
                if o.debug:
                    traceback.print_exc(file=sys.stderr)
                msg, bad_input = error_message(e, o.debug)  # (check_turn's says when /reset helps)
                code = 1 if not bad_input or code == 1 else 2
                _turn_error(ui, msg, turn)
                continue
            last = reply
            # The reply as the model wrote it (thinking included; the template drops old thinking).
            conv.add_reply(last.raw, ids, session.cached_ids, interrupted=last.interrupted)
            if o.json:
                ui.emit_json(reply_record("chat", engine, last, load_s))
            else:
                ui.err.print(format_stats(last.stats, ceiling=last.ceiling, chat=True)
                             + capture_note(engine.take_capture_s()), style="dim")
            if (why := last.only_thinking()) is not None and last.stats.stop_reason != "context":
                ui.warn(why)
            if last.stats.stop_reason == "context":
                ui.warn(f"the context is full ({counted(engine.ctx, 'token')}): /reset, or restart "
                        "with a larger --ctx")
    except KeyboardInterrupt:  # at the prompt or between turns (not in a reply): as Ctrl-D
        prompt_to.print()
        return code


def _read_message(prompt_to, piped: PipedLines | None) -> tuple[str, int]:
    """The next line after the ``>`` prompt, without its ``\\n``, and how many invalid byte
    sequences in it were replaced with U+FFFD: from ``piped`` (``piped_lines``: BOM-decoded), or,
    for a terminal, from ``input()`` with its escaped bytes replaced.

    Raises:
        EOFError: the input ended (Ctrl-D, or the end of the piped text).
    """
    line = prompt_to.input("[bold green]>[/] ", stream=piped)  # (stream None: input())
    if piped is None:
        return replace_surrogates(line)
    if not line:
        raise EOFError
    return line.removesuffix("\n"), piped.replaced


def _binary(line: str, n_bad: int, encoding: str) -> str | None:
    """The error for a message that looks like binary input, by ``decode_text``'s rule for a
    file: NUL characters, or ``mostly_invalid`` (``n_bad`` invalid sequences of ``encoding``
    replaced in it); None for text."""
    if "\x00" in line:
        return "the message contains NUL bytes (binary input?): send text"
    if mostly_invalid(line, n_bad):
        return (f"the message is not valid {encoding.upper()} ({n_bad} of {len(line)} characters;"
                " binary input?): send text, or convert it first, e.g. iconv -f latin1 -t utf-8")
    return None


def _turn_error(ui: UI, msg: str, turn: int) -> None:
    """A failed turn's one line on stderr (and with ``--json`` its ``{"error", "turn"}`` line)."""
    ui.err.print(f"[bold red]error:[/] {escape(msg)}")
    if ui.opts.json:
        ui.emit_json({"error": msg, "turn": turn})
