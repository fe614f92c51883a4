"""The replica calculation (pure, HPA-style): from demand, capacity and the queue to a desired replica count.

desired = max(predictive — demand forecast at the horizon (cold start + scaling delay),
              reactive   — what the current queue and arrival rate need now),
raised, where the burst floor is on, to what the recent short-window peak of arrivals needed; then tolerance,
scale-down stabilisation, step limits and min/max, each of which, when it binds, becomes the reason an operator reads.
Time is an argument: the policy never reads a clock.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace

HEADROOMS = ("fixed", "pooled", "lean", "adaptive")
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
    # "lean": one margin, not two stacked: the point forecast at target_utilisation, the upper bound at full
    # capacity, and never fewer than carry the point with one replica lost once the load spans two (N+1). What
    # the planner's `sizing: lean` selects (docs/scaling.md, "Policy").
    # "adaptive": the fixed rule's margin above the point forecast at full capacity, scaled by the share the
    # workload's SLO shows it needs (`Demand.margin_scale`, learnt by `scaler.margin.MarginFeedback`): 1 is "fixed".
    headroom: str = "fixed"
    tolerances: Tolerances = Tolerances(scale_down=0.1, scale_up=0.0)
    scale_down_stabilisation_s: float = 300.0
    scale_up_max_step: int = 0  # most replicas added per decision; 0 = unlimited (a forecast needs them all)
    scale_down_max_step: int = 0  # most removed per decision; 0 = unlimited (stabilisation already paces it)
    queue_drain_s: float = 2.0  # reactive part clears the current queue within this time (use the TTFT SLO)
    idle_below_rps: float = 0.0  # demand under this needs no replica at all (only min_replicas 0 lets it show)
    # Never fewer than serve `Demand.burst_rate` at full capacity: on/off traffic, whose minute-scale forecast
    # falls in every silence, keeps the replicas its last burst needed (docs/scaling.md, "Policy").
    burst_floor: bool = False
    # How long the scale-down window holds a count only the forecast asked for (its need above what the measured
    # arrivals and queue need); None: the whole window, as a measured need. A forecast already looks one horizon
    # ahead, so a replica released after the horizon could be back before what it foresaw (docs/scaling.md).
    forecast_hold_s: float | None = None

    def __post_init__(self) -> None:
        if self.min_replicas < 0:
            raise ValueError(f"policy: min_replicas must be >= 0, got {self.min_replicas}")
        if self.max_replicas is not None and self.max_replicas < max(self.min_replicas, 1):
            raise ValueError(f"policy: max_replicas {self.max_replicas} is below min_replicas {self.min_replicas}")
        if not (0 < self.target_utilisation <= 1):
            raise ValueError(f"policy: target_utilisation must be in (0, 1], got {self.target_utilisation}")
        if self.headroom not in HEADROOMS:
            raise ValueError(f"policy: headroom must be one of {', '.join(HEADROOMS)}, got {self.headroom!r}")
        if self.scale_down_stabilisation_s < 0 or self.queue_drain_s <= 0:
            raise ValueError("policy: scale_down_stabilisation_s must be >= 0 and queue_drain_s > 0")
        if self.scale_up_max_step < 0 or self.scale_down_max_step < 0:
            raise ValueError("policy: step limits must be >= 0")
        if self.forecast_hold_s is not None and not (0 <= self.forecast_hold_s <= self.scale_down_stabilisation_s):
            raise ValueError(
                f"policy: forecast_hold_s must be in [0, scale_down_stabilisation_s], got {self.forecast_hold_s}"
            )


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
    margin_scale: float = 1.0  # share of the fixed rule's margin the "adaptive" headroom keeps (others ignore it)
    burst_rate: float | None = None  # requests/s the recent short-window peak needs served (`scaler.burst`)
    # requests/s at the horizon that the forecast's measured errors exceeded in only the SLO's share of misses
    # (`Forecaster.tail_margin`); None while too few errors are measured
    forecast_tail_rate: float | None = None
    # replicas (at full capacity, stuck ones not counted) a scale-down must still hold: today's load plus its rise
    # within the window that the measured load exceeded in only the SLO's share of ticks (`scaler.rise.LoadRise`),
    # and never fewer than carry today's load with one replica lost (N+1); None: the whole window holds
    release_replicas: int | None = None
    # replicas (stuck ones not counted) no decision goes below: the count a scale-down released from, where the next
    # burst proved the release wrong (`scaler.regret.ReleaseRegret`); None: none held
    regret_floor: int | None = None
    # requests/s at the horizon that the scale-down window holds for the forecast where it is below
    # `forecast_upper_rate`: a band asked for but not measured as a share (`Forecaster.band_is_share`) is planned
    # for while asked, and not held for the window after; None: the upper rate is held
    hold_upper_rate: float | None = None
    # replicas (at full capacity, stuck ones not counted) the release would hold were today's load to fall within a
    # horizon as far as it did in all but the SLO's share of ticks: one replica more than the current count that this
    # fits is not ordered, as the release could let it go before it serves; None (release not measured, rough
    # traffic): every order is made
    release_after_fall: int | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """A replica count and why: what each stage of `ReplicaPolicy.recommend` hands the next."""

    replicas: int
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Recommendation:
    desired_replicas: int
    warm_pool: int
    reason: str
    message: str
    predictive_replicas: int | None
    reactive_replicas: int | None
    burst_floor_replicas: int | None = None  # what the burst floor asked (None: off or no peak yet)


# Kubernetes counts a Deployment's replicas in an int32: no count is more.
MOST_REPLICAS = 2**31 - 1


def _count(replicas: float) -> int:
    """``replicas`` rounded up, as a count in [0, MOST_REPLICAS]. A load the float arithmetic carried past its range
    (inf, or NaN from inf - inf: one deployment's PromQL aggregate of 1e308 requests/s and as many waiting) counts
    as many as can be, for max_replicas to bind. Before, math.ceil raised: the planner's stage failed, and with it
    every deployment's decision, each tick (KEDA's fallback for the whole fleet after the staleness limit)."""
    if not replicas < MOST_REPLICAS:  # also NaN
        return MOST_REPLICAS
    return max(0, math.ceil(replicas - 1e-9))


def _replicas_for(rate: float, capacity_rps: float, utilisation: float) -> int:
    return _count(rate / (capacity_rps * utilisation))


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
    return _count(max(load, 0.0) + spare)


def lean_replicas(point: float, upper: float, capacity_rps: float, utilisation: float) -> int:
    """Replicas for a forecast with one margin: the point at ``utilisation`` (the queueing headroom of a steady
    load), the upper bound at full capacity (it is already the margin for the forecast's error), and — once the
    point needs two replicas — enough that the point is carried at full capacity with one replica lost for a cold
    start (N+1: a fleet sized to the point alone has no room for an XID or a hang)."""
    need = max(_replicas_for(point, capacity_rps, utilisation), _replicas_for(upper, capacity_rps, 1.0))
    if need >= 2:
        need = max(need, min(_replicas_for(point, capacity_rps, 1.0) + 1, MOST_REPLICAS))
    return need


def release_replicas(load: float, rise: float) -> int:
    """Replicas a scale-down must still hold for ``load`` (replicas at full capacity, today's) and its measured
    ``rise`` within the window, and, once the load needs more than one replica, never fewer than carry it with one
    replica lost until its replacement serves (N+1: an XID 79, a hung GPU, an evicted pod; the rise and a loss are
    not stacked). A load one replica carries keeps the redundancy ``min_replicas`` gives it, as `lean_replicas`."""
    replicas = _replicas_for(load + max(rise, 0.0), 1.0, 1.0)
    alone = _replicas_for(load, 1.0, 1.0)
    return max(replicas, min(alone + 1, MOST_REPLICAS)) if alone >= 2 else replicas


def adaptive_replicas(point: float | None, upper: float, capacity_rps: float, utilisation: float, share: float) -> int:
    """Replicas for the point forecast at full capacity plus ``share`` of the fixed rule's margin above it (the
    upper bound at ``utilisation``): share 1 is the fixed rule, 0 the point alone. Without a point (today's
    arrivals) the margin is the utilisation's alone."""
    full = upper / (capacity_rps * utilisation)
    base = (upper if point is None else min(max(point, 0.0), upper)) / capacity_rps
    return _count(base + min(max(share, 0.0), 1.0) * (full - base))


class ReplicaPolicy:
    """Stateful only in its bounded history of recommendations (for scale-down stabilisation)."""

    def __init__(self, config: PolicyConfig | None = None, *, max_history: int = 1024) -> None:
        self.config = config or PolicyConfig()
        # (time, the need, the part of it the measured arrivals and queue asked for)
        self._history: deque[tuple[float, int, int]] = deque(maxlen=max_history)

    def recommend(self, demand: Demand, *, now: float) -> Recommendation:
        """Staged as the HPA's replica calculator: raw need → hold on missing data or within tolerance →
        stabilise scale-down → limit the step → clamp to the bounds. Each stage takes the count and the reason
        so far and returns them, changed where it binds."""
        cap = demand.capacity_rps
        if cap is None or not math.isfinite(cap) or cap <= 0:
            return self._hold(demand, now, "no_capacity", "capacity per replica is unknown yet; holding")
        predictive, reactive = self._predictive(demand, cap), self._reactive(demand, cap)
        if predictive is None and reactive is None:
            return self._hold(demand, now, "no_metrics", "no arrival rate, forecast or queue is known; holding")
        parts = (predictive, reactive)
        warm_pool = max(0, (predictive or 0) - (reactive or 0))
        floor = self._burst_replicas(demand, cap)
        raw = self._burst_floor(self._raw(demand, cap, predictive, reactive), floor, demand.burst_rate)
        raw = self._regret_floor(raw, demand)
        held_need = self._held_need(demand, cap, reactive, floor, raw)
        kept = self._keep_current(demand, raw) or self._within_release(demand, raw)
        if kept is not None:
            held = max(raw.replicas, demand.current_replicas) if held_need >= raw.replicas else held_need
            self._history.append((now, held, held))
            return self._clamp(kept, warm_pool, *parts, floor)
        self._history.append((now, held_need, min(held_need, (reactive or 0) + demand.stuck_replicas)))
        step = self._limit_step(self._stabilise(raw, demand, now), demand.current_replicas)
        return self._clamp(step, warm_pool, *parts, floor)

    # -- stages ---------------------------------------------------------------------------------------------
    def _held_need(self, demand: Demand, cap: float, reactive: int | None, floor: int | None, raw: Step) -> int:
        """The need the scale-down window records for this tick: ``raw``'s, or, where the forecast's upper rate is
        not held (`Demand.hold_upper_rate` below it), the same stages with the held rate in its place."""
        upper, hold = demand.forecast_upper_rate, demand.hold_upper_rate
        if hold is None or upper is None or not hold < upper:
            return raw.replicas
        held = replace(demand, forecast_upper_rate=hold)
        step = self._raw(held, cap, self._predictive(held, cap), reactive)
        return min(raw.replicas, self._regret_floor(self._burst_floor(step, floor, demand.burst_rate), held).replicas)

    def _predictive(self, demand: Demand, cap: float) -> int | None:
        """Replicas for the forecast at the horizon (its upper bound), or None without a forecast."""
        c = self.config
        if demand.forecast_upper_rate is None:
            return None
        # Nothing arriving and nothing forecast: the upper band (sized from past errors, which a busy period left
        # wide) must not keep one replica forever; with min_replicas 0 the deployment may sleep.
        # "Away" = nothing arriving now, and a forecast worth less than a twentieth of one replica.
        point = demand.forecast_rate
        if (
            point is not None
            and point < max(c.idle_below_rps, IDLE_SHARE_OF_REPLICA * cap * c.target_utilisation)
            and (demand.arrival_rate or 0.0) < c.idle_below_rps
            and not demand.requests_waiting
        ):
            return 0
        need = self._need(demand.forecast_upper_rate, cap, point, demand.margin_scale)
        tail = demand.forecast_tail_rate
        if c.headroom != "fixed" or tail is None or point is None or demand.forecast_upper_rate < c.idle_below_rps:
            return need
        # The fixed rule's two margins assume the forecast's error; where its measured tail is smaller, plan for
        # that: the rate the horizon exceeded in no more than the SLO's share of misses, at full capacity, and the
        # point at the target utilisation (a steady load's queueing headroom). Never more than the fixed rule.
        return min(need, max(_replicas_for(point, cap, c.target_utilisation), _replicas_for(tail, cap, 1.0)))

    def _reactive(self, demand: Demand, cap: float) -> int | None:
        """Replicas for today's arrivals plus clearing today's queue within ``queue_drain_s``, or None when
        neither is known."""
        c = self.config
        if demand.arrival_rate is None and demand.requests_waiting is None:
            return None
        rate = (demand.arrival_rate or 0.0) + (demand.requests_waiting or 0.0) / c.queue_drain_s
        if not demand.requests_waiting or c.headroom == "adaptive":
            # The adaptive margin scales a queue's too: at tens of requests/s a few always wait, so a rule that
            # kept the full margin for any queue would keep it all the time.
            return self._need(rate, cap, margin_scale=demand.margin_scale)
        if c.headroom == "pooled":
            return pooled_replicas(rate / cap, c.target_utilisation)
        return _replicas_for(rate, cap, c.target_utilisation)

    @staticmethod
    def _raw(demand: Demand, cap: float, predictive: int | None, reactive: int | None) -> Step:
        """The larger need. A stuck replica keeps its pod (and its place in the count) until it is drained or
        restarted: the serving replicas the demand needs come on top of it."""
        replicas = max(predictive or 0, reactive or 0) + demand.stuck_replicas
        reason = "predictive" if (predictive or 0) >= (reactive or 0) else "reactive"
        msg = (
            f"{need_phrase('forecast', predictive, 'no forecast yet')}, "
            f"{need_phrase('queue and arrivals', reactive, 'queue and arrivals not read')} "
            f"(capacity {cap:.2f} req/s/replica)"
        )
        if demand.stuck_replicas:
            msg = f"{msg}; plus {demand.stuck_replicas} stuck replica(s) that serve nothing"
        return Step(replicas, reason, msg)

    def _burst_replicas(self, demand: Demand, cap: float) -> int | None:
        """Replicas that serve the recent burst peak at full capacity (its need already allows for the SLO's
        wait), stuck ones on top; None when the floor is off or no peak is known."""
        if not self.config.burst_floor or demand.burst_rate is None or not math.isfinite(demand.burst_rate):
            return None
        return _replicas_for(demand.burst_rate, cap, 1.0) + demand.stuck_replicas

    @staticmethod
    def _burst_floor(step: Step, floor: int | None, burst_rate: float | None) -> Step:
        """No fewer replicas than the recent burst peak needed: a forecast that falls in the silence between
        bursts would otherwise meet the next one a cold start short."""
        if floor is None or floor <= step.replicas:
            return step
        return Step(
            floor,
            "burst_floor",
            f"{step.message}; holding {floor} for the recent burst (its peak needs {burst_rate or 0.0:.2f} req/s)",
        )

    @staticmethod
    def _regret_floor(step: Step, demand: Demand) -> Step:
        """No fewer replicas than a scale-down released from where the next burst proved it wrong: the workload's
        bursts recur after the scale-down window, so the window is no evidence to release on."""
        if demand.regret_floor is None:
            return step
        floor = demand.regret_floor + demand.stuck_replicas
        if floor <= step.replicas:
            return step
        return Step(
            floor,
            "release_regret",
            f"{step.message}; holding {floor}: a release from {demand.regret_floor} met a burst it could not serve "
            "within the SLO",
        )

    def _keep_current(self, demand: Demand, raw: Step) -> Step | None:
        """The current count where the data cannot justify a change: missing data is conservative (an empty queue
        without an arrival rate proves nothing, as the rate window is still filling; replicas we cannot see might
        be busy: neither pushes a scale-down), and a change within tolerance is not made."""
        current = demand.current_replicas
        if raw.replicas < current and demand.arrival_rate is None:
            return Step(current, "no_arrival_rate", "arrival rate unknown yet; not scaling down on the queue alone")
        if raw.replicas < current and demand.replicas_without_metrics > 0:
            return Step(
                current,
                "missing_metrics",
                f"{demand.replicas_without_metrics} replica(s) report no metrics; not scaling down",
            )
        if current > 0 and self.config.tolerances.is_within(raw.replicas / current):
            return Step(current, "within_tolerance", f"{raw.message}; within tolerance of {current}")
        return None

    def _within_release(self, demand: Demand, raw: Step) -> Step | None:
        """The current count where the ask is one replica more that the measured release could let go before it
        serves: at today's load less its measured fall within a horizon, the load plus its measured rise
        within the window (and the N+1 spare) fits the current count at full capacity (`Demand.release_after_fall`),
        and the down tolerance would not keep the extra replica. The 0.8 target asks at ~0.8 of a replica's capacity
        and the release lets go at one replica less the measured rise, the same place on smooth conversation: the
        count followed the load's dips across the boundary, ordering replicas released while still loading (Azure
        conversation ×2.45: two second replicas released 90 and 115 s after their order, neither served a request).
        A floor's ask, a jump of two or more (a step the forecast sees coming) and a fleet at zero are ordered."""
        current, kept = demand.current_replicas, demand.release_after_fall
        if (
            kept is None
            or current < 1
            or raw.replicas != current + 1
            or raw.reason not in ("predictive", "reactive")
            or kept + demand.stuck_replicas > current
            or self.config.tolerances.is_within(current / raw.replicas)
        ):
            return None
        return Step(
            current,
            "within_release",
            f"{raw.message}; not ordering {raw.replicas}: at the load's measured fall within the horizon, the load "
            f"and its measured rise fit {current} at full capacity ({kept} serving), so the scale-down window could "
            "release it before it serves",
        )

    def _stabilise(self, step: Step, demand: Demand, now: float) -> Step:
        """A scale-down goes no lower than the highest need over the stabilisation window (never above the
        current count), and, where the planner measured it, the window holds no more than what today's load plus
        its measured rise within the window needs, never fewer than carry today's load with one replica lost
        (`Demand.release_replicas`): the window holds against the load returning before a released replica could,
        and the N+1 spare against a replica lost until its replacement serves."""
        c = self.config
        current = demand.current_replicas
        if step.replicas >= current:
            return step
        hold = c.scale_down_stabilisation_s if c.forecast_hold_s is None else c.forecast_hold_s
        window_max = max(
            (
                need if now - t <= hold else measured
                for t, need, measured in self._history
                if now - t <= c.scale_down_stabilisation_s
            ),
            default=step.replicas,
        )
        if window_max <= step.replicas:
            return step
        held = min(window_max, current)
        if demand.release_replicas is not None:
            returns = demand.release_replicas + demand.stuck_replicas
            if returns < held:
                held = max(step.replicas, returns)
                if held <= step.replicas:
                    return step
                return Step(
                    held,
                    "stabilised",
                    f"{step.message}; holding {held} for the load's measured rise within the "
                    f"{c.scale_down_stabilisation_s:.0f} s window, or for one replica lost once the load spans two "
                    f"({demand.release_replicas} serving at full capacity)",
                )
        return Step(
            held,
            "stabilised",
            f"{step.message}; holding {held} for the {c.scale_down_stabilisation_s:.0f} s scale-down window",
        )

    def _limit_step(self, step: Step, current: int) -> Step:
        """At most ``scale_up_max_step`` added and ``scale_down_max_step`` removed per decision (0: unlimited)."""
        c = self.config
        if c.scale_up_max_step and step.replicas > current + c.scale_up_max_step:
            return Step(
                current + c.scale_up_max_step,
                "step_limited",
                f"{step.message}; adding at most {c.scale_up_max_step} per step",
            )
        if c.scale_down_max_step and step.replicas < current - c.scale_down_max_step:
            return Step(
                current - c.scale_down_max_step,
                "step_limited",
                f"{step.message}; removing at most {c.scale_down_max_step} per step",
            )
        return step

    # -- helpers -------------------------------------------------------------------------------------------
    def _need(self, rate: float, capacity_rps: float, point: float | None = None, margin_scale: float = 1.0) -> int:
        """Replicas for a rate (a forecast's upper bound, whose ``point`` is given); a trickle under
        ``idle_below_rps`` (less than a request per horizon) needs none."""
        c = self.config
        if rate < c.idle_below_rps:
            return 0
        if c.headroom == "adaptive":
            return adaptive_replicas(point, rate, capacity_rps, c.target_utilisation, margin_scale)
        if c.headroom == "fixed" or (c.headroom == "lean" and point is None):
            return _replicas_for(rate, capacity_rps, c.target_utilisation)
        if c.headroom == "lean":
            return lean_replicas(min(max(point or 0.0, 0.0), rate), rate, capacity_rps, c.target_utilisation)
        mean = rate if point is None else min(max(point, 0.0), rate)
        return pooled_replicas(mean / capacity_rps, c.target_utilisation, (rate - mean) / capacity_rps)

    def enough(self, replicas: int, rate: float, capacity_rps: float) -> bool:
        """Whether ``replicas`` serve ``rate`` with the spare this policy plans (the SLO feedback judges only
        such a fleet)."""
        c = self.config
        if capacity_rps <= 0:
            return False
        if c.headroom != "pooled":
            return replicas * capacity_rps * c.target_utilisation >= rate
        load = rate / capacity_rps
        return replicas >= load + spare_replicas(load, c.target_utilisation)

    def _hold(self, demand: Demand, now: float, reason: str, message: str) -> Recommendation:
        self._history.append((now, demand.current_replicas, demand.current_replicas))
        return self._clamp(Step(demand.current_replicas, reason, message), 0, None, None)

    def _clamp(
        self, step: Step, warm_pool: int, predictive: int | None, reactive: int | None, burst: int | None = None
    ) -> Recommendation:
        """The last stage: min_replicas and max_replicas bind whatever came before."""
        c = self.config
        if step.replicas < c.min_replicas:
            step = Step(c.min_replicas, "clamped_min", f"{step.message}; raised to min_replicas {c.min_replicas}")
        if c.max_replicas is not None and step.replicas > c.max_replicas:
            step = Step(c.max_replicas, "clamped_max", f"{step.message}; capped at max_replicas {c.max_replicas}")
        return Recommendation(
            step.replicas, min(warm_pool, step.replicas), step.reason, step.message, predictive, reactive, burst
        )


def need_phrase(what: str, replicas: int | None, unknown: str) -> str:
    """A part's need as the decision's message says it to an operator (never a bare None)."""
    return unknown if replicas is None else f"{what} needs {replicas}"
