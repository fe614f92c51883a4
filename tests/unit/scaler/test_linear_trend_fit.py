"""The linear trend's fit, found by bisection and summed in C, is bit for bit the loop over the window's points."""

from __future__ import annotations

import itertools
import struct

from hypothesis import example, given, settings
from hypothesis import strategies as st

from scaler.forecast.linear_trend import LinearTrend


def _fit_point_by_point(f: LinearTrend, horizon_s: float) -> tuple[float, float]:
    """LinearTrend._predict as a plain loop: a test per point for the window, a generator per sum."""
    times, values = f.times, f.values
    t_end = times[-1]
    pts = list(
        itertools.takewhile(lambda p: t_end - p[0] <= f.window_s, zip(reversed(times), reversed(values), strict=True))
    )
    n = len(pts)
    if n < 3:
        return values[-1], values[-1] + f.horizon_spread(horizon_s)
    mt = sum(t for t, _ in pts) / n
    mv = sum(v for _, v in pts) / n
    var = sum((t - mt) ** 2 for t, _ in pts)
    slope = sum((t - mt) * (v - mv) for t, v in pts) / var if var > 0 else 0.0
    point = mv + slope * (t_end - mt) + f.damping * slope * horizon_s
    return point, point + f.horizon_spread(horizon_s)


def _bits(pair: tuple[float, float]) -> bytes:
    return struct.pack("<dd", *pair)


@settings(max_examples=300, deadline=None)
@given(
    points=st.lists(
        st.tuples(
            st.floats(min_value=1e-3, max_value=400.0),  # gap to the previous observation, s
            st.floats(min_value=-1e9, max_value=1e9, allow_nan=False),
        ),
        min_size=1,
        max_size=250,
    ),
    start=st.floats(min_value=0.0, max_value=2e9),  # large times: the window's edge is a rounded subtraction
    window_s=st.sampled_from([1.0, 60.0, 300.0, 900.0]),
    damping=st.sampled_from([0.0, 0.5, 1.0]),
    max_history=st.sampled_from([3, 50, 4096]),
    horizon_s=st.sampled_from([0.0, 155.0]),
)
@example(  # a point exactly window_s before the last: inside the window
    points=[(5.0, float(i % 7)) for i in range(80)],
    start=0.0,
    window_s=300.0,
    damping=0.5,
    max_history=4096,
    horizon_s=0.0,
)
def test_fit_equals_the_point_by_point_loop(
    points: list[tuple[float, float]],
    start: float,
    window_s: float,
    damping: float,
    max_history: int,
    horizon_s: float,
) -> None:
    f, t = LinearTrend(window_s=window_s, damping=damping, max_history=max_history), start
    for gap, value in points:
        t += gap
        f.observe(t, value)
        if f.times:
            assert _bits(f._predict(horizon_s)) == _bits(_fit_point_by_point(f, horizon_s))
