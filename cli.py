"""``infer``: the command line. Chat with, summarize with, prompt, or benchmark a Qwen3 model.

Design: this file is the typer app and the entry point: it declares the commands and their own
arguments and hands the work to ``infer/ui/``, the command line's presentation: the shared flags
are declared once in ``infer/ui/options.py``; ``infer/ui/prepare.py`` checks them, resolves the
model (``models/hub.py``), reads input (``infer/ui/textio.py``) and loads the engine;
``infer/ui/oneshot.py`` runs generate and summarize, showing the reply with
``infer/ui/render.py``; the chat loop is ``infer/ui/repl.py``, the bench table
``infer/ui/bench_view.py``, the consoles and the error/exit plumbing ``infer/ui/console.py``, a
Ctrl-C before a command's own code runs ``infer/ui/early_sigint.py``, ``main``'s run of the app
(its usage errors, the streams around it) ``infer/ui/entry.py``. No tensor math here.
Streams, so that output stays scriptable:

- the reply text goes to stdout; warnings, errors, the live status line and the stats line after
  each reply go to stderr;
- with ``--json``, stdout holds only JSON (one object; in ``chat`` one object per reply, one per
  line) and the reply text is streamed to stderr instead, so ``infer generate M P --json | jq``
  always parses. The object includes the reply text. An error prints
  ``{"error": "<the one-line message>", "exit_code": N}`` on stdout too (in ``chat``, a failed turn
  prints ``{"error": ..., "turn": k}`` as its line).

On a terminal the reply is shown live (its last lines plus tokens/s), then printed in full; when
the output is piped, the text is written as it comes, verbatim (``<think>`` tags included).
Errors are one line on stderr: exit code 2 for bad input (ValueError, NotImplementedError, a
missing file, typer's usage errors: ``main`` runs the app outside typer's standalone mode to print
them as one line), 1 for runtime failures (a stdout that cannot be written, such as ``/dev/full``
or one closed from the start, ``>&-``, among them), 130 for Ctrl-C (in ``chat`` only before
the chat began: from then on it stops a reply, or outside one ends the chat as Ctrl-D does);
``--debug`` adds the traceback. A chat with piped input exits 2 (or 1) at its end if a turn
failed. A stdout whose reader goes away (``infer generate M P | head -c 10``) ends the command
quietly with exit code 0, as the reader chose to stop reading.
"""

import sys

from infer.ui.early_sigint import ignore_sigint_at_exit, sigint_exits  # the standard library

# NOTE: a Ctrl-C before a command's own code runs, under its `errors`, reaches no handler of ours:
# in this module's imports (typer and rich, ~0.1 s: the `infer` script runs `from cli import main`
# before `main`) and its command definitions it printed a KeyboardInterrupt traceback, in typer's
# building of the app and parsing of the arguments (~0.05 s) it gave a traceback or a silent exit
# 130. These run under `exit_on_ctrl_c` (`sigint_exits`, infer/ui/early_sigint.py): this module
# until its end, `main` until the command's first line. Torch, triton and each command's own
# modules are imported by the commands, under `errors`, so that `--help` needs none of them.
sigint_exits(True)
try:
    from typing import Annotated

    import typer

    from infer.ui import prepare as setup
    from infer.ui.console import UI, errors
    from infer.ui.entry import run_app
    from infer.ui.helpstyle import Command, Group, VersionOpt
    from infer.ui.options import (
        BENCH,
        BENCH_JSON_HELP,
        ENGINE,
        OUTPUT,
        SUMMARIZE,
        ModelArg,
        Options,
        System,
        shared_options,
    )
except BaseException:  # no cli: SIGINT as it was
    sigint_exits(False)
    raise

DEFAULT_SUMMARY_MODEL = "Qwen/Qwen3-0.6B"

app = typer.Typer(cls=Group, add_completion=False, no_args_is_help=True,
                  pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]})


@app.callback()
def _app(version: VersionOpt = False):
    """Run Qwen3 models on one GPU at long context (32k-128k tokens)."""


