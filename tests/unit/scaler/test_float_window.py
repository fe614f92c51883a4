"""`auto`'s error columns kept unboxed (`FloatWindow`): the same values, bit for bit and in the same order, as the
deque of floats they replace, for 8 bytes a value instead of a float object each."""

from __future__ import annotations

import struct
import tracemalloc
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.forecast import float_window
from scaler.forecast.ensemble import Ensemble
from scaler.forecast.float_window import FloatWindow


def _bits(xs: list[float]) -> list[bytes]:
    return [struct.pack("<d", x) for x in xs]  # tells 0.0 from -0.0 and NaNs apart, unlike ==


_numbers = st.floats() | st.sampled_from([0.0, -0.0, float("inf"), float("nan")])


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.one_of(_numbers, st.none(), st.integers(1, 700)), max_size=300))
def test_a_float_window_is_a_deque_of_its_floats(ops: list[float | int | None]) -> None:
    """None pops the oldest; an int n pushes n values at once (past the point where popped values are shifted out)."""
    window, reference = FloatWindow(), deque[float]()
    for op in ops:
        if op is None:
            if reference:
                assert _bits([window.popleft()]) == _bits([reference.popleft()])
            else:
                with pytest.raises(IndexError):
                    window.popleft()
        elif isinstance(op, int):
            for i in range(op):
                window.append(i * 0.5)
                reference.append(i * 0.5)
        else:
            window.append(op)
            reference.append(op)
        assert len(window) == len(reference)
        assert _bits(list(window)) == _bits(list(reference))


def test_popped_values_are_shifted_out_once_they_are_half_the_array() -> None:
    window = FloatWindow()
    for i in range(1000):
        window.append(float(i))
    for i in range(float_window._COMPACT_AFTER * 2):
        assert window.popleft() == float(i)
    assert window._head < float_window._COMPACT_AFTER * 2  # shifted at least once: the array does not keep them
    assert len(window._values) - window._head == len(window) == 1000 - 2 * float_window._COMPACT_AFTER
    assert list(window) == [float(i) for i in range(2 * float_window._COMPACT_AFTER, 1000)]


def test_auto_keeps_its_scores_unboxed() -> None:
    """What `auto` keeps per observation once every option is scored: its history (shared floats), the candidates'
    and the scores. With the error columns as deques of float objects it was ~600 bytes an observation (~400 now)."""
    f = Ensemble()
    t = 0.0
    for i in range(400):  # past the first scores (the horizon below is 31 steps)
        t += 5.0
        f.observe(t, 10.0 + (i % 7) * 0.37)
        f.predict(155.0)
    assert all(isinstance(c, FloatWindow) for s in f._by_horizon.values() for c in s.errors)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        n = 1000
        for i in range(n):
            t += 5.0
            f.observe(t, 10.0 + (i % 7) * 0.37)
            f.predict(155.0)
        per_observation = (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()
    assert per_observation < 500  # ~400 unboxed, ~600 as deques of floats


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(20, 300), steps=st.integers(1, 40), drop=st.integers(0, 600))
def test_the_t_statistic_reads_a_float_window_as_the_deque_it_replaces(
    seed: int, n: int, steps: int, drop: int
) -> None:
    """Read in place (popped values before it in the array, some shifted out) or copied from a deque: same bits."""
    import random

    from scaler.forecast.ensemble import _Scores

    rng = random.Random(seed)
    f = Ensemble()
    unboxed, boxed = _Scores(155.0), _Scores(155.0)
    for t in range(drop + n):
        errors = [rng.expovariate(1.0) * (0.5 + i / 10) for i in range(f._n)]
        for s, kind in ((unboxed, FloatWindow), (boxed, deque)):
            if not s.errors:
                s.errors = [kind() for _ in errors]  # type: ignore[misc]
            s.scored.append(float(t))
            for column, e in zip(s.errors, errors, strict=True):
                column.append(e)
            Ensemble._add(s, errors, 1.0)
            if t < drop:
                s.scored.popleft()
                Ensemble._add(s, [column.popleft() for column in s.errors], -1.0)
    for i in range(1, f._n):
        assert _bits([f._t_stat(unboxed, i, steps)]) == _bits([f._t_stat(boxed, i, steps)])


def test_one_choice_works_each_options_t_statistic_out_once() -> None:
    """The lean re-reads the best option's t statistic, which the search had just worked out: not again."""
    import random

    from scaler.forecast.ensemble import _Scores

    f = Ensemble()
    s = _Scores(155.0)
    rng = random.Random(3)
    for t in range(400):  # options err a little less than last value on the whole, too noisily to pass the test
        base = rng.expovariate(1.0)
        errors = [base] + [abs(0.5 * base + rng.gauss(0.0, 1.0)) for _ in range(1, f._n)]
        if not s.errors:
            s.errors = [FloatWindow() for _ in errors]
        s.scored.append(float(t))
        for column, e in zip(s.errors, errors, strict=True):
            column.append(e)
        Ensemble._add(s, errors, 1.0)
    worked: list[int] = []
    t_stat_of = f._t_stat_of

    def counted(s: _Scores, i: int, steps: int) -> float:
        worked.append(i)
        return t_stat_of(s, i, steps)

    f._t_stat_of = counted  # type: ignore[method-assign]
    assert f._choose(s, 31) == 0
    assert s.lean_to != 0
    assert s.lean > 0
    assert worked.count(s.lean_to) == 1
    assert len(worked) == len(set(worked))
