"""infer.ui.render: the <think> splitter, the terminal and piped views of a reply, stats line."""

from __future__ import annotations

import io
import random
import re

import pytest
from rich.console import Console

from infer.engine import GenerationStats
from infer.ui.render import ReplyView, ThinkSplitter, ceiling_tokens_per_s, format_stats

REPLY = "<think>\nLet me think about <thin cats.\n</think>\n\nCats sleep a lot. </thi"


def split_all(pieces: list[str]) -> tuple[str, str]:
    s = ThinkSplitter()
    segs = [seg for p in pieces for seg in s.push(p)] + s.flush()
    return ("".join(t for thinking, t in segs if thinking),
            "".join(t for thinking, t in segs if not thinking))


def test_think_splitter_whole_and_cut_anywhere():
    expected = ("\nLet me think about <thin cats.\n", "\n\nCats sleep a lot. </thi")
    assert split_all([REPLY]) == expected
    assert split_all(list(REPLY)) == expected  # one character at a time
    rng = random.Random(0)
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(REPLY)), 6))
        pieces = [REPLY[a:b] for a, b in zip([0, *cuts], [*cuts, len(REPLY)], strict=True)]
        assert split_all(pieces) == expected


def test_think_splitter_without_tags_and_held_back_prefix():
    s = ThinkSplitter()
    assert s.push("plain answer <") == [(False, "plain answer ")]  # "<" may start a tag
    assert s.push("b>bold") == [(False, "<b>bold")]
    assert s.flush() == []


class FakeDecoder:
    def __init__(self, table):
        self.table = table

    def push(self, tok):
        return self.table[tok]

    def flush(self):
        return ""


class FakeEngine:
    def __init__(self, pieces, ceiling=None):
        self.tokenizer = type("T", (), {"stream_decoder": lambda _self: FakeDecoder(pieces)})()
        if ceiling is not None:
            self.ceiling_tokens_per_s = lambda num_cached: ceiling


class FakeSession:
    def __init__(self, n):
        self.n, self.stats, self.num_cached = n, None, 0

    def generate(self, ids, sampling):
        def gen():
            self.stats = GenerationStats(prompt_tokens=len(ids), ttft_s=0.5)
            try:
                for i in range(self.n):
                    self.stats.new_tokens += 1
                    self.stats.decode_s = 0.1 * i
                    self.num_cached = len(ids) + i
                    yield i
                self.stats.stop_reason = "stop"
            finally:
                self.stats.stop_reason = self.stats.stop_reason or "interrupted"
        return gen()


PIECES = ["<think>", "\nhmm", " cats", "\n</think>", "\n\n", "Cats", " purr."]


def run_view(terminal: bool, hide: bool = False, ceiling=None):
    text = Console(file=io.StringIO(), force_terminal=terminal, width=40, height=8,
                   color_system="standard" if terminal else None)
    status = Console(file=io.StringIO(), force_terminal=False)
    engine, session = FakeEngine(PIECES, ceiling), FakeSession(len(PIECES))
    reply = ReplyView(text, status, engine, session, hide_thinking=hide).run([1, 2, 3], None)
    return reply, text.file.getvalue()


def test_piped_output_is_verbatim():
    reply, out = run_view(terminal=False)
    assert out == "".join(PIECES) + "\n"
    assert reply.raw == "".join(PIECES)
    assert reply.answer == "Cats purr." and reply.thinking == "hmm cats"
    assert reply.stats.new_tokens == len(PIECES) and not reply.interrupted
    _, hidden = run_view(terminal=False, hide=True)
    assert hidden.strip() == "Cats purr." and "hmm" not in hidden


def test_terminal_output_dims_thinking_or_hides_it():
    _, out = run_view(terminal=True)
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out)
    assert plain.endswith("hmm cats\n\nCats purr.\n")  # the whole reply, printed last
    assert "<think>" not in plain
    assert "\x1b[2;3mhmm" in out  # thinking in dim italic
    _, hidden = run_view(terminal=True, hide=True)
    assert "hmm" not in hidden and "Cats purr." in hidden


def test_ctrl_c_ends_the_reply_only():
    class Interrupting(FakeDecoder):
        def push(self, tok):
            if tok == 3:
                raise KeyboardInterrupt
            return super().push(tok)

    engine, session = FakeEngine(PIECES), FakeSession(len(PIECES))
    engine.tokenizer.stream_decoder = lambda: Interrupting(PIECES)
    text = Console(file=io.StringIO())
    reply = ReplyView(text, text, engine, session).run([1], None)
    assert reply.interrupted and reply.stats.stop_reason == "interrupted"
    assert reply.raw == "".join(PIECES[:3])


@pytest.mark.parametrize("ceiling", [None, 200.0])
def test_stats_line_and_ceiling_hook(ceiling):
    reply, _ = run_view(terminal=False, ceiling=ceiling)
    assert reply.ceiling == ceiling
    assert ceiling_tokens_per_s(FakeEngine(PIECES, ceiling), 10) == ceiling
    stats = GenerationStats(prompt_tokens=1234, reused_tokens=1200, new_tokens=11, ttft_s=0.25,
                            decode_s=2.0, stop_reason="stop")
    line = format_stats(stats, ceiling=ceiling, chat=True)
    for part in ("prompt 1,234 tokens (1,200 reused)", "11 new tokens", "first token 0.25 s",
                 "5.0 tok/s decode", "stop: stop"):
        assert part in line
    assert ("ceiling 200, 2%" in line) == (ceiling is not None)
    assert "reused" not in format_stats(stats)


def test_stats_line_when_interrupted_during_prefill():
    stats = GenerationStats(prompt_tokens=5000, reused_tokens=100, stop_reason="interrupted")
    for chat in (False, True):
        line = format_stats(stats, ceiling=200.0, chat=chat)
        assert "prompt 5,000 tokens" in line and "interrupted during prefill" in line
        assert "first token" not in line and "tok/s" not in line
    stats.new_tokens, stats.ttft_s = 1, 0.5  # one token came: the usual line
    assert "first token 0.50 s" in format_stats(stats)
