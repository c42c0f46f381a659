"""A Ctrl-C before a command's work began: the one report every command gives of it.

Each command's ``UI`` holds a ``Startup``: how far the command got before its work (a reply,
bench's lengths) began. The command fills it in as it goes: ``prepare`` the config once the flags
are checked and the model found, ``one_shot`` the prompt's tokens, ``load_engine`` and
``warm_engine`` the stage and the engine; ``began`` hands Ctrl-C over to the work, which reports
its own (``infer.ui.render.ReplyView``, ``infer.ui.bench_view.measure``). A Ctrl-C before that
(the imports of torch and triton, the hub, the tokenizer, the load, the warm-up) reaches
``infer.ui.console.errors``, which calls ``not_begun``: the command's result cut before it began,
exit code 130. On stderr one line, ``[prompt N tokens · ]interrupted before loading the model``
(or ``while loading the model``, ``while warming up``); with ``--json`` the object the command
prints when it is done, ``interrupted``: a reply with no text and no token (generate, summarize,
chat), or bench's with no lengths, what is not known yet null (the header's fields before the
config, ``load_s`` before the load finished, ``warm_up_s`` and ``graph_capture_s`` before the
warm-up finished, ``prompt_tokens`` before the prompt was read).
Nothing here imports torch: a Ctrl-C may come in torch's import.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn

import typer

if TYPE_CHECKING:
    from infer.ui.console import UI
    from infer.ui.render import Reply

BEFORE_LOAD = "before loading the model"
LOADING = "while loading the model"
WARMING_UP = "while warming up"


@dataclass
class Startup:
    """How far ``command`` got before its work began (the module docstring).

    Attributes:
        stage: ``BEFORE_LOAD``, ``LOADING`` or ``WARMING_UP``; None once the work began.
        cfg: the ``EngineConfig``, once the flags are checked and the model folder found.
        prompt_tokens: the prompt's tokens, once read (generate, summarize).
        engine, load_s: the engine and its load's seconds, once loaded.
        warming: the warm-up (``infer.ui.prepare.warm_engine``) began and has not finished: its
            seconds and the engine's capture seconds are not known.
        extra: the command's own ``--json`` fields (summarize: ``input_chars``, ...).
    """

    command: str
    stage: str | None = BEFORE_LOAD
    cfg: object | None = None
    prompt_tokens: int | None = None
    engine: object | None = None
    load_s: float | None = None
    warming: bool = False
    extra: dict = field(default_factory=dict)

    def began(self) -> None:
        """The work began: its own code reports a Ctrl-C from here on."""
        self.stage = None


def empty_reply(prompt_tokens: int) -> Reply:
    """A reply that Ctrl-C cut before it began: no text, no token, ``interrupted``."""
    from infer.stats import GenerationStats
    from infer.ui.render import Reply

    stats = GenerationStats(prompt_tokens=prompt_tokens, stop_reason="interrupted")
    return Reply(raw="", answer="", thinking="", stats=stats, interrupted=True, ceiling=None)


def not_begun(ui: UI) -> NoReturn:
    """Ctrl-C before ``ui.startup``'s work began: its line on stderr, or with ``--json`` its
    object on stdout (the module docstring), then exit code 130."""
    s = ui.startup
    if ui.opts.json:
        from infer.ui.records import bench_record, reply_record

        if s.command == "bench":
            obj = bench_record(s.engine, s.load_s, [], True, cfg=s.cfg)
        else:
            obj = reply_record(s.command, s.engine, empty_reply(s.prompt_tokens or 0), s.load_s,
                               cfg=s.cfg, warm_cut=s.warming, **s.extra)
            obj["prompt_tokens"] = s.prompt_tokens  # null: not read yet (chat: none sent)
        ui.emit_json(obj)
    else:
        from infer.wording import counted

        prompt = "" if s.prompt_tokens is None else \
            f"prompt {counted(s.prompt_tokens, 'token')} · "
        ui.err.print(f"{prompt}interrupted {s.stage}", style="dim")
    raise typer.Exit(130)


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) back until the block ends, then raise KeyboardInterrupt.

    For the import of torch (and numpy inside it): a KeyboardInterrupt raised inside an extension
    module's import may be swallowed there (the command then runs on to the end, exit 0), abort
    the process from C++ (pybind11's ``error_already_set``: exit 134), or come out as an
    ImportError ("cannot load module more than once per process"). Held back, it is one Ctrl-C
    before the work began (``not_begun``) once the import is done. Does nothing outside the main
    thread or when SIGINT has a handler other than Python's default (a test harness, a host
    program)."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if caught:
        raise KeyboardInterrupt
