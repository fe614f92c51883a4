"""Windowed counter rates and histogram deltas (collector.rates), reset-aware like Prometheus' increase()."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.rates import (
    CounterWindow,
    GaugeWindow,
    HistogramWindow,
    counter_points,
    counter_step,
    derivative,
    finite_points,
    histogram_add,
    histogram_increase,
    histogram_quantile,
    histogram_reset,
    histogram_step,
    increase,
    rate,
    ratio,
)
from collector.samples import Histogram

INF = math.inf

INCREASE_CASES = [
    # a plain monotonic counter: last minus first
    ([(0, 10), (5, 15), (10, 30)], 20.0),
    # a restart (value goes down): the post-reset value counts as the increase of that step
    ([(0, 100), (5, 110), (10, 4), (15, 9)], 10 + 4 + 5),
    # a restart straight to 0 adds nothing for that step
    ([(0, 50), (5, 0), (10, 3)], 3.0),
    # two restarts in a row
    ([(0, 7), (5, 2), (10, 1), (15, 6)], 2 + 1 + 5),
    # a flat counter increases by 0 (known zero, not unknown)
    ([(0, 3), (5, 3)], 0.0),
    # one point is not enough to know anything
    ([(0, 3)], None),
    # no points at all
    ([], None),
]


@pytest.mark.parametrize(("points", "expected"), INCREASE_CASES)
def test_increase(points: list[tuple[float, float]], expected: float | None) -> None:
    assert increase(points) == expected


RATE_CASES = [
    # 60 units over 60 s
    ([(0, 0), (30, 20), (60, 60)], 1.0),
    # the rate divides by the time the points span, not by a nominal window (no extrapolation)
    ([(10, 0), (20, 5)], 0.5),
    # identical timestamps: no time elapsed, so no rate
    ([(5, 0), (5, 10)], None),
    # reset within the window still gives a non-negative rate
    ([(0, 1000), (10, 10)], 1.0),
]


@pytest.mark.parametrize(("points", "expected"), RATE_CASES)
def test_rate(points: list[tuple[float, float]], expected: float | None) -> None:
    assert rate(points) == expected


def test_counter_points_drop_negative_values() -> None:
    # a counter is never negative: such a value is garbage, not a reset
    assert counter_points([(0, 5.0), (1, -3.0), (2, 7.0)]) == [(0, 5.0), (2, 7.0)]


def test_finite_points_drops_unknown_and_nan_but_keeps_zero() -> None:
    # None and NaN are "not exported at that scrape"; 0 is a real value and must stay
    pts = finite_points([(0, None), (1, 0.0), (2, math.nan), (3, 4.0), (4, math.inf)])
    assert pts == [(1, 0.0), (3, 4.0)]


@pytest.mark.parametrize(
    ("num", "den", "expected"),
    [
        (5.0, 10.0, 0.5),  # plain ratio
        (0.0, 10.0, 0.0),  # traffic without hits: a real 0
        (0.0, 0.0, None),  # no traffic: no ratio, not 0
        (None, 10.0, None),  # unknown numerator stays unknown
        (5.0, None, None),  # unknown denominator stays unknown
    ],
)
def test_ratio(num: float | None, den: float | None, expected: float | None) -> None:
    assert ratio(num, den) == expected


def test_derivative_of_gauge() -> None:
    # a queue growing from 2 to 12 in 5 s grows at 2/s; fewer than two points: unknown
    assert derivative([(0, 2), (5, 12)]) == 2.0
    assert derivative([(0, 2)]) is None


def test_a_rate_past_floats_range_is_unknown_not_inf() -> None:
    # counters near float's limit (a garbage page) over half a second divide past it: no rate, never inf
    huge = 8.98846567431158e307
    assert rate([(0.0, 0.0), (0.5, huge)]) is None
    assert derivative([(0.0, -huge), (0.5, huge)]) is None
    window, gauge = CounterWindow(), GaugeWindow()
    for t, value in ((0.0, 0.0), (0.5, huge)):
        window.add(t, value)
        gauge.add(t, value)
    assert window.increase_and_rate() == (huge, None)
    assert gauge.derivative() is None
    window.add(2.0, huge)  # over two seconds the same increase is a rate again
    assert window.increase_and_rate() == (huge, huge / 2.0)


def _h(counts: tuple[float, ...], total: float, bounds: tuple[float, ...] = (0.1, 1.0, INF)) -> Histogram:
    return Histogram(bounds=bounds, counts=counts, sum=total, count=counts[-1])


HISTOGRAM_CASES = [
    # plain bucket-wise delta between first and last
    ([_h((1, 2, 3), 1.0), _h((2, 5, 7), 4.0)], _h((1, 3, 4), 3.0)),
    # a restart contributes the post-reset histogram in full
    ([_h((5, 9, 10), 8.0), _h((1, 1, 2), 0.5)], _h((1, 1, 2), 0.5)),
    # a restart mid-window: step 1 is a delta, step 2 the post-reset histogram
    ([_h((1, 1, 1), 0.1), _h((2, 3, 4), 1.0), _h((0, 1, 1), 0.5)], _h((1, 3, 4), 1.4)),
    # bounds changed mid-window (engine upgrade): the window restarts at the change
    (
        [_h((1, 2, 3), 1.0), _h((1, 2, 3, 4), 1.0, (0.1, 0.5, 1.0, INF)), _h((2, 3, 4, 6), 2.0, (0.1, 0.5, 1.0, INF))],
        _h((1, 1, 1, 2), 1.0, (0.1, 0.5, 1.0, INF)),
    ),
    # one histogram: no delta
    ([_h((1, 2, 3), 1.0)], None),
    # a restart seen in one bucket only (the count grew): the later histogram in full, no bucket goes negative
    ([_h((5, 6, 10), 5.0), _h((1, 9, 12), 6.0)], _h((1, 9, 12), 6.0)),
    # buckets disappeared mid-window: the window restarts at the change
    (
        [_h((1, 2, 3, 4), 1.0, (0.1, 0.5, 1.0, INF)), _h((1, 3, 4), 1.0), _h((3, 5, 7), 2.0)],
        _h((2, 2, 3), 1.0),
    ),
    # bounds changed and changed back: only the run since the last change counts
    ([_h((1, 2, 3), 1.0), _h((5, 5), 2.0, (0.5, INF)), _h((1, 2, 3), 1.0), _h((2, 2, 4), 1.5)], _h((1, 0, 1), 0.5)),
    # a NaN bucket is no sample: skipped, the steps around it join up
    ([_h((1, 2, 3), 1.0), _h((2, math.nan, 5), 2.0), _h((2, 5, 7), 4.0)], _h((1, 3, 4), 3.0)),
    # a NaN count and a negative bucket likewise
    ([_h((1, 2, math.nan), 1.0), _h((1, 2, 3), 1.0), _h((-1, 2, 3), 1.0), _h((2, 5, 7), 4.0)], _h((1, 3, 4), 3.0)),
    # NaN only in the sum (an engine that exports no _sum): the buckets still count, the sum is unknown
    ([_h((1, 2, 3), math.nan), _h((2, 5, 7), math.nan)], _h((1, 3, 4), math.nan)),
    # garbage leaves fewer than two samples: unknown
    ([_h((1, 2, 3), 1.0), _h((math.nan, math.nan, math.nan), 1.0)], None),
]


@pytest.mark.parametrize(("hists", "expected"), HISTOGRAM_CASES)
def test_histogram_increase(hists: list[Histogram], expected: Histogram | None) -> None:
    got = histogram_increase(hists)
    if expected is None:
        assert got is None
    else:
        assert got is not None
        assert got.bounds == expected.bounds
        assert got.counts == pytest.approx(expected.counts)
        assert got.sum == pytest.approx(expected.sum, nan_ok=True)
        assert got.count == pytest.approx(expected.count)


STEP_CASES = [
    # plain step: bucket-wise difference, sum and count too
    (_h((1, 2, 3), 1.0), _h((2, 5, 7), 4.0), _h((1, 3, 4), 3.0)),
    # no change: a known zero increase
    (_h((1, 2, 3), 1.0), _h((1, 2, 3), 1.0), _h((0, 0, 0), 0.0)),
    # the count (+Inf) fell: a restart, the later histogram is all new
    (_h((5, 9, 10), 8.0), _h((1, 1, 2), 0.5), _h((1, 1, 2), 0.5)),
    # only a lower bucket fell while the count grew: a restart too (buckets only grow while a process lives)
    (_h((5, 6, 10), 5.0), _h((1, 9, 12), 6.0), _h((1, 9, 12), 6.0)),
    # the sum fell with the buckets growing: no restart (negative observations lower a sum)
    (_h((1, 2, 3), 5.0), _h((2, 5, 7), 4.0), _h((1, 3, 4), -1.0)),
    # a bucket appeared: incomparable, no step
    (_h((1, 2, 3), 1.0), _h((1, 1, 2, 4), 2.0, (0.1, 0.5, 1.0, INF)), None),
]


@pytest.mark.parametrize(("previous", "current", "expected"), STEP_CASES)
def test_histogram_step(previous: Histogram, current: Histogram, expected: Histogram | None) -> None:
    assert histogram_step(previous, current) == expected


RESET_CASES = [
    # growth in every bucket is no restart
    (_h((1, 2, 3), 1.0), _h((2, 5, 7), 4.0), False),
    # the count (+Inf) falling is one
    (_h((5, 9, 10), 8.0), _h((5, 9, 9), 8.0), True),
    # one bucket falling is one, whatever the count does
    (_h((5, 6, 10), 5.0), _h((4, 9, 12), 6.0), True),
    # the count field alone falling is one (an exporter whose count and +Inf bucket disagree)
    (_h((1, 2, 3), 1.0), Histogram((0.1, 1.0, INF), (1, 2, 3), 1.0, 2.0), True),
]


@pytest.mark.parametrize(("previous", "current", "expected"), RESET_CASES)
def test_histogram_reset(previous: Histogram, current: Histogram, expected: bool) -> None:
    assert histogram_reset(previous, current) is expected


@pytest.mark.parametrize(
    ("previous", "current", "expected"),
    [
        (10.0, 15.0, 5.0),  # growth: the difference
        (10.0, 10.0, 0.0),  # flat: a known zero
        (10.0, 4.0, 4.0),  # a fall is a restart: all of the later value is new
        (10.0, 0.0, 0.0),  # a restart straight to zero adds nothing
    ],
)
def test_counter_step(previous: float, current: float, expected: float) -> None:
    assert counter_step(previous, current) == expected


def test_histogram_add_skips_none_and_other_bounds() -> None:
    # same bounds add bucket-wise; a histogram with other bounds cannot be added and is left out
    other = _h((1, 1, 1, 1), 1.0, (0.5, 1.0, 2.0, INF))
    total = histogram_add([_h((1, 2, 3), 1.0), None, other, _h((0, 1, 1), 0.5)])
    assert total == _h((1, 3, 4), 1.5)
    assert histogram_add([None, None]) is None


QUANTILE_CASES = [
    # median of 10 observations, 5 in (0, 0.1], 5 in (0.1, 1]: exactly the 0.1 bound
    (0.5, _h((5, 10, 10), 3.0), 0.1),
    # p75 interpolates linearly inside (0.1, 1]
    (0.75, _h((5, 10, 10), 3.0), 0.1 + 0.9 * 0.5),
    # rank in the +Inf bucket: the highest finite bound
    (0.99, _h((5, 5, 10), 3.0), 1.0),
    # empty histogram: unknown
    (0.5, _h((0, 0, 0), 0.0), None),
]


@pytest.mark.parametrize(("q", "hist", "expected"), QUANTILE_CASES)
def test_histogram_quantile(q: float, hist: Histogram, expected: float | None) -> None:
    got = histogram_quantile(q, hist)
    assert got == (pytest.approx(expected) if expected is not None else None)


def test_histogram_quantile_rejects_out_of_range_q() -> None:
    with pytest.raises(ValueError, match="quantile"):
        histogram_quantile(1.5, _h((1, 1, 1), 0.1))


@given(st.lists(st.floats(min_value=0, max_value=1e12), min_size=2, max_size=50))
def test_increase_is_never_negative_and_matches_monotonic_difference(values: list[float]) -> None:
    points = [(float(i), v) for i, v in enumerate(values)]
    inc = increase(points)
    assert inc is not None
    assert inc >= 0
    if all(b >= a for a, b in itertools.pairwise(values)):
        assert inc == pytest.approx(values[-1] - values[0])


# -- windows kept point by point agree with the functions over the same points --------------------------------

_COUNTER_VALUES = st.one_of(
    st.none(),
    st.floats(min_value=-5, max_value=1e9),
    st.sampled_from([math.nan, math.inf, -math.inf]),
    st.integers(0, 10**6).map(float),
)


@given(values=st.lists(_COUNTER_VALUES, min_size=0, max_size=40), window=st.integers(1, 15))
def test_counter_window_agrees_with_increase_and_rate(values: list[float | None], window: int) -> None:
    w = CounterWindow()
    seen: list[tuple[float, float | None]] = []
    for i, v in enumerate(values):
        t = float(i)
        seen.append((t, v))
        w.add(t, v)
        w.trim(t - window)
        points = counter_points(p for p in seen if p[0] >= t - window)
        expected_increase, expected_rate = increase(points), rate(points)
        assert (w.increase() is None) == (expected_increase is None)
        if expected_increase is not None:
            assert w.increase() == pytest.approx(expected_increase, rel=1e-9, abs=1e-6)
        assert (w.rate() is None) == (expected_rate is None)
        if expected_rate is not None:
            assert w.rate() == pytest.approx(expected_rate, rel=1e-9, abs=1e-6)


@given(values=st.lists(_COUNTER_VALUES, min_size=0, max_size=40), window=st.integers(1, 15))
def test_counter_window_increase_and_rate_are_increase_and_rate(values: list[float | None], window: int) -> None:
    # FleetState's views read both at once: the very same floats as the two calls (repr: -0.0 apart from 0.0).
    w = CounterWindow()
    for i, v in enumerate(values):
        w.add(float(i), v)
        w.trim(float(i) - window)
        assert repr(w.increase_and_rate()) == repr((w.increase(), w.rate()))


@given(values=st.lists(_COUNTER_VALUES, min_size=0, max_size=30), window=st.integers(1, 10))
def test_gauge_window_agrees_with_derivative(values: list[float | None], window: int) -> None:
    w = GaugeWindow()
    seen: list[tuple[float, float | None]] = []
    for i, v in enumerate(values):
        t = float(i)
        seen.append((t, v))
        w.add(t, v)
        w.trim(t - window)
        assert w.derivative() == derivative(finite_points(p for p in seen if p[0] >= t - window))


_BOUNDS = st.sampled_from([(0.1, 1.0, math.inf), (0.5, math.inf)])


@st.composite
def _histograms(draw: st.DrawFn) -> Histogram | None:
    if draw(st.booleans()) and draw(st.booleans()):
        return None
    bounds = draw(_BOUNDS) if draw(st.integers(0, 9)) == 0 else (0.1, 1.0, math.inf)
    steps = draw(st.lists(st.integers(0, 1000), min_size=len(bounds), max_size=len(bounds)))
    counts = tuple(float(c) for c in itertools.accumulate(steps))
    if draw(st.integers(0, 9)) == 0:  # now and then a garbage bucket, which both must skip alike
        counts = (math.nan, *counts[1:])
    return Histogram(bounds=bounds, counts=counts, sum=float(draw(st.integers(0, 10**6))), count=counts[-1])


@given(hists=st.lists(_histograms(), min_size=0, max_size=25), window=st.integers(1, 10))
def test_histogram_window_agrees_with_histogram_increase(hists: list[Histogram | None], window: int) -> None:
    w = HistogramWindow()
    seen: list[tuple[float, Histogram | None]] = []
    for i, h in enumerate(hists):
        t = float(i)
        seen.append((t, h))
        w.add(t, h)
        w.trim(t - window)
        expected = histogram_increase([h for ts, h in seen if ts >= t - window and h is not None])
        got = w.increase()
        assert (got is None) == (expected is None)
        if got is not None and expected is not None:
            assert got.bounds == expected.bounds
            assert got.counts == pytest.approx(expected.counts)
            assert (got.sum, got.count) == pytest.approx((expected.sum, expected.count))


def test_restarts_of_counters_near_floats_limit_give_no_increase_not_an_overflow() -> None:
    # Found by the detectors' fuzz (tests/unit/detectors/test_detectors_fuzz.py): two restarts from ~1.5e308 summed
    # past float's limit and math.fsum raised OverflowError out of FleetState.observe, ending the tick.
    w = CounterWindow()
    for t, value in ((0.0, 1.5e308), (5.0, 0.0), (10.0, 1.5e308), (15.0, 0.0), (20.0, 1.0)):
        w.add(t, value)
    assert w.increase() is None
    assert w.increase_and_rate() == (None, None)
    # an ordinary restart still reads what it did
    ok = CounterWindow()
    for t, value in ((0.0, 10.0), (5.0, 2.0), (10.0, 5.0)):
        ok.add(t, value)
    assert ok.increase() == 5.0  # 10 -> restart -> 2 -> 5: the 2 counted from the restart, then 3
