"""The prefill progress bar: prompt tokens done of total, tokens/s and time left, on stderr.

A long prompt takes seconds to prefill before the first token (about 2.4 s for 32k tokens of
Qwen3-8B on an H200; minutes on a CPU), so above ``MIN_TOKENS`` prompt tokens to prefill a rich
``Progress`` bar shows how far it is. Only on a terminal: piped or redirected stderr gets nothing.

``PrefillBar`` is the ``on_prefill(done, total)`` callback of ``Session.generate``. The engine calls
it once with ``done = 0`` before the first chunk, then after each chunk has completed on the device
(the prefill keeps about one chunk in flight with or without it: ``Session._prefill``); callers
pass it only when ``PrefillBar.wanted`` says the bar can be shown (a terminal, and a rough count
of the tokens to prefill above ``MIN_TOKENS``). The bar
starts on the first call if the exact ``total`` is above ``MIN_TOKENS`` and is transient: ``close``
(or leaving its ``with`` block) removes it, so the reply's own live view (``infer/ui/render.py``)
starts on a clean line after it. The bar never shares the screen with that view.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeRemainingColumn
from rich.text import Text

MIN_TOKENS = 4096  # prompt tokens to prefill above which the bar is shown


class _Rate(ProgressColumn):
    """Prefill tokens per second, from rich's estimate over the recent updates."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f} tok/s" if speed else "- tok/s", style="dim")


class PrefillBar:
    """``on_prefill(done, total)`` for ``Session.generate``: a transient progress bar on
    ``console`` (the stderr console) while more than ``min_tokens`` prompt tokens prefill.

    Args:
        console: where to draw; nothing is drawn unless it is a terminal.
        min_tokens: the bar is shown only when ``total`` exceeds this.

    Attributes:
        shown: whether the bar was started (the first call's ``total`` exceeded ``min_tokens``).
    """

    def __init__(self, console: Console, min_tokens: int = MIN_TOKENS):
        self.console, self.min_tokens = console, min_tokens
        self.shown = False
        self._progress: Progress | None = None
        self._task = None

    @staticmethod
    def wanted(console: Console, rough_tokens: int, min_tokens: int = MIN_TOKENS) -> bool:
        """Whether to pass a bar to ``generate``: ``console`` is a terminal and about
        ``rough_tokens`` (the prompt minus the cached tokens) will be prefilled."""
        return console.is_terminal and rough_tokens > min_tokens

    def __call__(self, done: int, total: int) -> None:
        if self._progress is None:
            if self.shown or total <= self.min_tokens or not self.console.is_terminal:
                return
            self._progress = Progress(
                TextColumn("[dim]prefill"), BarColumn(),
                TextColumn("{task.completed:,.0f} of {task.total:,.0f} tokens"), _Rate(),
                TimeRemainingColumn(), TextColumn("[dim]Ctrl-C stops"),
                console=self.console, transient=True)
            self._task = self._progress.add_task("prefill", total=total)
            self._progress.start()
            self.shown = True
        self._progress.update(self._task, completed=done, total=total, refresh=True)

    def close(self) -> None:
        """Remove the bar (idempotent; it is not shown again for this reply)."""
        if self._progress is not None:
            progress, self._progress = self._progress, None
            progress.stop()

    def __enter__(self) -> PrefillBar:
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False