@app.command(cls=Command)
@shared_options(max_new_tokens=512)
def generate(
    model: ModelArg,
    prompt: Annotated[str, typer.Argument(help="The prompt text, or - to read standard input.",
                                          metavar="PROMPT", show_default=False)],
    raw: Annotated[bool, typer.Option(
        "--raw", help="Feed the prompt as it is, without the chat template (special-token "
                      "strings such as <|im_start|> in it are encoded as plain text).",
        rich_help_panel=OUTPUT)] = False,
    system: System = None,
    *, opts: Options,
):
    """Reply once to PROMPT (through the chat template; thinking off unless --think)."""
    ui = UI(opts, "generate")
    with errors(opts.debug, opts.json, ui):
        sigint_exits(False)  # the command's own Ctrl-C from here (`errors`)
        # the reply's view: not for --help
        from infer.ui.oneshot import chat_messages, one_shot, template_tokens
        from infer.ui.textio import require_stdin

        if prompt == "-":
            require_stdin("- reads the prompt from it", "pipe the prompt in, or give it as an "
                          "argument")
            prompt, _ = setup.read_input(ui, "-")
        elif not prompt.strip():
            raise ValueError("the prompt is empty: give some text, or - to read standard input")
        else:
            prompt = setup.user_text(ui, prompt, "the prompt")
        for flag, given in (("--system", system is not None), ("--think", opts.think)):
            if given and raw:
                raise ValueError(f"{flag} has no effect with --raw (the prompt is fed as it is, "
                                 "without the chat template): drop one of them")
        if system is not None:
            system = setup.system_text(ui, system)
        cfg, tok, plan = setup.prepare(ui, model)
        ids = tok.encode(prompt) if raw else tok.chat_ids(chat_messages(system, prompt),
                                                          enable_thinking=opts.think)
        fixed = 0 if raw else template_tokens(tok, system, opts.think)
        one_shot("generate", ui, cfg, tok, ids, max_ctx=plan.max_ctx, fixed=fixed)


@app.command(cls=Command,
             short_help="Summarize a text FILE (in parts when it is longer than the context).")
@shared_options(max_new_tokens=1024)
def summarize(
    file: Annotated[str, typer.Argument(
        help="Text file (UTF-8, or UTF-16 or UTF-32 with a BOM), or - to read standard input.",
        metavar="FILE", show_default=False)],
    model: Annotated[str, typer.Option(
        "--model", "-m", help="Local checkpoint folder or Hugging Face hub id.",
        rich_help_panel=ENGINE)] = DEFAULT_SUMMARY_MODEL,
    no_split: Annotated[bool, typer.Option(
        "--no-split", help="Refuse a text longer than the context instead of summarizing it in "
        "parts.", rich_help_panel=SUMMARIZE)] = False,
    part_tokens: Annotated[int | None, typer.Option(
        help="Most tokens of each part's summary (a text longer than the context; default "
        "512).", show_default=False, rich_help_panel=SUMMARIZE)] = None,
    batch: Annotated[int | None, typer.Option(
        help="Parts decoded together, 1 to 16 (default: as many as fit in memory).",
        show_default=False, rich_help_panel=SUMMARIZE)] = None,
    *, opts: Options,
):
    """Summarize a text FILE; one longer than the context is summarized in parts, then the part
    summaries are combined (thinking off unless --think)."""
    ui = UI(opts, "summarize")
    with errors(opts.debug, opts.json, ui):
        sigint_exits(False)  # the command's own Ctrl-C from here (`errors`)
        # summarize's own modules: not for --help or the other commands
        from infer.summary_prompts import SUMMARY_PROMPT
        from infer.ui.oneshot import chat_messages
        from infer.ui.summary_view import summarize_text

        if part_tokens is not None and part_tokens < 1:
            raise ValueError(f"--part-tokens must be at least 1, got {part_tokens}")
        if batch is not None and not 1 <= batch <= 16:
            raise ValueError(f"--batch must be 1 to 16 parts, got {batch}")
        if batch is not None and no_split:
            raise ValueError("--batch sets how many parts decode together, and --no-split "
                             "makes no parts: give one or the other")
        if part_tokens is not None and no_split:
            raise ValueError("--part-tokens sets the length of each part's summary, and "
                             "--no-split makes no parts: give one or the other")
        text, n_bad = setup.read_input(ui, file)
        extra = dict(input_chars=len(text), replaced_bytes=n_bad)
        ui.startup.extra = {**extra, "split": None}  # decided once the prompt is read
        cfg, tok, plan = setup.prepare(ui, model)
        with ui.status(f"reading the text ({len(text):,} characters) ..."):  # a book: seconds
            ids = tok.chat_ids(chat_messages(None, SUMMARY_PROMPT.format(text=text)),
                               enable_thinking=opts.think)
        summarize_text(ui, cfg, tok, plan, ids, text, no_split=no_split,
                       part_tokens=part_tokens, batch=batch, extra=extra)


