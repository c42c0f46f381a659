"""The prefill runs ahead of the device (``Session._prefill``): the decode step's capture
(``on_enqueued``) comes once ``CAPTURE_AHEAD_TOKENS`` prompt tokens are enqueued and before the
host waits for any chunk, then at most one chunk stays in flight beyond the one reported; the
progress callback hears of each chunk in order, after it completed; metadata copies do not make
the host wait (``meta.to_device``: pinned, non-blocking on CUDA). CPU: the chunk events are
fakes that log when they are recorded and waited for."""

from __future__ import annotations

import pytest
import torch
from mock_engine import GREEDY, expected, mock_engine, prompt_of

import infer.session as session_mod
from infer.meta import to_device


class FakeEvent:
    def __init__(self, log: list, n: int):
        self.log, self.n = log, n
        log.append(("enqueued", n))

    def synchronize(self):
        self.log.append(("waited", self.n))


@pytest.fixture
def log(monkeypatch):
    events: list = []
    count = iter(range(1, 10_000))
    monkeypatch.setattr(session_mod, "chunk_event", lambda device: FakeEvent(events, next(count)))
    monkeypatch.setattr(session_mod, "CAPTURE_AHEAD_TOKENS", 64)
    return events


def _prefill(n_prompt: int, log, progress: bool = True, capture: bool = True):
    eng = mock_engine(ctx=1024, chunk=16)
    s = eng.new_session()
    on_prefill = (lambda done, total: log.append(("reported", done))) if progress else None
    on_enqueued = (lambda: log.append(("captured",))) if capture else None
    hidden, _ = s._prefill(prompt_of(n_prompt), on_prefill, on_enqueued)
    return s, hidden


def _in_flight_at_each_chunk_after_capture(log) -> list[int]:
    """Per chunk enqueued after the capture, the chunks in flight with it (enqueued, not yet
    waited for)."""
    at = log.index(("captured",))
    enqueued = waited = 0
    out = []
    for k, e in enumerate(log):
        enqueued += e[0] == "enqueued"
        waited += e[0] == "waited"
        if k > at and e[0] == "enqueued":
            out.append(enqueued - waited)
    return out


def test_capture_after_the_ahead_tokens_and_before_any_wait(log):
    _prefill(160, log)  # 10 chunks of 16; the capture after 4 (64 tokens)
    at = log.index(("captured",))
    assert log[:at] == [("reported", 0)] + [("enqueued", i) for i in range(1, 5)]
    assert _in_flight_at_each_chunk_after_capture(log) == [2] * 6


def test_every_chunk_reported_in_order_after_it_completed(log):
    _prefill(150, log)  # 9 full chunks and a tail of 6
    reported = [e[1] for e in log if e[0] == "reported"]
    assert reported == [0] + [min(16 * i, 150) for i in range(1, 11)]
    for i in range(1, 11):  # chunk i is reported only once its event was waited for
        assert log.index(("waited", i)) < log.index(("reported", min(16 * i, 150)))


def test_a_short_prompt_captures_after_its_last_chunk(log):
    _prefill(40, log)  # 3 chunks, fewer than the ahead tokens
    at = log.index(("captured",))
    assert [e for e in log[:at] if e[0] == "enqueued"] == [("enqueued", i) for i in (1, 2, 3)]
    assert not any(e[0] == "waited" for e in log[:at])
    assert log[-1] == ("reported", 40)


def test_without_a_capture_one_chunk_stays_in_flight(log):
    _prefill(160, log, progress=False, capture=False)
    enqueued = waited = most = 0
    for e in log:
        enqueued += e[0] == "enqueued"
        waited += e[0] == "waited"
        most = max(most, enqueued - waited)
    assert most == 2 and enqueued == 10  # the chunk just enqueued and the one before


def test_the_prefill_still_gives_the_same_reply(log):
    prompt = prompt_of(150)
    eng = mock_engine(ctx=1024, chunk=16)
    got = list(eng.new_session().generate(prompt, GREEDY.replace(max_new_tokens=20)))
    assert got == expected(prompt, 20)


def test_to_device_values_and_dtype():
    t = to_device([3, 1, 2], torch.int32, "cpu")
    assert t.dtype == torch.int32 and t.tolist() == [3, 1, 2]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_to_device_does_not_wait_for_the_stream():
    """Copies enqueued behind a long queue of kernels return at once (an event recorded before
    them is still pending) and still land in stream order, each with its own values (the pinned
    blocks are not reused before their copies have read them)."""
    x = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    for _ in range(40):
        x = x @ x / 64  # a queue of work the copies must not wait for
    before = torch.cuda.Event()
    before.record()
    got = [to_device(list(range(i, i + 1000)), torch.int64, "cuda") for i in range(50)]
    assert not before.query()  # the host got here while the queued matmuls still ran
    for i, t in enumerate(got):
        assert t.tolist() == list(range(i, i + 1000))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_page_table_rows_load_behind_queued_work():
    from infer.step_buffers import PageTableRows

    table = torch.zeros(4, 64, dtype=torch.int32, device="cuda")
    rows = PageTableRows(table)
    x = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    for _ in range(40):
        x = x @ x / 64
    lists = [list(range(10 * r + 1, 10 * r + 1 + 5 + r)) for r in range(4)]
    for r, pages in enumerate(lists):
        rows.load(r, pages)  # a whole row: the pinned copy
    lists[2].append(99)  # a page appended: the single-entry fill
    rows.load(2, lists[2])
    for r, pages in enumerate(lists):
        assert table[r, :len(pages)].tolist() == pages
