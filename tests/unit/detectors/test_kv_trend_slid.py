"""A replica's KV trend window slid on from tick to tick (``KvTrends``: the slopes of the points that left taken out of
the sorted pairwise slopes, those of the points that came put in) fits exactly what a fresh Theil-Sen fit of the same
window fits, to the bit: histories appended to and cut at the front, times equal or out of order, usages unknown,
impossible, 0.0 and -0.0, windows thinned past MAX_TREND_POINTS; and a history that only moves on costs no new fit
of every pair."""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.samples import ReplicaSample
from detectors import kv_trend
from detectors.kv_trend import MAX_TREND_POINTS, KvTrends, window_trend


def _sample(t: float, usage: float | None, replica: str = "r") -> ReplicaSample:
    return ReplicaSample("ns", "d", replica, "n", "vllm", None, timestamp=t, kv_usage=usage)


_STEPS = st.sampled_from([5.0, 5.0, 5.0, 5.0, 2.5, 0.05, 0.0, -3.0, -20.0, 40.0, 60.0, 1e-9])
_USAGES = st.one_of(
    st.floats(0.0, 1.0),
    st.sampled_from([None, 0.0, -0.0, 1.0, 0.5, 0.25, float("nan"), float("inf"), 1.5, -0.2, 5e-324, -5e-324]),
)


@settings(max_examples=300, deadline=None)
@given(
    ticks=st.lists(
        st.tuples(_STEPS, _USAGES, st.sampled_from([0, 0, 0, 0, 1, 2, 30]), st.booleans(), st.integers(-1, 40)),
        min_size=1,
        max_size=160,
    ),
    window_s=st.sampled_from([60.0, 120.0, 7.5, 1e6]),
    min_samples=st.integers(0, 5),
)
def test_a_window_slid_from_tick_to_tick_fits_what_a_fresh_fit_fits(
    ticks: list[tuple[float, float | None, int, bool, int]], window_s: float, min_samples: int
) -> None:
    trends = KvTrends()
    history: list[ReplicaSample] = []
    t = 1000.0
    for step, usage, cut, twice, replaced in ticks:
        t += step
        history.append(_sample(t, usage))
        del history[:cut]
        if not history:
            continue
        if 0 <= replaced < len(history):  # a sample of the window that is another object (not FleetState's way)
            history[replaced] = _sample(history[replaced].timestamp, 0.123)
        for _ in range(2 if twice else 1):  # asked again in the same tick (the exported projection)
            got = trends.trend(tuple(history), window_s, min_samples)
            assert repr(got) == repr(window_trend(history, window_s, min_samples))


@pytest.mark.parametrize(
    "usages",
    [
        [0.0, -0.0] * 8,  # slopes 0.0 and -0.0: a middle zero keeps the sign a fresh fit gives it
        [-0.0, 0.0, 0.0, -0.0, 0.5, -0.0, 0.0] * 3,
        [0.0] * 14 + [-0.0] * 14,
        [-0.0] * 14 + [0.0] * 14,
        [0.3, 0.3, 0.3, 0.3, 0.31, 0.3, 0.3, 0.29] * 4,  # a median slope of 0.0 among others
    ],
)
def test_zero_slopes_of_either_sign_fit_as_a_fresh_fit(usages: list[float]) -> None:
    trends = KvTrends()
    history = []
    for i, usage in enumerate(usages):
        history.append(_sample(1000.0 + 5.0 * i, usage))
        for window_s in (60.0, 120.0):
            assert repr(trends.trend(history, window_s, 3)) == repr(window_trend(history, window_s, 3))


def test_a_history_that_moves_on_tick_by_tick_is_not_fitted_pair_by_pair_again() -> None:
    trends = KvTrends()

    def usage(i: int) -> float:  # filling, with noise: a slope other than 0 (a zero is fitted afresh)
        return 0.2 + 0.005 * i + 0.01 * (i % 3)

    history = [_sample(1000.0 + 5.0 * i, usage(i)) for i in range(30)]
    asked = []
    with mock.patch.object(kv_trend, "_slopes", wraps=kv_trend._slopes) as every_pair:
        for i in range(30, 60):
            history = [*history[1:], _sample(1000.0 + 5.0 * i, usage(i))]  # a new list each tick
            asked += [(history, window_s, trends.trend(history, window_s, 3)) for window_s in (60.0, 120.0)]
    assert every_pair.call_count == 2  # each window's first tick only
    for seen, window_s, got in asked:
        assert repr(got) == repr(window_trend(seen, window_s, 3))


def test_a_window_past_the_points_a_fit_reads_is_thinned_as_before() -> None:
    trends = KvTrends()
    history = [_sample(1000.0 + 0.5 * i, 0.2 + 0.001 * (i % 11)) for i in range(3 * MAX_TREND_POINTS)]
    for end in range(MAX_TREND_POINTS - 5, len(history)):
        assert repr(trends.trend(history[: end + 1], 60.0, 3)) == repr(window_trend(history[: end + 1], 60.0, 3))


# Histories found by a search against deliberately broken slides (a kept point before the new start left in, a
# start moving back taken as a slide, a sample replaced by another object read as the one before).
@pytest.mark.parametrize(
    "times_and_usages",
    [
        [
            (954.0, 0.8),
            (959.0, 0.1),
            (956.0, 0.56),
            (936.0, 0.64),
            (933.0, 0.87),
            (938.0, 0.72),
            (918.0, 0.49),
            (958.0, 0.33),
            (938.0, 0.22),
        ],
        [(1000.0, 0.2), (1005.0, 0.3), (1010.0, 0.25), (990.0, 0.5), (1015.0, 0.4), (995.0, 0.1), (1030.0, 0.6)],
    ],
)
def test_histories_with_times_out_of_order_fit_as_a_fresh_fit(times_and_usages: list[tuple[float, float]]) -> None:
    for window_s in (30.0, 60.0):
        trends = KvTrends()
        history: list[ReplicaSample] = []
        for t, usage in times_and_usages:
            history.append(_sample(t, usage))
            assert repr(trends.trend(history, window_s, 2)) == repr(window_trend(history, window_s, 2))


def test_a_window_whose_sample_is_another_object_is_fitted_afresh() -> None:
    trends = KvTrends()
    history = [_sample(1000.0 + 5.0 * i, 0.1 + 0.02 * i) for i in range(12)]
    trends.trend(history, 60.0, 2)
    history = [*history[1:6], _sample(history[6].timestamp, 0.9), *history[7:], _sample(1060.0, 0.5)]
    assert repr(trends.trend(history, 60.0, 2)) == repr(window_trend(history, 60.0, 2))
