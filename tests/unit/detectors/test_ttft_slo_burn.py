"""ttft_slo_burn: multi-window burn rate from TTFT histograms against the configured SLO."""

from __future__ import annotations

import pytest

from detectors import ttft_slo_burn
from detectors.thresholds import DEFAULT, BurnWindow, Thresholds, TtftSlo
from tests.unit.detectors.detector_fleet import TICK_S, drive, replica, ttft

TICKS = 720  # one hour


def _run(slow_share_of_tick: list[float], per_tick: float = 20.0, restart_at: int | None = None):
    fast = slow = 0.0

    def tick(i: int, t: float):
        nonlocal fast, slow
        if restart_at is not None and i == restart_at:
            fast = slow = 0.0  # the engine restarted: its histogram starts again from zero
        share = slow_share_of_tick[i]
        fast += per_tick * (1 - share)
        slow += per_tick * share
        return [replica("r0", t, ttft=ttft(fast, slow))], []

    return drive(tick, len(slow_share_of_tick)), (len(slow_share_of_tick) - 1) * TICK_S


CASES = [
    # healthy: 0.5 % slow against a 1 % budget -> burn 0.5, silent
    ([0.005] * TICKS, None),
    # a full hour at 20 % slow: burn 20 in both 1 h and 5 min windows -> critical (page)
    ([0.20] * TICKS, "critical"),
    # an hour at 8 % slow: burn 8 > 6 in the 30 min / 2.5 min pair only -> warning (ticket)
    ([0.08] * TICKS, "warning"),
    # a burst that ended 10 minutes ago: the long window still burns, the short one recovered -> silent
    ([0.005] * 500 + [0.9] * 100 + [0.0] * 120, None),
    # a burst that just began: the short window burns, the long one is still within budget -> silent
    ([0.005] * 700 + [0.9] * 20, None),
]


@pytest.mark.parametrize(("shares", "severity"), CASES)
def test_burn_cases(shares, severity):
    state, now = _run(shares)
    found = ttft_slo_burn.detect(state, thresholds=DEFAULT, now=now)
    assert [str(f.severity) for f in found] == ([severity] if severity else [])


def test_engine_restart_does_not_hide_or_invent_burn():
    # A counter reset mid-window counts the post-reset histogram as new: still critical, never negative.
    state, now = _run([0.2] * TICKS, restart_at=600)
    (f,) = ttft_slo_burn.detect(state, thresholds=DEFAULT, now=now)
    assert str(f.severity) == "critical"
    assert f.evidence["burn_300s"] == pytest.approx(20, rel=0.05)


def test_too_little_traffic_is_silent():
    # Below min_requests in the short window the share is noise.
    th = Thresholds(ttft=TtftSlo(min_requests=1e6))
    state, now = _run([0.5] * 100)
    assert ttft_slo_burn.detect(state, thresholds=th, now=now) == []


def test_slow_share_uses_the_bucket_at_or_above_the_target():
    # Target 0.7 s falls between the 0.5 and 1.0 bounds: the 1.0 bucket is the "within" count.
    h = ttft(fast=90, slow=10)
    assert ttft_slo_burn.slow_share(h, 0.7) == (pytest.approx(0.1), 100)
    assert ttft_slo_burn.slow_share(h, 100.0) == (0.0, 100)  # beyond every finite bound: nothing provably slow
    assert ttft_slo_burn.slow_share(None, 1.0) is None


def test_custom_windows_are_honoured():
    # A single custom pair with a low factor fires as warning on a mild burn.
    th = Thresholds(ttft=TtftSlo(windows=(BurnWindow(long_s=600, short_s=60, factor=2, severity="warning"),)))
    state, now = _run([0.03] * 200)
    (f,) = ttft_slo_burn.detect(state, thresholds=th, now=now)
    assert str(f.severity) == "warning"
