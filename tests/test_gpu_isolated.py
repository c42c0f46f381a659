"""``tests/gpu_isolated.py``: a check run in its own process fails its test on an error or a hang,
and passes otherwise."""

from __future__ import annotations

import time

import pytest
from gpu_isolated import run_isolated


def _ok(a, b):
    assert a + b == 3


def _raises():
    raise AssertionError("the child's own message")


def _sleeps():
    time.sleep(30)


def test_a_passing_check_passes():
    run_isolated(__file__, "_ok", 1, 2)


def test_a_failing_check_fails_with_its_message():
    with pytest.raises(pytest.fail.Exception, match="the child's own message"):
        run_isolated(__file__, "_raises")


def test_a_hung_check_is_killed():
    start = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="did not finish in 2 s"):
        run_isolated(__file__, "_sleeps", timeout=2)
    assert time.monotonic() - start < 20
