"""The replica calculation (pure, HPA-style): from demand, capacity and the queue to a desired replica count.

desired = max(predictive — demand forecast at the horizon (cold start + scaling delay),
              reactive   — what the current queue and arrival rate need now),
then tolerance, scale-down stabilisation, step limits and min/max, each of which, when it binds, becomes the
reason an operator reads. Time is an argument: the policy never reads a clock.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

IDLE_SHARE_OF_REPLICA = 0.05  # a forecast under this share of one replica's capacity does not keep a replica awake


@dataclass(frozen=True, slots=True)
class Tolerances:
    """Asymmetric dead band around ratio = desired / current, as the HPA's (default 10% both ways)."""

    scale_down: float = 0.1
    scale_up: float = 0.1

    def __post_init__(self) -> None:
        if not (0 <= self.scale_down < 1 and self.scale_up >= 0):
            raise ValueError(f"tolerances must satisfy 0 <= scale_down < 1 and scale_up >= 0, got {self}")

    def is_within(self, ratio: float) -> bool:
        return (1.0 - self.scale_down) <= ratio <= (1.0 + self.scale_up)


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    min_replicas: int = 1
    max_replicas: int | None = None
    target_utilisation: float = 0.8  # plan one replica at this share of its capacity: the headroom absorbs noise
    # "fixed": every replica at target_utilisation, the forecast's upper bound on top (the two margins multiplied).
    # "pooled": the spare a fleet keeps grows with the square root of its load (one replica's spare at one replica),
    # and a forecast's margin combines with it as an independent deviation. Not the default: on ServeGen's 6 h
    # (~25 replicas) it kept 92.5 % in SLO at 150 replica-h against 99.8 % at 180 (BENCHMARKS.md, "Backtest").
    headroom: str = "fixed"
    tolerances: Tolerances = Tolerances(scale_down=0.1, scale_up=0.0)
    scale_down_stabilisation_s: float = 300.0
    scale_up_max_step: int = 0  # most replicas added per decision; 0 = unlimited (a forecast needs them all)
    scale_down_max_step: int = 0  # most removed per decision; 0 = unlimited (stabilisation already paces it)
    queue_drain_s: float = 2.0  # reactive part clears the current queue within this time (use the TTFT SLO)
    idle_below_rps: float = 0.0  # demand under this needs no replica at all (only min_replicas 0 lets it show)

    def __post_init__(self) -> None:
        if self.min_replicas < 0:
            raise ValueError(f"policy: min_replicas must be >= 0, got {self.min_replicas}")
        if self.max_replicas is not None and self.max_replicas < max(self.min_replicas, 1):
            raise ValueError(f"policy: max_replicas {self.max_replicas} is below min_replicas {self.min_replicas}")
        if not (0 < self.target_utilisation <= 1):
            raise ValueError(f"policy: target_utilisation must be in (0, 1], got {self.target_utilisation}")
        if self.headroom not in ("pooled", "fixed"):
            raise ValueError(f"policy: headroom must be 'pooled' or 'fixed', got {self.headroom!r}")
        if self.scale_down_stabilisation_s < 0 or self.queue_drain_s <= 0:
            raise ValueError("policy: scale_down_stabilisation_s must be >= 0 and queue_drain_s > 0")
        if self.scale_up_max_step < 0 or self.scale_down_max_step < 0:
            raise ValueError("policy: step limits must be >= 0")


@dataclass(frozen=True, slots=True)
class Demand:
    """What the policy sees at one tick for one deployment. None means unknown, never zero."""

    current_replicas: int
    ready_replicas: int
    capacity_rps: float | None  # per replica, within the SLO, for the current token mix
    arrival_rate: float | None  # requests/s now
    forecast_upper_rate: float | None  # requests/s at the horizon, upper quantile
    requests_waiting: float | None
    replicas_without_metrics: int = 0
    stuck_replicas: int = 0  # ready pods making no progress: they hold a replica slot and serve nothing
    forecast_rate: float | None = None  # requests/s at the horizon, point forecast (the zero decision reads it)


