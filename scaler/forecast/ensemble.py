"""`auto`: per series, the candidate forecaster whose measured error at the horizon asked for is lowest, and last
value unless one beats it.

Which model wins depends on the workload — smoothing wins on Poisson noise, trend on ramps, seasonality on
daily cycles, last value on abrupt steps — and nobody should have to choose per deployment. Every candidate
forecasts each horizon `predict` is asked for (the planner asks for one: its cold start + tick + half the rate
window); when that moment arrives, each candidate's absolute error is scored, per horizon, over a trailing
window. The forecast is the candidate with the lowest summed error there, provided it beats last value's (the
MASE denominator) by a margin beyond chance; otherwise last value, leaning towards the best so far by as much as
its evidence allows (at most half way). An inverse-error blend of all candidates (the earlier
`auto`) is scored and chosen the same way, as one more candidate. So the forecast's MASE against last value is
about 1 at worst, and below 1 where any candidate measurably is; the choice is online, per deployment, and
follows the workload when it changes.

The upper bound is the point plus the 90th percentile of the chosen forecasts' own realised under-forecasts,
so it is calibrated on this series rather than assumed.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from scaler.forecast.base import Forecast, Forecaster
from scaler.forecast.ewma import Ewma
from scaler.forecast.float_window import FloatWindow
from scaler.forecast.holt import Holt
from scaler.forecast.last_value import LastValue
from scaler.forecast.linear_trend import LinearTrend
from scaler.forecast.seasonal_naive import SeasonalNaive
from scaler.forecast.sorted_window import SortedWindow
from scaler.forecast.window_ramp import WindowRamp

_BLEND_HALF_LIFE = 40.0  # scored predictions: how fast the blend's inverse-error weights follow
_RESIDUALS = 400
_MAX_HORIZONS = 8  # horizons scored at once (the planner asks for one)
SCORE_WINDOW_S = 10_800.0  # errors summed over the last 3 h of scored forecasts: a step an hour is rare evidence
MIN_SCORED = 20  # scored forecasts before any candidate may replace last value
MIN_HORIZONS = 3  # and as many horizons' worth of them: forecasts within one horizon of each other overlap
BEAT_MARGIN = 0.03  # a candidate is chosen only when its summed error is this share under last value's
Z = 2.33  # one-sided 99 %: a candidate replaces last value only when it is better beyond chance (ten try)
LEAN_MAX = 0.5  # the furthest an unproven option moves the answer from last value
SWITCH_MARGIN = 0.02  # and a new choice must beat the current one by this share (no flapping between equals)


def default_candidates() -> list[Forecaster]:
    """Candidate 0 is last value: the fallback and the yardstick. The ridge regressor (`sklearn`) is not one: fit
    on the first minutes of a noisy series it passes the test for a while and then costs more than it ever won
    (MASE 1.5–1.8 on its own on the Azure conversation and ServeGen series, where every other candidate is
    within 1.0–1.5); choose it per deployment with `forecaster: sklearn` where a long history suits it."""
    return [
        LastValue(),
        Ewma(half_life_s=30.0),
        Ewma(half_life_s=120.0),
        Ewma(half_life_s=300.0),
        Holt(alpha=0.3, beta=0.05, damping=0.9),
        LinearTrend(window_s=300.0),
        LinearTrend(window_s=900.0),
        SeasonalNaive(season_s=86_400.0),
        WindowRamp(window_s=60.0),
    ]


@dataclass
class _Scores:
    """Per horizon: forecasts waiting for their truth, and windowed absolute errors per candidate."""

    horizon_s: float
    pending: deque[tuple[float, list[float], float]] = field(default_factory=deque)  # (due at, options, answer)
    scored: deque[float] = field(default_factory=deque)  # when each scored forecast was scored, oldest first
    # Per option, the |error| of each scored forecast in the order of `scored`: the t statistic reads a column whole.
    # Unboxed (`FloatWindow`): ten columns of up to 3 h of scores per deployment are most of what `auto` keeps.
    errors: list[FloatWindow] = field(default_factory=list)
    sums: list[float] = field(default_factory=list)  # Σ |error| per option
    gain: list[float] = field(default_factory=list)  # Σ (|last value's error| − |option's error|)
    differs: list[int] = field(default_factory=list)  # scored where the option did not answer last value's
    choice: int = 0
    lean_to: int = 0  # with no option proven: the best so far, and how far towards it the answer leans
    lean: float = 0.0
    since_choice: int = 0  # scored since the choice was last made
    idle_s: float = 0.0  # time that carried no evidence (at rest, or unread): the window's clock stood still
    last_scored: float | None = None  # when a forecast was last scored
    residuals: SortedWindow = field(default_factory=lambda: SortedWindow(maxlen=_RESIDUALS))  # truth − chosen point


class Ensemble(Forecaster):
    name = "auto"

    def __init__(self, *, max_history: int = 4096, candidates: list[Forecaster] | None = None) -> None:
        super().__init__(max_history=max_history)
        self.candidates = candidates if candidates is not None else default_candidates()
        if not self.candidates:
            raise ValueError("auto forecaster: needs at least one candidate")
        for c in self.candidates:
            if c.spread_from is None:
                c.spread_from = self  # every candidate sees this series: one spread for all, not one each
            c.share_history(self)  # and one history (a candidate keeping another length keeps its own)
        n = len(self.candidates) + 1  # the blend is the last option
        self._n = n
        self._blend_scores: list[float | None] = [None] * len(self.candidates)
        self._by_horizon: dict[float, _Scores] = {}
        self._t_memo: dict[tuple[int, int], float] | None = None  # while `_choose` runs: each option's t statistic

    # -- scoring -------------------------------------------------------------------------------------------
    def _update(self, t: float, value: float) -> None:
        for c in self.candidates:
            if c.history_from is self:
                c.observe_shared(t, value)
            else:
                c.observe(t, value)
        half_step = 0.5 * self.step_s()
        alpha = 1.0 - 0.5 ** (1.0 / _BLEND_HALF_LIFE)
        for s in self._by_horizon.values():
            added = 0
            while s.pending and s.pending[0][0] <= t + half_step:
                _, points, answered = s.pending.popleft()
                errors = [abs(p - value) for p in points]
                s.residuals.append(value - answered)
                # The window ages with evidence, not with the clock. A forecast no option got measurably more or less
                # wrong than last value is no evidence either way (a deployment at rest): it is not recorded and the
                # time it spans does not count, so a quiet night neither erases yesterday's evidence nor dilutes it;
                # nor does time unread (a gap between scores longer than the horizon, at zero with nothing read).
                gap = 0.0 if s.last_scored is None else t - s.last_scored
                s.last_scored = t
                if not _informative(errors, s.horizon_s):
                    s.idle_s += gap
                    continue
                if gap > s.horizon_s:
                    s.idle_s += gap - s.horizon_s
                if not s.errors:
                    s.errors = [FloatWindow() for _ in errors]
                s.scored.append(t - s.idle_s)
                added += 1
                for column, err in zip(s.errors, errors, strict=True):
                    column.append(err)
                self._add(s, errors, 1.0)
                for i, err in enumerate(errors[: len(self.candidates)]):
                    old = self._blend_scores[i]
                    self._blend_scores[i] = err if old is None else old + alpha * (err - old)
            while s.scored and s.scored[0] < t - s.idle_s - SCORE_WINDOW_S:
                s.scored.popleft()
                self._add(s, [column.popleft() for column in s.errors], -1.0)
            # New scores, not the window's growth: once the window is full each score pushes one out, and counting
            # the growth left the choice as it stood when the window first filled.
            s.since_choice += added
            steps = max(1, self.horizon_steps(s.horizon_s))
            # The test reads the whole window: redone every eighth of a horizon of new scores, not every tick.
            if s.since_choice >= max(1, steps // 8):
                s.choice, s.since_choice = self._choose(s, steps), 0

    def warm(self, t: float, value: float, horizon_s: float) -> None:
        """A restored point, scored as a live tick would be: the forecast the planner would have asked for one point
        earlier is scored on it, so a restart resumes the choice its history supports rather than last value."""
        if self._values:
            self.predict(horizon_s)
        self.observe(t, value)

    @staticmethod
    def _add(s: _Scores, errors: list[float], sign: float) -> None:
        if not s.sums:
            s.sums, s.gain, s.differs = [0.0] * len(errors), [0.0] * len(errors), [0] * len(errors)
        for i, e in enumerate(errors):
            s.sums[i] += sign * e
            s.gain[i] += sign * (errors[0] - e)
            s.differs[i] += int(sign) * (e != errors[0])

    def _t_stat(self, s: _Scores, i: int, steps: int) -> float:
        """Diebold–Mariano: option i's mean gain over last value in standard errors (0 where untested). Forecasts
        `steps` ahead overlap, so their gains are correlated over as many lags: the variance of the mean is the
        long-run one (Newey–West, Bartlett weights), not the one of independent draws. Within one `_choose`, each
        option's is worked out once (the lean re-read the best option's, which the search had just tested)."""
        memo = self._t_memo
        if memo is None:
            return self._t_stat_of(s, i, steps)
        t = memo.get((i, steps))
        if t is None:
            t = memo[(i, steps)] = self._t_stat_of(s, i, steps)
        return t

    def _t_stat_of(self, s: _Scores, i: int, steps: int) -> float:
        n = len(s.scored)
        mean = s.gain[i] / n
        # Where the option answered last value (a model still warming up), it was not tested at all.
        if n < MIN_SCORED or s.differs[i] < min(MIN_SCORED, MIN_HORIZONS * steps) or mean <= 0:
            return 0.0
        import numpy as np

        # Elementwise as e[0] − e[i] row by row would be (the same IEEE subtraction), read from the columns in C.
        d = _column(np, s.errors[0], n) - _column(np, s.errors[i], n) - mean
        long_run = float(d @ d) / n
        for lag in range(1, min(steps, n // 4)):
            long_run += 2.0 * (1.0 - lag / steps) * float(d[lag:] @ d[:-lag]) / n
        return mean / math.sqrt(max(long_run, 1e-18) / n)

    def _beats_last_value(self, s: _Scores, i: int, steps: int) -> bool:
        """Beyond chance: Z standard errors, 3 % less summed error, three horizons' worth scored."""
        if len(s.scored) < MIN_HORIZONS * steps or s.sums[i] > (1.0 - BEAT_MARGIN) * s.sums[0]:
            return False
        return self._t_stat(s, i, steps) > Z

    def _choose(self, s: _Scores, steps: int) -> int:
        self._t_memo = {}
        try:
            return self._choose_memo(s, steps)
        finally:
            self._t_memo = None

    def _choose_memo(self, s: _Scores, steps: int) -> int:
        s.lean = 0.0
        if len(s.scored) < MIN_SCORED or not s.sums or s.sums[0] <= 0:
            return 0
        best = self._best_passing(s, steps)
        if best is None:
            # None proven: lean from last value towards the best so far, as far as its evidence goes (half way
            # at most, at Z standard errors): a small bet where a model is probably better, none where not.
            best = min(range(1, self._n), key=lambda i: s.sums[i])
            s.lean_to = best
            s.lean = LEAN_MAX * min(max(self._t_stat(s, best, steps) / Z, 0.0), 1.0)
            return 0
        if (
            s.choice not in (0, best)
            and s.sums[best] > (1.0 - SWITCH_MARGIN) * s.sums[s.choice]
            and self._beats_last_value(s, s.choice, steps)
        ):
            return s.choice
        return best

    def _best_passing(self, s: _Scores, steps: int) -> int | None:
        """The option of least summed error among those that beat last value (the first by index among equals)."""
        options = range(1, self._n)
        if any(math.isnan(x) for x in s.sums):  # no order to test them in: test them all
            passing = [i for i in options if self._beats_last_value(s, i, steps)]
            return min(passing, key=lambda i: s.sums[i]) if passing else None
        # Tested from the least summed error up (a stable sort keeps equals in index order), the first to pass is
        # that option: the test, which reads the whole window, stops there instead of running for every option.
        return next((i for i in sorted(options, key=lambda i: s.sums[i]) if self._beats_last_value(s, i, steps)), None)

    def weights(self) -> list[float]:
        """The blend's inverse-squared-error weights over the candidates (uniform until each was scored)."""
        if any(s is None for s in self._blend_scores):
            return [1.0 / len(self.candidates)] * len(self.candidates)
        inv = [_inverse_square(s) for s in self._blend_scores]
        total = sum(inv)
        if not (total > 0.0 and math.isfinite(total)):
            return [1.0 / len(self.candidates)] * len(self.candidates)
        return [w / total for w in inv]

    def chosen(self, horizon_s: float) -> str:
        """Name of the option answering at this horizon now ("blend" for the weighted mean of all)."""
        s = self._by_horizon.get(round(horizon_s, 3))
        i = 0 if s is None else s.choice
        return "blend" if i == len(self.candidates) else self.candidates[i].name

    def mase(self, horizon_s: float) -> float | None:
        """The chosen option's summed error over last value's in the trailing window (None until scored)."""
        s = self._by_horizon.get(round(horizon_s, 3))
        if s is None or len(s.scored) < MIN_SCORED or not s.sums or s.sums[0] <= 0:
            return None
        return s.sums[s.choice] / s.sums[0]

    # -- output --------------------------------------------------------------------------------------------
    def _predict(self, horizon_s: float) -> tuple[float, float]:
        points = [c.predict(horizon_s).point for c in self.candidates]
        blend = sum(w * p for w, p in zip(self.weights(), points, strict=True))
        options = [*points, blend]
        key = round(horizon_s, 3)
        s = self._by_horizon.get(key)
        if s is None:
            if len(self._by_horizon) >= _MAX_HORIZONS:  # a caller sweeping horizons: forget the oldest asked
                del self._by_horizon[next(iter(self._by_horizon))]
            s = self._by_horizon[key] = _Scores(horizon_s)
        point = options[s.choice]
        if s.choice == 0 and s.lean > 0:
            point = points[0] + s.lean * (options[s.lean_to] - points[0])
        if not math.isfinite(point):
            point = points[0]
        target = self._times[-1] + horizon_s
        if not s.pending or s.pending[-1][0] < target:
            s.pending.append((target, options, point))
        if len(s.residuals) >= 20:
            margin = max(s.residuals[int(0.9 * (len(s.residuals) - 1))], 0.0)
        else:
            margin = self.horizon_spread(horizon_s)
        return point, point + margin

    def predict_from(self, now: float, horizon_s: float) -> Forecast:
        """The option chosen at ``horizon_s`` answering that far past ``now``, the unread gap added to its horizon
        (`Forecaster.predict_from`). The longer horizon is neither scored nor kept: no reading will come to score
        it, and keeping one per tick would push the real horizon's scores out of `_by_horizon`."""
        gap = self.unread_s(now)
        if gap == 0.0:
            return self.predict(horizon_s)
        ahead = horizon_s + gap
        s = self._by_horizon.get(round(horizon_s, 3))
        points = [c.predict(ahead).point for c in self.candidates]
        options = [*points, sum(w * p for w, p in zip(self.weights(), points, strict=True))]
        point = points[0] if s is None else options[s.choice]
        if s is not None and s.choice == 0 and s.lean > 0:
            point = points[0] + s.lean * (options[s.lean_to] - points[0])
        if not math.isfinite(point):
            point = points[0]
        if s is not None and len(s.residuals) >= 20:
            margin = max(s.residuals[int(0.9 * (len(s.residuals) - 1))], 0.0)
        else:
            margin = self.horizon_spread(ahead)
        point = self._clip(point)
        return Forecast(point, max(point, self._clip(point + margin)), horizon_s)

    def band_is_share(self, horizon_s: float) -> bool:
        s = self._by_horizon.get(round(horizon_s, 3))
        if s is not None and len(s.residuals) >= 20:  # the band is the residuals' q90 (`_predict`)
            return True
        return super().band_is_share(horizon_s)

    def tail_margin(self, horizon_s: float, share: float) -> float | None:
        s = self._by_horizon.get(round(horizon_s, 3))
        if s is None or not 0 < share < 1 or len(s.residuals) < math.ceil(1.0 / share):
            return None
        return max(s.residuals[int((1.0 - share) * (len(s.residuals) - 1))], 0.0)


