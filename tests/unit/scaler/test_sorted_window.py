"""Quantiles kept sorted as a window slides answer bit for bit what sorting the window afresh answers."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scaler.forecast import base
from scaler.forecast.last_value import LastValue
from scaler.forecast.sorted_window import SortedWindow


def _bits(xs: list[float]) -> list[bytes]:
    return [struct.pack("<d", x) for x in xs]  # tells 0.0 from -0.0, unlike ==


_numbers = st.floats(allow_nan=False) | st.sampled_from([0.0, -0.0, 1.0, -1.0])


@settings(max_examples=400, deadline=None)
@given(
    ops=st.lists(st.one_of(_numbers, st.none()), max_size=200),  # None: drop the oldest
    maxlen=st.one_of(st.none(), st.integers(min_value=1, max_value=20)),
)
@example(ops=[0.0, -0.0, 0.0, None, -0.0, None], maxlen=None)  # equal values leave in arrival order
def test_ranks_are_a_stable_sort_of_the_window(ops: list[float | None], maxlen: int | None) -> None:
    window, arrived = SortedWindow(maxlen), list[float]()
    for op in ops:
        if op is None:
            if arrived:
                assert _bits([window.popleft()]) == _bits([arrived.pop(0)])
        else:
            window.append(op)
            arrived.append(op)
            if maxlen is not None and len(arrived) > maxlen:
                arrived.pop(0)
        assert len(window) == len(arrived)
        assert _bits([window[i] for i in range(len(window))]) == _bits(sorted(arrived))


def test_maxlen_below_one_is_an_error() -> None:
    with pytest.raises(ValueError, match="maxlen must be >= 1"):
        SortedWindow(0)


def _spread_afresh(f: base.Forecaster, horizon_s: float) -> float:
    """The horizon spread as it was computed before the window was kept: sort the last changes at every ask."""
    k = max(1, f.horizon_steps(horizon_s))
    values = f.values
    if len(values) <= k:
        return 0.0
    vs = values[-(k + base._SPREAD_POINTS) :]
    changes = sorted(abs(vs[i + k] - vs[i]) for i in range(len(vs) - k))
    return changes[min(len(changes) - 1, int(0.9 * len(changes)))]


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.floats(min_value=0.5, max_value=30.0),  # gap to the previous observation, s: the step (so k) moves
            st.floats(min_value=-1e12, max_value=1e12, allow_nan=False),
            st.sampled_from([None, None, None, 5.0, 155.0, 155.0, 600.0]),  # horizon asked after it (None: not asked)
        ),
        max_size=300,
    ),
    max_history=st.sampled_from([2, 7, 40, 4096]),
    spread_points=st.sampled_from([3, 16, 512]),
)
def test_kept_spread_equals_the_spread_sorted_afresh(
    steps: list[tuple[float, float, float | None]], max_history: int, spread_points: int
) -> None:
    original = base._SPREAD_POINTS
    base._SPREAD_POINTS = spread_points  # small windows: they fill and slide within a short series
    try:
        f, t = LastValue(max_history=max_history), 0.0
        for gap, value, horizon_s in steps:
            t += gap
            f.observe(t, value)
            if horizon_s is not None:
                assert struct.pack("<d", f.horizon_spread(horizon_s)) == struct.pack("<d", _spread_afresh(f, horizon_s))
    finally:
        base._SPREAD_POINTS = original


def test_the_spread_window_is_built_once_then_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    built = itertools.count()

    class Counted(SortedWindow):
        def __init__(self, maxlen: int | None = None) -> None:
            next(built)
            super().__init__(maxlen)

    monkeypatch.setattr(base, "SortedWindow", Counted)
    f = LastValue()
    for i in range(2_000):  # regular 5 s steps: k stays 31 for a 155 s horizon
        f.observe(5.0 * i, float(i % 17))
        f.predict(155.0)
    assert next(built) == 1
