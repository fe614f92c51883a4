"""A KV trend over a window of many samples (a tick much shorter than the window) is fitted from at most
MAX_TREND_POINTS of them, every k-th back from the latest: `kvpilot detect --interval-s 0.05` put 1,200 points
(720,000 pairwise slopes) in every replica's 60 s window each tick and did not finish in 5 minutes. Windows of the
usual size are fitted from every sample, as before."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.samples import ReplicaSample
from detectors import kv_exhaustion
from detectors.kv_trend import MAX_TREND_POINTS, fit_trend


def _samples(values: list[float], every_s: float) -> list[ReplicaSample]:
    return [
        ReplicaSample("ns", "d", "r", "n", "vllm", None, timestamp=1000.0 + i * every_s, kv_usage=v)
        for i, v in enumerate(values)
    ]


def _theil_sen(pts: list[tuple[float, float]]) -> tuple[float, float]:
    slope = statistics.median((v2 - v1) / (t2 - t1) for i, (t1, v1) in enumerate(pts) for t2, v2 in pts[i + 1 :])
    return slope, statistics.median(v + slope * (pts[-1][0] - t) for t, v in pts)


usage = st.floats(min_value=0.01, max_value=0.99, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(usage, min_size=3, max_size=MAX_TREND_POINTS))
def test_a_window_of_usual_size_is_fitted_from_every_sample(values: list[float]) -> None:
    history = _samples(values, 5.0)
    got = fit_trend(history, window_s=1e9, min_samples=3)
    assert got is not None
    want = _theil_sen([(s.timestamp, s.kv_usage) for s in history])  # type: ignore[misc]
    assert math.isclose(got[0], want[0], abs_tol=1e-12)
    assert math.isclose(got[1], want[1], abs_tol=1e-12)


@settings(max_examples=50, deadline=None)
@given(st.lists(usage, min_size=MAX_TREND_POINTS + 1, max_size=1500))
def test_a_window_of_many_samples_is_fitted_from_every_kth_back_from_the_latest(values: list[float]) -> None:
    history = _samples(values, 0.05)
    got = fit_trend(history, window_s=1e9, min_samples=3)
    assert got is not None
    step = math.ceil(len(values) / MAX_TREND_POINTS)
    kept = [(s.timestamp, s.kv_usage) for s in history][::-step][::-1]
    assert len(kept) <= MAX_TREND_POINTS
    assert kept[-1][0] == history[-1].timestamp
    want = _theil_sen(kept)  # type: ignore[arg-type]
    assert math.isclose(got[0], want[0], abs_tol=1e-12)
    assert math.isclose(got[1], want[1], abs_tol=1e-12)


@pytest.fixture
def medians(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many values each Theil-Sen median (both fits call statistics.median) was taken over."""
    seen: list[int] = []
    median = statistics.median

    def counting(data: Iterable[float]) -> float:
        values = list(data)
        seen.append(len(values))
        return median(values)

    monkeypatch.setattr(statistics, "median", counting)
    return seen


def test_a_60s_window_at_a_50ms_tick_reads_a_ramp_right_from_at_most_the_cap(medians: list[int]) -> None:
    ramp = [0.2 + 0.001 * i * 0.05 for i in range(1200)]  # 0.001 a second for 60 s at 50 ms
    got = fit_trend(_samples(ramp, 0.05), window_s=60.0, min_samples=3)
    assert got is not None
    assert math.isclose(got[0], 0.001, rel_tol=1e-9)
    assert math.isclose(got[1], ramp[-1], rel_tol=1e-9)
    assert max(medians) <= MAX_TREND_POINTS * (MAX_TREND_POINTS - 1) // 2  # was 1200 * 1199 / 2 = 719,400 slopes


def test_the_arrival_rates_slope_of_a_short_tick_reads_at_most_the_cap(medians: list[int]) -> None:
    rates = [(1000.0 + i * 0.05, 2.0 + 0.01 * i * 0.05) for i in range(1200)]
    slope = kv_exhaustion._theil_sen_slope(rates, 3)
    assert slope is not None
    assert math.isclose(slope, 0.01, rel_tol=1e-9)
    assert max(medians) <= MAX_TREND_POINTS * (MAX_TREND_POINTS - 1) // 2