def _inverse_square(score: float | None) -> float:
    """A candidate's blend weight before normalising: 1 / score². A score past ~1e154 (a reading of 1e300 scored)
    squared raised OverflowError out of `predict_from` (session 19, H); one made NaN (inf - inf) weighed NaN. Either
    now weighs nothing, and the answer is built from the others (uniform if none is left)."""
    s = max(score or 0.0, 1e-9)
    if not math.isfinite(s):
        return 0.0
    try:
        return 1.0 / s**2  # as it always was, to the last bit, where it did not overflow
    except OverflowError:
        return 0.0


def _informative(errors: list[float], horizon_s: float) -> bool:
    """Whether a scored forecast is evidence about any option against last value: some option's error differs from
    last value's by one event over the horizon (the planner's own line between demand and none, `idle_below_rps`).
    A deployment at rest (nothing arrives, every option answered nothing or a decaying trace of it) gives none."""
    floor = 1.0 / max(horizon_s, 1.0)
    return any(not abs(e - errors[0]) < floor for e in errors)  # a NaN error is kept (as it always was)


def _column(np: Any, column: FloatWindow | Iterable[float], n: int) -> Any:
    """An error column's first ``n`` values as a float64 array: a `FloatWindow`'s read in place (no float objects
    made), any other iterable's copied. Read only within an expression: while a view of a `FloatWindow` is alive
    its array cannot grow."""
    if isinstance(column, FloatWindow):
        values, head = column.unboxed()
        return np.frombuffer(values, dtype=float, count=n, offset=8 * head)
    return np.fromiter(column, dtype=float, count=n)