@dataclass(frozen=True, slots=True)
class Recommendation:
    desired_replicas: int
    warm_pool: int
    reason: str
    message: str
    predictive_replicas: int | None
    reactive_replicas: int | None


def _replicas_for(rate: float, capacity_rps: float, utilisation: float) -> int:
    return max(0, math.ceil(rate / (capacity_rps * utilisation) - 1e-9))


def spare_replicas(load: float, utilisation: float) -> float:
    """Spare replicas for a load of ``load`` replicas at full capacity, under pooling: one replica keeps
    1/utilisation − 1 of itself spare, a fleet keeps that many times the square root of its load (square-root
    staffing: arrivals' random excess over their mean grows as the square root of the mean, so 150 replicas need
    proportionally far less spare than 3). Under one replica's load it is the fixed share; never more."""
    load = max(load, 0.0)
    return (1.0 / utilisation - 1.0) * min(load, math.sqrt(load))


def pooled_replicas(load: float, utilisation: float, margin: float = 0.0) -> int:
    """Replicas for ``load`` (replicas at full capacity) with its spare, plus a forecast's ``margin`` (also in
    replicas): two independent deviations above the mean add as variances do, not as sums or products."""
    spare = math.hypot(spare_replicas(load, utilisation), max(margin, 0.0))
    return max(0, math.ceil(max(load, 0.0) + spare - 1e-9))


