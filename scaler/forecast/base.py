"""The one interface every forecaster implements, and the bookkeeping they share.

A forecaster sees a (roughly regular) series through ``observe(t, value)`` and answers ``predict(horizon_s)``
with a point and an upper quantile. The shared base keeps a bounded history, drops non-finite input (and counts
it), estimates the sampling step, and turns any model failure into the last observed value plus a counter, so a
broken model degrades to the naive baseline instead of stopping the control loop.
"""

from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass

from scaler.forecast.sorted_window import SortedWindow

# One-sided z for the upper quantile: the scaler sizes for the 90th percentile of demand at the horizon.
UPPER_Z = 1.2816
# The horizon spread looks at this many recent changes: enough for a stable q90, cheap at every tick.
_SPREAD_POINTS = 512
# The fewest changes whose 90th percentile (index int(0.9 n)) is not the largest of them: int(0.9 n) <= n - 2.
SPREAD_QUANTILE_MIN = 11


@dataclass(frozen=True, slots=True)
class Forecast:
    """Demand expected ``horizon_s`` after the last observation: ``point`` estimate and ``upper`` (q90) bound."""

    point: float
    upper: float
    horizon_s: float = 0.0
    fallback: bool = False  # True when the model failed and the last value was returned


class Forecaster(ABC):
    """Base for all forecasters: bounded history, sanitising, step estimate, fallback on failure."""

    name: str = "base"

    def __init__(self, *, max_history: int = 4096, non_negative: bool = True) -> None:
        if max_history < 2:
            raise ValueError(f"max_history must be >= 2, got {max_history}")
        self._times: deque[float] = deque(maxlen=max_history)
        self._values: deque[float] = deque(maxlen=max_history)
        self.non_negative = non_negative
        self.rejected_inputs = 0  # observations dropped as non-finite or out of order
        self.fallbacks = 0  # predictions answered by the last value because the model failed
        self._observed = 0  # observations kept so far (keys the spread's cache)
        self._spread_cache: tuple[int, int, float] | None = None  # (observed, steps, spread)
        # The spread's window of changes, kept sorted as the series moves: (observed, steps, changes) when built.
        self._changes: tuple[int, int, SortedWindow] | None = None
        self._step_cache: tuple[int, float] | None = None  # (observed, step)
        # A forecaster fed exactly the same series (an ensemble's candidate) may read its spread from there.
        self.spread_from: Forecaster | None = None
        # ... and keep no history of its own: it reads that forecaster's (`share_history`).
        self.history_from: Forecaster | None = None

    # -- input ---------------------------------------------------------------------------------------------
    def observe(self, t: float, value: float) -> None:
        """Record ``value`` at time ``t`` (seconds). Non-finite values and times that go backwards are dropped."""
        if not (math.isfinite(t) and math.isfinite(value)):
            self.rejected_inputs += 1
            return
        if self._times and t <= self._times[-1]:
            self.rejected_inputs += 1
            return
        self._times.append(float(t))
        self._values.append(float(value))
        self._observed += 1
        try:
            self._update(float(t), float(value))
        except (ArithmeticError, ValueError):
            # An online update that blows up must not lose the observation; _predict will fall back.
            self.fallbacks += 1

    def share_history(self, owner: Forecaster) -> bool:
        """Read ``owner``'s history as this one's, where ``owner`` is fed exactly this series and keeps as much of it
        (an ensemble's fresh candidate): the same points, kept once instead of once per candidate (at 5 s ticks,
        4,096 points of two deques a candidate, per deployment). The owner then calls `observe_shared` where it
        called `observe`. False (nothing shared) where either has points already or they keep different lengths."""
        if self._times or owner._times or self._times.maxlen != owner._times.maxlen:
            return False
        self._times, self._values, self.history_from = owner._times, owner._values, owner
        return True

    def warm(self, t: float, value: float, horizon_s: float) -> None:
        """One point of a history restored at start (`observe` here). A forecaster that learns from its own
        forecasts' errors (`auto`) forecasts ``horizon_s`` ahead first, as the live loop would have, so the restored
        history is scored too."""
        self.observe(t, value)

    def observe_shared(self, t: float, value: float) -> None:
        """``observe`` for a forecaster sharing its history (`share_history`), once its owner has recorded the point:
        what ``observe`` does past the append (the owner already took or dropped the point as ``observe`` would)."""
        self._observed += 1
        try:
            self._update(float(t), float(value))
        except (ArithmeticError, ValueError):
            self.fallbacks += 1

    def _update(self, t: float, value: float) -> None:  # noqa: B027 - optional hook, deliberately empty
        """Online state update; batch models leave this empty and work from the history."""

    # -- output --------------------------------------------------------------------------------------------
    def predict(self, horizon_s: float) -> Forecast:
        """Forecast ``horizon_s`` seconds after the last observation. With no data: zero."""
        if not math.isfinite(horizon_s) or horizon_s < 0:
            raise ValueError(f"horizon_s must be a finite number >= 0, got {horizon_s!r}")
        if not self._values:
            return Forecast(0.0, 0.0, horizon_s)
        last = self._values[-1]
        try:
            point, upper = self._predict(horizon_s)
        except Exception:  # any model failure degrades to the naive forecast, counted
            point, upper = math.nan, math.nan
        if not (math.isfinite(point) and math.isfinite(upper)):
            self.fallbacks += 1
            spread = self.horizon_spread(horizon_s)
            return Forecast(self._clip(last), self._clip(last + spread), horizon_s, fallback=True)
        point = self._clip(point)
        return Forecast(point, max(point, self._clip(upper)), horizon_s)

    def unread_s(self, now: float) -> float:
        """Seconds from the last observation to ``now`` (0 before any, or where ``now`` is not later)."""
        if not self._times or not math.isfinite(now):
            return 0.0
        return max(0.0, now - self._times[-1])

    def predict_from(self, now: float, horizon_s: float) -> Forecast:
        """Forecast ``horizon_s`` seconds after ``now`` rather than after the last observation: for a series that
        has not been read since (a deployment scaled to zero with no gateway counter). No reading is made up for
        the gap (a 0 written for hours nobody measured would teach a seasonal model that the burst it missed did
        not come): the model answers that much further ahead of what it saw. `predict` where nothing is unread.

        The upper bound keeps the real horizon's margin: the spread of a series over the unread hours (how far it
        moves in 14 h, 20 req/s on a daily burst) is no forecast error of a model that looks a day back, and as a
        margin it asked for a warm pool all night (session 19)."""
        gap = self.unread_s(now)
        if gap == 0.0:
            return self.predict(horizon_s)
        near, far = self.predict(horizon_s), self.predict(horizon_s + gap)
        margin = max(near.upper - near.point, 0.0)
        return Forecast(far.point, max(far.point, self._clip(far.point + margin)), horizon_s, fallback=far.fallback)

    @abstractmethod
    def _predict(self, horizon_s: float) -> tuple[float, float]:
        """Return (point, upper) for the horizon; may raise or return non-finite values to request a fallback."""

    def tail_margin(self, horizon_s: float, share: float) -> float | None:
        """How far above its point this forecaster's answers at ``horizon_s`` fell short in the worst ``share`` of
        the forecasts measured so far (the realised under-forecast's 1 − share quantile); None where it does not
        measure its own errors, or has too few of them to tell that quantile from the largest."""
        return None

    # -- helpers for subclasses ----------------------------------------------------------------------------
    @property
    def values(self) -> list[float]:
        return list(self._values)

    @property
    def times(self) -> list[float]:
        return list(self._times)

    def step_s(self) -> float:
        """Median spacing of the observations (1 s before two exist)."""
        if len(self._times) < 2:
            return 1.0
        if self._step_cache is not None and self._step_cache[0] == self._observed:
            return self._step_cache[1]
        ts = list(itertools.islice(reversed(self._times), 64))[::-1]
        gaps = sorted(b - a for a, b in itertools.pairwise(ts))
        step = max(gaps[len(gaps) // 2], 1e-9)
        self._step_cache = (self._observed, step)
        return step

    def horizon_steps(self, horizon_s: float) -> int:
        """The horizon in whole observation steps (at least 0)."""
        return max(0, round(horizon_s / self.step_s()))

    def horizon_spread(self, horizon_s: float) -> float:
        """Model-free uncertainty: the 90th percentile of |x(t+h) − x(t)| over the history (0 when unknown).

        It is what a last-value forecast got wrong over this horizon in the past, so it is an honest upper
        margin for any forecaster that has no variance of its own.
        """
        if self.spread_from is not None:
            return self.spread_from.horizon_spread(horizon_s)
        k = max(1, self.horizon_steps(horizon_s))
        if len(self._values) <= k:
            return 0.0
        cached = self._spread_cache
        if cached is not None and cached[0] == self._observed and cached[1] == k:
            return cached[2]
        changes = self._changes_over(k)
        spread = changes[min(len(changes) - 1, int(0.9 * len(changes)))]
        self._spread_cache = (self._observed, k, spread)
        return spread

    def spread_changes(self, horizon_s: float) -> int:
        """How many changes over ``horizon_s`` the horizon spread is read from (0 before the first)."""
        if self.spread_from is not None:
            return self.spread_from.spread_changes(horizon_s)
        k = max(1, self.horizon_steps(horizon_s))
        return max(0, min(len(self._values), k + _SPREAD_POINTS) - k)

    def band_is_share(self, horizon_s: float) -> bool:
        """Whether the upper bound's margin at ``horizon_s`` is a measured share of something: False while it is the
        horizon spread read from too few changes for their 90th percentile to be other than the largest
        (`SPREAD_QUANTILE_MIN`). At a series' start that largest change is the ramp it opens with (the one change
        at 215 s of an Azure conversation backtest, 2.1 -> 3.9 replicas of load), no share of anything."""
        return self.spread_changes(horizon_s) >= SPREAD_QUANTILE_MIN

    def _changes_over(self, k: int) -> SortedWindow:
        """|x(i+k) − x(i)| for the last ``_SPREAD_POINTS`` i (fewer while the history is short), sorted.

        Kept from the last call: the changes of the observations since enter, the oldest leave; built afresh when
        k changes or too much is new. Either way the same values, so the same sorted list as sorting them afresh.
        """
        vs = self._values
        size = min(len(vs), k + _SPREAD_POINTS) - k
        new = self._observed - self._changes[0] if self._changes is not None else size + 1
        if self._changes is None or self._changes[1] != k or new > size:
            window = SortedWindow()
            recent = list(itertools.islice(reversed(vs), k + _SPREAD_POINTS))[::-1]
            for i in range(len(recent) - k):
                window.append(abs(recent[i + k] - recent[i]))
        else:
            window = self._changes[2]
            for back in range(new, 0, -1):  # oldest new observation first, as the window is ordered
                window.append(abs(vs[-back] - vs[-back - k]))
            while len(window) > size:
                window.popleft()
        self._changes = (self._observed, k, window)
        return window

    def _clip(self, x: float) -> float:
        return max(0.0, x) if self.non_negative else x
