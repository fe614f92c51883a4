"""`auto` weighs its models on evidence, and only on evidence (issue 10, item 5; session 19).

- A scored forecast where no option was measurably more or less wrong than last value (less than one event over
  the horizon apart: a deployment at rest) is no evidence either way: it is not recorded and the time it spans does
  not age the 3 h window; nor does time nothing was read in. So a quiet night neither erases what yesterday's
  burst showed nor resets the choice to last value.
- The choice is re-made every eighth of a horizon of new scores, also once the window is full (it used to count
  the window's growth, which stops when the window fills: the choice then stood as it was at 3 h for ever).
- A history restored at start is scored as the live loop would have scored it (`Forecaster.warm`).
"""

from __future__ import annotations

import math
import random

from scaler.forecast.ensemble import SCORE_WINDOW_S, Ensemble
from scaler.forecast.holt import Holt

H = 120.0
DAY = 86_400.0


def _burst(t: float) -> float:
    return 20.0 if 36_000.0 <= t % DAY < 39_600.0 else 0.0  # 10:00-11:00 daily


def _feed(f: Ensemble, start: float, end: float, step: float, rate=_burst) -> None:  # type: ignore[no-untyped-def]
    t = start
    while t < end:
        f.observe(t, rate(t))
        f.predict(H)
        t += step


def test_hours_at_rest_neither_erase_nor_add_evidence() -> None:
    f = Ensemble()
    _feed(f, 0.0, 2 * DAY + 13 * 3600.0, 60.0)  # two days of bursts, then two hours past the second
    s = f._by_horizon[H]
    scored, sums, choice, lean = len(s.scored), list(s.sums), s.choice, (s.lean_to, s.lean)
    assert s.sums[0] > 0  # the bursts are in the window: last value missed each start and end
    _feed(f, 2 * DAY + 13 * 3600.0, 3 * DAY + 9.5 * 3600.0, 60.0)  # 20.5 quiet hours: every option answers ~0
    s = f._by_horizon[H]
    assert len(s.scored) == scored  # nothing recorded (c7f6298: the window aged them all out, scored == 180)
    assert s.sums == sums
    assert (s.choice, (s.lean_to, s.lean)) == (choice, lean)
    assert f.predict(35_880.0 - (3 * DAY + 9.5 * 3600.0 - 60.0) % DAY).point >= 0.0  # still answers


def test_seasonal_evidence_survives_the_night_and_leans_the_answer() -> None:
    f = Ensemble()
    _feed(f, 0.0, 3 * DAY + 9 * 3600.0, 60.0)
    s = f._by_horizon[H]
    assert f.candidates[s.lean_to].name == "seasonal_naive"  # c7f6298: last value, lean 0
    assert s.lean > 0
    # at 09:59, the forecast for 10:01 leans towards the burst seasonal naive foresees
    _feed(f, 3 * DAY + 9 * 3600.0, 3 * DAY + 35_941.0, 60.0)
    assert f.predict(H).point > 1.0 / H


def test_time_unread_does_not_age_the_window() -> None:
    f = Ensemble()
    _feed(f, 0.0, 2 * DAY + 12 * 3600.0, 60.0)
    s = f._by_horizon[H]
    scored = len(s.scored)
    # nothing read for 20 hours (at zero, no counter), then readings resume at rest
    _feed(f, 3 * DAY + 8 * 3600.0, 3 * DAY + 9 * 3600.0, 60.0)
    assert len(f._by_horizon[H].scored) >= scored - 2  # not aged out by the unread hours


def test_the_choice_is_made_again_once_the_window_is_full() -> None:
    """Noise around a level for 4 h (smoothing is what beats last value there), then a steady climb for 4 h (a
    trend is): the second choice is made long after the window filled."""
    rng = random.Random(3)
    f = Ensemble()
    step, t = 5.0, 0.0
    while t < 4 * 3600.0:
        f.observe(t, 50.0 + rng.gauss(0.0, 5.0))
        f.predict(H)
        t += step
    first = f.chosen(H)
    assert first.startswith("ewma") or first == "blend", first
    assert t > SCORE_WINDOW_S
    start = t
    while t < 8 * 3600.0:
        f.observe(t, 50.0 + 0.01 * (t - start) + rng.gauss(0.0, 0.5))
        f.predict(H)
        t += step
    assert f.chosen(H) != first  # c7f6298: the choice made when the window filled, for ever


def test_warm_scores_the_restored_history_as_live_ticks_would() -> None:
    live, restored = Ensemble(), Ensemble()
    for m in range(3 * 1440):
        t, v = m * 60.0 + 30.0, _burst(m * 60.0)
        live.observe(t, v)
        live.predict(H)
        restored.warm(t, v, H)
    a, b = live._by_horizon[H], restored._by_horizon[H]
    assert list(a.scored) == list(b.scored)
    assert a.sums == b.sums
    assert (a.choice, a.lean) == (b.choice, b.lean)
    assert len(b.scored) > 0


def test_other_forecasters_warm_is_observe() -> None:
    f, g = Holt(), Holt()
    for m in range(100):
        f.observe(m * 60.0, math.sin(m))
        g.warm(m * 60.0, math.sin(m), H)
    assert f.predict(H) == g.predict(H)
