"""infer.ui.render: the <think> splitter, the terminal and piped views of a reply; the stats line
(infer.ui.stats_line)."""

from __future__ import annotations

import io
import random
import re

import pytest
from rich.console import Console

from infer.engine import GenerationStats
from infer.ui.render import ReplyView, ThinkSplitter
from infer.ui.stats_line import format_stats

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
        self.tokenizer = type("T", (), {  # a prompt that does not open the thinking
            "stream_decoder": lambda _self: FakeDecoder(pieces),
            "decode": lambda _self, ids, skip_special_tokens=False: "<|im_start|>assistant\n"})()
        self.ceiling_tokens_per_s = lambda num_cached: ceiling  # None: unknown (a CPU)


class FakeSession:
    """Yields ``n`` tokens; with ``on_prefill``, reports chunks of ``chunk`` prompt tokens first
    and raises KeyboardInterrupt in the report after ``ctrl_c_at`` chunks (if given)."""

    def __init__(self, n, chunk=1024, ctrl_c_at=None):
        self.n, self.stats, self.num_cached = n, None, 0
        self.chunk, self.ctrl_c_at, self.on_prefill = chunk, ctrl_c_at, None

    def generate(self, ids, sampling, **kw):
        self.on_prefill = kw.pop("on_prefill", None)
        self.speculate = kw.pop("speculate")  # the view always says whether to speculate
        assert not kw

        def gen():
            self.stats = GenerationStats(prompt_tokens=len(ids), ttft_s=0.5)
            try:
                if self.on_prefill is not None:
                    self.on_prefill(0, len(ids))
                    for k, done in enumerate(range(self.chunk, len(ids) + self.chunk,
                                                   self.chunk), start=1):
                        if k == self.ctrl_c_at:
                            raise KeyboardInterrupt
                        self.num_cached = self.stats.prefill_tokens = min(done, len(ids))
                        self.on_prefill(self.num_cached, len(ids))
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
def test_stats_line_and_ceiling(ceiling):
    reply, _ = run_view(terminal=False, ceiling=ceiling)
    assert reply.ceiling == ceiling
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


# ---------------------------------------------------------------------------- prefill progress


def run_prefill(n_prompt: int, stderr_terminal: bool, ctrl_c_at=None, text_terminal=False):
    text = Console(file=io.StringIO(), force_terminal=text_terminal, width=100, height=8)
    status = Console(file=io.StringIO(), force_terminal=stderr_terminal, width=100)
    engine, session = FakeEngine(PIECES), FakeSession(len(PIECES), ctrl_c_at=ctrl_c_at)
    reply = ReplyView(text, status, engine, session).run(list(range(n_prompt)), None)
    return reply, session, status.file.getvalue(), text.file.getvalue()


@pytest.mark.parametrize("text_terminal", [False, True])
def test_long_prefill_on_a_terminal_shows_the_bar(text_terminal):
    reply, session, err, out = run_prefill(10_000, True, text_terminal=text_terminal)
    assert session.on_prefill is not None
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", err)
    assert "prefill" in plain and "of 10,000 tokens" in plain and "tok/s" in plain
    assert "10,000 of 10,000 tokens" in plain  # updated after each chunk, to the end
    assert reply.answer == "Cats purr." and not reply.interrupted
    if not text_terminal:
        assert out == "".join(PIECES) + "\n"  # the reply itself is untouched


@pytest.mark.parametrize("n_prompt,terminal", [(10_000, False), (4096, True), (100, True)])
def test_no_bar_for_pipes_or_short_prompts(n_prompt, terminal):
    reply, session, err, _ = run_prefill(n_prompt, terminal)
    assert session.on_prefill is None  # no callback: no bar
    assert f"of {n_prompt:,} tokens" not in err and "Ctrl-C stops" not in err
    assert reply.answer == "Cats purr."


def test_bar_waits_for_the_exact_total():
    from infer.ui.progress import PrefillBar

    status = Console(file=io.StringIO(), force_terminal=True)
    bar = PrefillBar(status)
    bar(0, 4096)  # most of a long prompt was reused: no bar
    bar(4096, 4096)
    bar.close()
    assert not bar.shown and status.file.getvalue() == ""
    piped = PrefillBar(Console(file=io.StringIO(), force_terminal=False))
    piped(0, 100_000)
    assert not piped.shown


def test_ctrl_c_during_a_long_prefill_ends_the_reply():
    reply, session, err, out = run_prefill(10_000, True, ctrl_c_at=3)
    assert reply.interrupted and reply.stats.stop_reason == "interrupted"
    assert reply.raw == "" and reply.stats.new_tokens == 0 and out == ""
    assert session.num_cached == 2048  # the chunks that completed
    assert "2,048 of 10,000 tokens" in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", err)
    assert format_stats(reply.stats).endswith("interrupted during prefill (2,048 stored)")


def test_stats_line_gives_the_drafts_when_the_reply_speculated():
    stats = GenerationStats(prompt_tokens=900, new_tokens=64, ttft_s=0.2, decode_s=1.0,
                            stop_reason="length")
    assert "drafts" not in format_stats(stats)
    stats.drafted, stats.accepted, stats.verify_steps = 120, 90, 20
    line = format_stats(stats)
    assert "drafts: 90 of 120 accepted, 4.5 per verify step" in line
    assert line.endswith("stop: length")
    d = stats.to_dict()
    assert (d["drafted"], d["accepted"], d["mean_accepted"]) == (120, 90, 4.5)


def test_stats_line_of_a_one_token_reply_has_no_rate():
    stats = GenerationStats(prompt_tokens=8, new_tokens=1, ttft_s=0.1, stop_reason="length")
    line = format_stats(stats, ceiling=200.0)
    assert "1 new token ·" in line and "tok/s" not in line and "ceiling" not in line


def test_a_count_of_one_reads_singular_in_the_stats_and_status_lines():
    stats = GenerationStats(prompt_tokens=1, new_tokens=1, ttft_s=0.1, stop_reason="length")
    assert format_stats(stats, chat=True).startswith("prompt 1 token (0 reused) · 1 new token ·")
    stats.new_tokens, stats.stop_reason = 0, "interrupted"
    assert format_stats(stats) == "prompt 1 token · interrupted during prefill (0 stored)"
    session = FakeSession(1)
    view = ReplyView(Console(file=io.StringIO()), Console(file=io.StringIO()), FakeEngine(PIECES),
                     session)
    session.stats = GenerationStats(prompt_tokens=5, reused_tokens=4)  # a chat turn's prefill
    assert view.status_line().plain.startswith("prefilling 1 token (4 reused) · ")
    session.stats.new_tokens = 1
    assert view.status_line().plain.startswith("1 token · ")
    session.stats.new_tokens = 1234
    assert view.status_line().plain.startswith("1,234 tokens · ")
