"""Where a profiled decode step's GPU sits idle: the gaps between kernels, by their neighbours.

``benchmarks/profile_decode.py`` reports ``gap_us``, the step's wall time minus its GPU busy
time. This names where that idle time lies: over the profiled kernels' timeline (overlapping
kernels merged, as a PDL chain overlaps them), every idle interval between the end of one busy
stretch and the start of the next is charged to the pair (the kernel that ended the stretch, the
kernel that starts the next). Pairs are summed over the steps and divided by their number, so a
boundary that occurs once a step shows its mean gap and a boundary inside every layer shows the
layers' sum. The first kernel of the profile has no gap before it.
"""

from __future__ import annotations


def idle_gaps(events: list, steps: int, top: int = 8) -> list[dict]:
    """The ``top`` largest idle sums by neighbouring kernels.

    Args:
        events: profiler kernel events, each with ``name`` and ``time_range.start`` /
            ``time_range.end`` (microseconds), in any order.
        steps: the number of steps the events cover (>= 1).
        top: how many pairs to return.

    Returns:
        ``[{"before", "after", "us_per_step", "per_step"}]``, the largest ``us_per_step``
        first: the idle time a step spends between a stretch ended by ``before`` and one begun
        by ``after``, and how many such gaps a step has.

    Raises:
        ValueError: ``steps`` < 1.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    spans = sorted((e.time_range.start, e.time_range.end, e.name) for e in events)
    sums: dict[tuple[str, str], list[float]] = {}
    end, last = None, None  # the current busy stretch's end and the kernel that reached it
    for start, stop, name in spans:
        if end is not None and start > end:
            sums.setdefault((last, name), []).append(start - end)
        if end is None or stop > end:
            end, last = stop, name
    out = [{"before": before, "after": after, "us_per_step": round(sum(gaps) / steps, 2),
            "per_step": round(len(gaps) / steps, 2)} for (before, after), gaps in sums.items()]
    return sorted(out, key=lambda g: -g["us_per_step"])[:top]