class ReplicaPolicy:
    """Stateful only in its bounded history of recommendations (for scale-down stabilisation)."""

    def __init__(self, config: PolicyConfig | None = None, *, max_history: int = 1024) -> None:
        self.config = config or PolicyConfig()
        self._history: deque[tuple[float, int]] = deque(maxlen=max_history)

    def recommend(self, demand: Demand, *, now: float) -> Recommendation:
        c = self.config
        current = demand.current_replicas
        cap = demand.capacity_rps
        if cap is None or not math.isfinite(cap) or cap <= 0:
            return self._hold(demand, now, "no_capacity", "capacity per replica is unknown yet; holding")

        predictive = None
        if demand.forecast_upper_rate is not None:
            predictive = self._need(demand.forecast_upper_rate, cap, demand.forecast_rate)
            # Nothing arriving and nothing forecast: the upper band (sized from past errors, which a busy period
            # left wide) must not keep one replica forever; with min_replicas 0 the deployment may sleep.
            # "Away" = nothing arriving now, and a forecast worth less than a twentieth of one replica.
            point = demand.forecast_rate
            if (
                point is not None
                and point < max(c.idle_below_rps, IDLE_SHARE_OF_REPLICA * cap * c.target_utilisation)
                and (demand.arrival_rate or 0.0) < c.idle_below_rps
                and not demand.requests_waiting
            ):
                predictive = 0
        reactive = None
        if demand.arrival_rate is not None or demand.requests_waiting is not None:
            rate = (demand.arrival_rate or 0.0) + (demand.requests_waiting or 0.0) / c.queue_drain_s
            if not demand.requests_waiting:
                reactive = self._need(rate, cap)
            elif c.headroom == "pooled":
                reactive = pooled_replicas(rate / cap, c.target_utilisation)
            else:
                reactive = _replicas_for(rate, cap, c.target_utilisation)
        if predictive is None and reactive is None:
            return self._hold(demand, now, "no_metrics", "no arrival rate, forecast or queue is known; holding")

        # A stuck replica keeps its pod (and its place in the count) until it is drained or restarted: the
        # serving replicas the demand needs come on top of it.
        raw = max(predictive or 0, reactive or 0) + demand.stuck_replicas
        reason = "predictive" if (predictive or 0) >= (reactive or 0) else "reactive"
        msg = f"forecast needs {predictive}, queue and arrivals need {reactive} (capacity {cap:.2f} req/s/replica)"
        if demand.stuck_replicas:
            msg = f"{msg}; plus {demand.stuck_replicas} stuck replica(s) that serve nothing"
        warm_pool = max(0, (predictive or 0) - (reactive or 0))

        # Missing data is conservative: an empty queue without an arrival rate proves nothing (the rate window
        # is still filling), and replicas we cannot see might be busy: neither pushes a scale-down.
        if raw < current and demand.arrival_rate is None:
            return self._finish(
                now,
                current,
                current,
                warm_pool,
                "no_arrival_rate",
                (predictive, reactive),
                "arrival rate unknown yet; not scaling down on the queue alone",
            )
        if raw < current and demand.replicas_without_metrics > 0:
            return self._finish(
                now,
                current,
                current,
                warm_pool,
                "missing_metrics",
                (predictive, reactive),
                f"{demand.replicas_without_metrics} replica(s) report no metrics; not scaling down",
            )
        if current > 0 and c.tolerances.is_within(raw / current):
            return self._finish(
                now,
                raw,
                current,
                warm_pool,
                "within_tolerance",
                (predictive, reactive),
                f"{msg}; within tolerance of {current}",
            )
        desired = raw
        self._history.append((now, raw))
        if desired < current:
            window_max = max((r for t, r in self._history if now - t <= c.scale_down_stabilisation_s), default=raw)
            if window_max > desired:
                desired = min(window_max, current)
                reason = "stabilised"
                msg = f"{msg}; holding {desired} for the {c.scale_down_stabilisation_s:.0f} s scale-down window"
        if c.scale_up_max_step and desired > current + c.scale_up_max_step:
            desired, reason = current + c.scale_up_max_step, "step_limited"
            msg = f"{msg}; adding at most {c.scale_up_max_step} per step"
        if c.scale_down_max_step and desired < current - c.scale_down_max_step:
            desired, reason = current - c.scale_down_max_step, "step_limited"
            msg = f"{msg}; removing at most {c.scale_down_max_step} per step"
        return self._clamp(desired, warm_pool, reason, msg, predictive, reactive)

    # -- helpers -------------------------------------------------------------------------------------------
    def _need(self, rate: float, capacity_rps: float, point: float | None = None) -> int:
        """Replicas for a rate (a forecast's upper bound, whose ``point`` is given); a trickle under
        ``idle_below_rps`` (less than a request per horizon) needs none."""
        c = self.config
        if rate < c.idle_below_rps:
            return 0
        if c.headroom == "fixed":
            return _replicas_for(rate, capacity_rps, c.target_utilisation)
        mean = rate if point is None else min(max(point, 0.0), rate)
        return pooled_replicas(mean / capacity_rps, c.target_utilisation, (rate - mean) / capacity_rps)

    def enough(self, replicas: int, rate: float, capacity_rps: float) -> bool:
        """Whether ``replicas`` serve ``rate`` with the spare this policy plans (the SLO feedback judges only
        such a fleet)."""
        c = self.config
        if capacity_rps <= 0:
            return False
        if c.headroom == "fixed":
            return replicas * capacity_rps * c.target_utilisation >= rate
        load = rate / capacity_rps
        return replicas >= load + spare_replicas(load, c.target_utilisation)

    def _finish(
        self,
        now: float,
        raw: int,
        desired: int,
        warm_pool: int,
        reason: str,
        parts: tuple[int | None, int | None],
        message: str,
    ) -> Recommendation:
        self._history.append((now, max(raw, desired)))
        return self._clamp(desired, warm_pool, reason, message, *parts)

    def _hold(self, demand: Demand, now: float, reason: str, message: str) -> Recommendation:
        self._history.append((now, demand.current_replicas))
        return self._clamp(demand.current_replicas, 0, reason, message, None, None)

    def _clamp(
        self, desired: int, warm_pool: int, reason: str, message: str, predictive: int | None, reactive: int | None
    ) -> Recommendation:
        c = self.config
        if desired < c.min_replicas:
            desired, reason, message = (
                c.min_replicas,
                "clamped_min",
                f"{message}; raised to min_replicas {c.min_replicas}",
            )
        if c.max_replicas is not None and desired > c.max_replicas:
            desired, reason, message = (
                c.max_replicas,
                "clamped_max",
                f"{message}; capped at max_replicas {c.max_replicas}",
            )
        return Recommendation(desired, min(warm_pool, desired), reason, message, predictive, reactive)