@app.command(cls=Command, short_help="Talk with MODEL (/reset, /stats, /exit).")
@shared_options(max_new_tokens=0, think=True)
def chat(model: ModelArg, system: System = None, *, opts: Options):
    """Talk with MODEL. /reset clears the conversation, /stats shows numbers, /exit or /quit
    quits, //text sends /text.

    Ctrl-C during a reply stops that reply; Ctrl-C or Ctrl-D at the prompt quits.

    With piped input the exit code is 2 if a turn failed on bad input (1 on a runtime failure).
    """
    ui = UI(opts, "chat")
    with errors(opts.debug, opts.json, ui):
        sigint_exits(False)  # the command's own Ctrl-C from here (`errors`)
        # the chat loop: not for --help or the other commands
        from infer.ui.repl import check_reply_budget, run_repl
        from infer.ui.textio import require_stdin

        require_stdin("chat reads the messages from it",
                      "run chat in a terminal, or pipe the messages in")
        if system is not None:
            system = setup.system_text(ui, system)
        cfg, tok, plan = setup.prepare(ui, model)
        check_reply_budget(tok, system, cfg.ctx, opts.max_new_tokens, think=opts.think,
                           max_ctx=plan.max_ctx)
        engine, load_s = setup.load_engine(ui, cfg, tok)
        # the decode step's capture before the first turn (its length is not known yet)
        setup.warm_engine(ui, engine, engine.default_sampling(**opts.sampling_overrides()))
        code = run_repl(ui, engine, system, load_s)
        if code and not sys.stdin.isatty():
            raise typer.Exit(code)


@app.command(cls=Command, short_help="Measure prefill and decode speed against the ceiling.")
@shared_options(reply=False, json_help=BENCH_JSON_HELP)
def bench(
    model: ModelArg,
    *, opts: Options,
    tokens: Annotated[int, typer.Option(
        help="Tokens decoded per length (greedy, past stop tokens).",
        rich_help_panel=BENCH)] = 128,
    lengths: Annotated[str | None, typer.Option(
        help="Prompt lengths, comma-separated: 4k,32k (default: 4k and the longest that fits "
             "in --ctx with --tokens); each measured once, shortest first.", show_default=False,
        rich_help_panel=BENCH)] = None,
    # bench's own switch: the other commands' --speculate auto|on|off (Options.speculate) is
    # not among bench's shared flags, and a parameter may not be named like a shared field
    speculative: Annotated[bool, typer.Option(
        "--speculate/--no-speculate",
        help="Also decode each length with prompt-lookup speculation: its tok/s, the speedup, "
             "the drafts accepted, and whether the tokens are the same. The prompt is then a "
             "repeated phrase, so that drafts exist; with random weights expect the cost, with "
             "a trained model the gain.", rich_help_panel=BENCH)] = False,
):
    """Measure prefill and decode speed of MODEL at long context against the decode ceiling
    (the GPU's read bandwidth over the bytes each token must read)."""
    ui = UI(opts, "bench")
    with errors(opts.debug, opts.json, ui):
        sigint_exits(False)  # the command's own Ctrl-C from here (`errors`)
        from infer.bench import parse_lengths  # torch: under `errors`, as a Ctrl-C in it exits 130
        from infer.ui import bench_view

        cfg, tok, plan = setup.prepare(ui, model)
        lens = parse_lengths(lengths, cfg.ctx, tokens, max_ctx=plan.max_ctx)
        engine, load_s = setup.load_engine(ui, cfg, tok)
        results, interrupted = bench_view.measure(ui, engine, lens, tokens,
                                                  speculate=speculative)
        bench_view.show(ui, engine, load_s, results, interrupted)
        if interrupted:
            raise typer.Exit(130)


def main(argv: list[str] | None = None) -> None:
    """The ``infer`` entry point: typer's app, with its usage errors as one line on stderr.

    Bad flags, unknown options and missing arguments exit 2 with one line (see ... --help); a
    closed stdout exits 0 quietly, one that cannot be written exits 1; help, ``typer.Exit`` codes
    and Ctrl-C (130) behave as typer's standalone mode. The contract and the code:
    ``infer.ui.entry.run_app``. As the process's entry (``argv`` None) a Ctrl-C after the
    command's end is ignored (``ignore_sigint_at_exit``).
    """
    try:
        run_app(app, argv)
    finally:
        if argv is None:
            ignore_sigint_at_exit()


sigint_exits(False)  # the module is defined: main turns it on again for typer's parse


if __name__ == "__main__":
    main()
