"""The stats line printed on stderr after each reply: its wording, one home for ``generate``,
``summarize`` (``infer/ui/oneshot.py``) and ``chat`` (``infer/ui/repl.py``).

``format_stats`` words a reply's ``GenerationStats`` (prompt and new tokens, time to first token,
decode tokens/s against the ceiling, drafts accepted, why it stopped); ``capture_note`` the CUDA
graph capture time since the last line. The live status line during a reply is
``infer.ui.render.ReplyView.status_line``; ``--json`` prints the numbers instead
(``infer/ui/records.py``). No tensor math here.
"""

from __future__ import annotations

from infer.wording import counted


def format_stats(stats, ceiling: float | None = None, chat: bool = False) -> str:
    """One line: prompt tokens (reused, in a chat), new tokens, time to first token, decode
    tokens/s (and the ceiling when known), why it stopped. ``stats``: ``GenerationStats``.
    A reply stopped before its first token says "interrupted during prefill" instead, with the
    prompt tokens whose K/V were stored by then."""
    reused = f" ({stats.reused_tokens:,} reused)" if chat else ""
    prompt = f"prompt {counted(stats.prompt_tokens, 'token')}{reused}"
    if stats.new_tokens == 0 and stats.stop_reason == "interrupted":
        return f"{prompt} · interrupted during prefill ({stats.prefill_tokens:,} stored)"
    tps = f" · {stats.decode_tokens_per_s:.1f} tok/s decode"
    if ceiling:
        tps += f" (ceiling {ceiling:.0f}, {100 * stats.decode_tokens_per_s / ceiling:.0f}%)"
    if stats.new_tokens < 2:  # no decode rate after the first token
        tps = ""
    new = counted(stats.new_tokens, "new token")
    return (f"{prompt} · {new} · "
            f"first token {stats.ttft_s:.2f} s{tps}{speculation_note(stats)} · "
            f"stop: {stats.stop_reason}")


def capture_note(seconds: float) -> str:
    """`` · CUDA graphs captured in S s`` when ``seconds`` (``Engine.take_capture_s``: the
    capture time since the last stats line) is at least 5 ms, else ""."""
    return f" · CUDA graphs captured in {seconds:.2f} s" if seconds >= 0.005 else ""


def speculation_note(stats) -> str:
    """`` · drafts: A of D accepted, M per verify step`` when the reply drafted, else ""."""
    if not stats.drafted:
        return ""
    return (f" · drafts: {stats.accepted:,} of {stats.drafted:,} accepted, "
            f"{stats.mean_accepted:.1f} per verify step")
