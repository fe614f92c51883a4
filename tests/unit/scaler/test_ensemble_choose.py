"""`auto` tests its options from the least summed error up and stops at the first that beats last value: the same
choice and lean, bit for bit, as testing every option, with the t statistic computed for fewer of them."""

from __future__ import annotations

import copy
import random
import struct
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.forecast import ensemble
from scaler.forecast.ensemble import Ensemble, _Scores


def _choose_testing_every_option(f: Ensemble, s: _Scores, steps: int) -> int:
    """The choice as made before the early stop (every option's test run, then the least error among passing)."""
    s.lean = 0.0
    if len(s.scored) < ensemble.MIN_SCORED or not s.sums or s.sums[0] <= 0:
        return 0
    passing = [i for i in range(1, f._n) if f._beats_last_value(s, i, steps)]
    if not passing:
        best = min(range(1, f._n), key=lambda i: s.sums[i])
        s.lean_to = best
        s.lean = ensemble.LEAN_MAX * min(max(f._t_stat(s, best, steps) / ensemble.Z, 0.0), 1.0)
        return 0
    best = min(passing, key=lambda i: s.sums[i])
    if s.choice in passing and s.sums[best] > (1.0 - ensemble.SWITCH_MARGIN) * s.sums[s.choice]:
        return s.choice
    return best


def _scores(seed: int, n_scored: int, n_options: int, skill: list[float], ties: bool, nan_sum: bool) -> _Scores:
    """Scored errors where option i errs about skill[i] times last value's (1.0: exactly last value's)."""
    rng = random.Random(seed)
    s = _Scores(155.0)
    for t in range(n_scored):
        base_error = rng.expovariate(1.0)
        errors, drawn = [base_error], dict[float, float]()
        for i in range(1, n_options):
            k = skill[i % len(skill)]
            e = base_error if k == 1.0 else abs(rng.gauss(k * base_error, 0.3))
            # With ties, options of one skill err alike: equal sums and equal tests, so the order among equals counts.
            errors.append(drawn.setdefault(k, e) if ties else e)
        if not s.errors:
            s.errors = [deque() for _ in errors]
        s.scored.append(float(t))
        for column, e in zip(s.errors, errors, strict=True):
            column.append(e)
        Ensemble._add(s, errors, 1.0)
    if nan_sum and s.sums:
        s.sums[rng.randrange(1, n_options)] = float("nan")
    return s


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n_scored=st.integers(0, 400),
    skill=st.lists(st.sampled_from([0.3, 0.6, 0.9, 0.97, 1.0, 1.2, 2.0]), min_size=1, max_size=10),
    ties=st.booleans(),
    nan_sum=st.booleans(),
    choice=st.integers(0, 9),
    steps=st.integers(1, 40),
)
def test_early_stop_chooses_as_testing_every_option(
    seed: int, n_scored: int, skill: list[float], ties: bool, nan_sum: bool, choice: int, steps: int
) -> None:
    f = Ensemble()
    s = _scores(seed, n_scored, f._n, skill, ties, nan_sum)
    s.choice = choice % f._n
    reference = copy.deepcopy(s)
    expected = _choose_testing_every_option(f, reference, steps)
    assert f._choose(s, steps) == expected
    assert (s.lean_to, struct.pack("<d", s.lean)) == (reference.lean_to, struct.pack("<d", reference.lean))


def test_the_costly_test_stops_at_the_first_option_that_passes() -> None:
    f = Ensemble()
    s = _scores(1, 400, f._n, [0.5], ties=False, nan_sum=False)  # every model beats last value by far
    tested: list[int] = []
    t_stat = f._t_stat

    def counted(s: _Scores, i: int, steps: int) -> float:
        tested.append(i)
        return t_stat(s, i, steps)

    f._t_stat = counted  # type: ignore[method-assign]
    chosen = f._choose(s, 31)
    assert chosen == min(range(1, f._n), key=lambda i: s.sums[i])
    assert tested == [chosen]  # one test, not one per option
