"""Show one streamed reply with rich: thinking apart from the answer, live tokens/s, final stats.

Used by ``infer/ui/oneshot.py`` and ``infer/ui/repl.py``, which print the stats line after it
(``infer/ui/stats_line.py``); no tensor math. ``ReplyView.run`` drives ``Session.generate``,
turns ids into text with the tokenizer's ``StreamDecoder`` and splits Qwen3's
``<think>...</think>`` block from the answer (``ThinkSplitter``, on text, so a tag cut across
pieces is still found). Two ways to show it:

- the text console is a terminal: a rich ``Live`` region holds the last lines of the reply
  (thinking dimmed) and a status line (tokens, tokens/s, and the bandwidth ceiling when the engine
  gives one); when the reply ends the region is replaced by the whole reply, printed once;
- otherwise (piped, tests): the text is written as it comes, verbatim with its ``<think>`` tags
  (dropped with ``hide_thinking``); the status line is shown live on stderr if that is a terminal.

A long prefill (more than ``infer.ui.progress.MIN_TOKENS`` prompt tokens to prefill) on a terminal
stderr shows a progress bar there first (``PrefillBar``); the live view starts with the first token.

Ctrl-C during a reply (its prefill included) ends that reply only: the generator is closed (the
engine keeps the session consistent) and ``Reply.interrupted`` is set. One before the prefill
began (the session's stats are not this reply's yet) gives stats with no token stored.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.text import Text

from infer.thinking import THINK_CLOSE, THINK_OPEN, prompt_opens_thinking
from infer.ui.console import StderrConsole
from infer.ui.progress import PrefillBar
from infer.wording import counted


class ThinkSplitter:
    """Split streamed text into ``(is_thinking, text)`` segments at ``<think>``/``</think>``.

    ``push(piece)`` returns the segments that are certain; a tail that could be the start of a tag
    is held back until the next piece or ``flush()``. Tags are not part of any segment.
    """

    def __init__(self, thinking: bool = False):
        """``thinking``: the text starts inside a thinking block (its prompt opened it)."""
        self.thinking = thinking
        self._buf = ""

    def push(self, piece: str) -> list[tuple[bool, str]]:
        self._buf += piece
        out: list[tuple[bool, str]] = []
        while True:
            tag = THINK_CLOSE if self.thinking else THINK_OPEN
            i = self._buf.find(tag)
            if i < 0:
                break
            if i:
                out.append((self.thinking, self._buf[:i]))
            self._buf = self._buf[i + len(tag):]
            self.thinking = not self.thinking
        keep = next((k for k in range(min(len(tag) - 1, len(self._buf)), 0, -1)
                     if self._buf.endswith(tag[:k])), 0)
        if len(self._buf) > keep:
            out.append((self.thinking, self._buf[:len(self._buf) - keep]))
            self._buf = self._buf[len(self._buf) - keep:]
        return out

    def flush(self) -> list[tuple[bool, str]]:
        out, self._buf = ([(self.thinking, self._buf)] if self._buf else []), ""
        return out


@dataclass
class Reply:
    """One finished (or interrupted) reply."""

    raw: str  # the decoded text, tags included
    answer: str  # the text outside <think>...</think>, stripped
    thinking: str  # the text inside, stripped ("" without thinking)
    stats: object  # GenerationStats
    interrupted: bool
    ceiling: float | None
    sampling: dict | None = None  # SamplingParams.record() of the reply (its seed included)

    def only_thinking(self) -> str | None:
        """A warning when the reply (not cut by Ctrl-C) holds thinking and no answer, saying why
        from its stop reason; None otherwise."""
        if self.interrupted or self.answer or not self.thinking:
            return None
        if self.stats.stop_reason == "length":
            return ("the reply spent its --max-new-tokens on thinking and has no answer: raise "
                    "--max-new-tokens, or leave out --think")
        if self.stats.stop_reason == "context":
            return "the context filled up during the thinking: the reply has no answer"
        return "the reply holds only thinking: the model ended it without an answer"

    def to_dict(self) -> dict:
        return {"text": self.answer, "thinking": self.thinking or None,
                **self.stats.to_dict(), "interrupted": self.interrupted,
                "ceiling_tokens_per_s": self.ceiling, "sampling": self.sampling}


class ReplyView:
    """Stream one reply of ``session`` to ``text`` (a rich Console), status on ``status``."""

    def __init__(self, text: Console, status: Console, engine, session, *,
                 hide_thinking: bool = False, speculate: bool = False):
        self.text, self.status, self.engine, self.session = text, status, engine, session
        self.hide_thinking, self.speculate = hide_thinking, speculate
        self.pretty = text.is_terminal
        self._split = ThinkSplitter()
        self._raw: list[str] = []
        self._parts: dict[bool, list[str]] = {True: [], False: []}
        self._shown = Text()
        self._last_kind: bool | None = None
        self._t0 = time.perf_counter()
        self._prev_stats = session.stats

    def run(self, prompt_ids: list[int], sampling) -> Reply:
        """Generate and show the reply. Raises ValueError (from the engine) for a bad prompt.

        A long prefill on a terminal stderr shows ``infer.ui.progress.PrefillBar`` first; the
        live view starts after it (with the first token), so the two never share the screen.
        Sampling without a seed draws one first (``SamplingParams.seeded``): the reply records
        it."""
        sampling = sampling.seeded() if sampling is not None else None  # None: greedy
        self._split = ThinkSplitter(prompt_opens_thinking(self.engine.tokenizer, prompt_ids))
        bar = None
        if PrefillBar.wanted(self.status, len(prompt_ids) - self.session.num_cached):
            bar = PrefillBar(self.status)
            gen = self.session.generate(prompt_ids, sampling, on_prefill=bar,
                                        speculate=self.speculate)
        else:
            gen = self.session.generate(prompt_ids, sampling, speculate=self.speculate)
        decoder = self.engine.tokenizer.stream_decoder()
        interrupted = False
        try:
            first, interrupted = _prefill(gen, bar)
            with _NoLive() if interrupted else self._live():
                try:
                    if not interrupted:
                        for tok in itertools.chain(first, gen):
                            self._add(decoder.push(tok))
                        self._add(decoder.flush())
                except KeyboardInterrupt:
                    interrupted = True
                finally:
                    gen.close()
                for seg in self._split.flush():
                    self._segment(*seg)
        except KeyboardInterrupt:  # a second Ctrl-C while the view closes
            interrupted = True
        if self.pretty:
            self.text.print(self._shown)
        elif self._raw:
            self._write("\n")
        stats = self.session.stats
        if stats is None or stats is self._prev_stats:  # cut before its prefill began
            from infer.stats import GenerationStats

            stats = GenerationStats(prompt_tokens=len(prompt_ids), stop_reason="interrupted")
        return Reply(raw="".join(self._raw), answer="".join(self._parts[False]).strip(),
                     thinking="".join(self._parts[True]).strip(), stats=stats,
                     interrupted=interrupted,
                     ceiling=self.engine.ceiling_tokens_per_s(self.session.num_cached),
                     sampling=sampling.record() if sampling is not None else None)

    # ---------------------------------------------------------------- text

    def _add(self, piece: str) -> None:
        if not piece:
            return
        self._raw.append(piece)
        if not self.pretty and not self.hide_thinking:
            self._write(piece)
        for seg in self._split.push(piece):
            self._segment(*seg)

    def _write(self, text: str) -> None:
        """Plain text to the reply's stream as it comes. Its reader gone: on stdout the
        BrokenPipeError ends the command (the reader chose to stop); on stderr (``--json``
        streams the reply there) the console goes quiet (``StderrConsole``) and the reply goes
        on, for the object on stdout."""
        if self.text.quiet:
            return
        try:
            self.text.file.write(text)
            self.text.file.flush()
        except BrokenPipeError:
            if not isinstance(self.text, StderrConsole):
                raise
            self.text.on_broken_pipe()

    def _segment(self, thinking: bool, text: str) -> None:
        self._parts[thinking].append(text)
        if thinking and self.hide_thinking:
            return
        if not self.pretty:
            if self.hide_thinking:
                self._write(text)
            return
        if self._last_kind != thinking:  # a new section: drop its leading blank lines
            text = text.lstrip("\n")
            if not text:
                return
            if self._last_kind is not None:
                self._shown.rstrip()
                self._shown.append("\n\n")
            self._last_kind = thinking
        self._shown.append(text, style="dim italic" if thinking else None)

    # ---------------------------------------------------------------- live status

    def _live(self):
        if self.pretty:
            target, body = self.text, _Tail(self)
        elif self.status.is_terminal:
            target, body = self.status, _Status(self)
        else:
            return _NoLive()
        return Live(body, console=target, refresh_per_second=8, transient=True)

    def status_line(self) -> Text:
        stats = self.session.stats
        if stats is None or stats is self._prev_stats:
            return Text("starting ...", style="dim")
        if stats.new_tokens == 0:
            return Text(f"prefilling {counted(stats.prompt_tokens - stats.reused_tokens, 'token')} "
                        f"({stats.reused_tokens:,} reused) · "
                        f"{time.perf_counter() - self._t0:.1f} s", style="dim")
        line = f"{counted(stats.new_tokens, 'token')} · {stats.decode_tokens_per_s:.1f} tok/s"
        ceiling = self.engine.ceiling_tokens_per_s(self.session.num_cached)
        if ceiling:
            line += f" (ceiling {ceiling:.0f} tok/s)"
        return Text(line, style="dim")


def _prefill(gen, bar: PrefillBar | None) -> tuple[list[int], bool]:
    """With a bar: run ``gen`` to its first token while the bar shows the prefill, then remove
    the bar. Returns ``(the first token, or none if the reply ended first; interrupted)``; a
    Ctrl-C closes ``gen`` (the engine keeps the session consistent). Without: ``([], False)``."""
    if bar is None:
        return [], False
    try:
        with bar:
            return [next(gen)], False
    except StopIteration:
        return [], False
    except KeyboardInterrupt:
        gen.close()
        return [], True
    except BaseException:
        gen.close()
        raise


class _NoLive:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Status:
    def __init__(self, view: ReplyView):
        self.view = view

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.view.status_line()


class _Tail:
    """The last lines of the reply that fit the terminal, then the status line."""

    def __init__(self, view: ReplyView):
        self.view = view

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        rows = max(1, console.size.height - 2)
        shown = self.view._shown
        tail = shown[max(0, len(shown) - rows * options.max_width):]  # enough text for the rows
        lines = tail.wrap(console, options.max_width)
        if len(lines):
            yield Text("\n").join(lines[-rows:])
        yield self.view.status_line()
