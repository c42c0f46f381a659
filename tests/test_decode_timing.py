"""The decode loop's timing (``GenerationStats.ttft_s``, ``decode_s``): on a device that runs a
step as it is launched (the CPU), the step launched ahead of the tokens' read must not count in
the time to the first token, nor be missing from the decode time. A fake clock that advances one
second per model forward makes the accounting exact."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from mock_engine import GREEDY, SumModel, mock_engine, prompt_of

import infer.decode_loop as decode_loop


class TickingModel(SumModel):
    """The SumModel, with one tick of ``clock`` per forward (prefill chunk or decode step)."""

    def __init__(self, clock: list[float]):
        super().__init__()
        self.clock = clock

    def forward(self, *args):
        self.clock[0] += 1.0
        return super().forward(*args)


@pytest.mark.parametrize("new_tokens", [2, 4, 9])
def test_decode_time_counts_every_step_after_the_first_token(monkeypatch, new_tokens):
    clock = [0.0]
    monkeypatch.setattr(decode_loop, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    eng = mock_engine(model=TickingModel(clock))
    s = eng.new_session()
    out = list(s.generate(prompt_of(20), GREEDY.replace(max_new_tokens=new_tokens)))
    assert len(out) == new_tokens
    # one forward per token after the first: new_tokens - 1 steps, one second each
    assert s.stats.decode_s == pytest.approx(new_tokens - 1)
    assert s.stats.decode_tokens_per_s == pytest.approx(1.0)
