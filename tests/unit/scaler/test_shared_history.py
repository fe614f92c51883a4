"""`auto`'s candidates read the ensemble's history instead of keeping a copy each: the same forecasts, bit for bit,
as candidates keeping their own, for one history kept per deployment instead of ten."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.forecast.base import Forecaster
from scaler.forecast.ensemble import Ensemble, default_candidates
from scaler.forecast.linear_trend import LinearTrend


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def _own_histories() -> Ensemble:
    """An ensemble whose candidates keep their own histories, as before they shared."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(Forecaster, "share_history", lambda self, owner: False)
        return Ensemble()


def test_default_candidates_share_the_ensembles_history() -> None:
    f = Ensemble()
    shared = [c for c in f.candidates if c.history_from is f]
    assert len(shared) == len(f.candidates) - 1  # seasonal naive keeps a day: a longer history of its own
    for c in shared:
        assert c._times is f._times
        assert c._values is f._values
    for t in range(1, 50):
        f.observe(5.0 * t, float(t % 7))
    assert all(c.times == f.times and c.values == f.values for c in f.candidates)


def test_a_candidate_with_points_or_another_length_keeps_its_own() -> None:
    used = LinearTrend(window_s=300.0)
    used.observe(1.0, 2.0)
    other = LinearTrend(window_s=300.0, max_history=100)
    f = Ensemble(candidates=[*default_candidates()[:2], used, other])
    assert used.history_from is None
    assert other.history_from is None
    f.observe(2.0, 3.0)
    assert used.values == [2.0, 3.0]
    assert other.values == [3.0]


_values = st.floats(min_value=0.0, max_value=1e4) | st.sampled_from([float("nan"), float("inf"), 0.0, -0.0])


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(st.tuples(st.floats(min_value=-3.0, max_value=30.0), _values), min_size=1, max_size=250),
    horizon=st.sampled_from([0.0, 35.0, 155.0]),
)
def test_shared_histories_forecast_bit_for_bit_as_own_ones(steps: list[tuple[float, float]], horizon: float) -> None:
    """Times that go back and values that are not finite are dropped by the ensemble, as each candidate dropped them."""
    shared, own = Ensemble(), _own_histories()
    assert all(c.history_from is None for c in own.candidates)
    t = 0.0
    for dt, value in steps:
        t += dt
        for f in (shared, own):
            f.observe(t, value)
        a, b = shared.predict(horizon), own.predict(horizon)
        assert (_bits(a.point), _bits(a.upper), a.fallback) == (_bits(b.point), _bits(b.upper), b.fallback)
    for x, y in zip(shared.candidates, own.candidates, strict=True):
        assert (x.fallbacks, x.rejected_inputs, x._observed) == (y.fallbacks, y.rejected_inputs, y._observed)
        assert x.values == y.values
        assert x.times == y.times
    assert (shared.fallbacks, shared.rejected_inputs) == (own.fallbacks, own.rejected_inputs)


def test_a_long_noisy_series_forecasts_bit_for_bit_as_with_own_histories() -> None:
    """Past 4,096 points (the histories' length) and through the scores' choices and leans."""
    import random

    rng = random.Random(7)
    shared, own = Ensemble(), _own_histories()
    for i in range(5000):
        value = max(0.0, 20.0 + 10.0 * ((i // 300) % 3) + rng.gauss(0.0, 3.0))
        for f in (shared, own):
            f.observe(5.0 * i, value)
        a, b = shared.predict(155.0), own.predict(155.0)
        assert (_bits(a.point), _bits(a.upper)) == (_bits(b.point), _bits(b.upper)), i
    assert len(shared.values) == 4096
    assert shared.chosen(155.0) == own.chosen(155.0)
