"""KV-cache exhaustion: a replica's KV pool preempting, full with a queue, or projected full soon and still filling.

The pool belongs to one replica, so every test is per replica: a deployment mean of 60 % can hide one replica at
100 % that is already preempting. What the engine tells is read together, never one gauge alone:

- the usage trend: a robust (Theil-Sen) slope of ``kv_usage`` over the recent history, projected to the time the
  pool is full (``time_to_exhaustion_s``);
- the flow that fills it: a pool grows while requests arrive faster than they finish (``arrival_rate`` above
  ``requests_finished_rate``: more sequences in flight, each growing by one token per decode step) or while requests
  wait for admission; it levels off when they balance. A trend projection alone cannot tell a ramp that will
  overflow from one that is about to level off at 70 %; the flow can, a little before the usage does;
- demand by Little's law, where the control loop passes the planner's numbers in (``Demand``: the per-replica
  saturation rate at the current token mix and the forecast arrival rate at the horizon, as plain numbers:
  detectors do not import the scaler): the replica's usage scaled from its measured arrivals to its share of
  the forecast, with time in system growing as the batch does (``projected_usage``). In the simulator a pool
  stays low while its replicas keep up and fills in 10-20 s once arrivals pass what they serve, so a ramp 60 s
  before its collapse and a plateau that holds look alike to every engine signal; the forecast is what can
  tell them apart;
- the preemption counter: the exhaustion itself. It counts only when the pool was actually near full within the
  rate window (vLLM preempts when no free block remains): a counter that moves while the pool sits far from full
  is a reset or a mislabelled series, never a reason to page.

Severity follows the projected time to exhaustion and the measured preemptions, and the summary says both.
A KV usage outside 0..1 (a doubled gauge, a broken exporter) is unknown here, never "full": it cannot page.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import statistics
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from collector.samples import ReplicaSample
from collector.state import FleetState, ReplicaView
from collector.validity import fraction
from detectors._values import finite
from detectors.finding import Finding, Severity, Subject
from detectors.kv_trend import KvTrends, thinned, window_trend
from detectors.thresholds import KvThresholds, Thresholds

KIND = "kv_exhaustion"

_timestamp = operator.attrgetter("timestamp")


def kv_trend(
    history: Sequence[ReplicaSample],
    kv: KvThresholds,
    window_s: float | None = None,
    *,
    trends: KvTrends | None = None,
) -> tuple[float, float] | None:
    """Theil-Sen (slope per second, fitted usage at the latest sample) of kv_usage over the trend window (or
    ``window_s``) of ``history`` (oldest first); None when too few points. Read from the window's samples alone,
    and with ``trends`` (the state's ``KvTrends``) once per replica and tick: the detector and the exported
    projection both ask for it."""
    if not history:
        return None
    return window_trend(history, kv.trend_window_s if window_s is None else window_s, kv.min_trend_samples, trends)


def kv_slope_per_s(
    history: Sequence[ReplicaSample], kv: KvThresholds, *, trends: KvTrends | None = None
) -> float | None:
    trend = kv_trend(history, kv, trends=trends)
    return None if trend is None else trend[0]


def time_to_exhaustion_s(
    history: Sequence[ReplicaSample],
    kv: KvThresholds,
    window_s: float | None = None,
    *,
    trends: KvTrends | None = None,
) -> float | None:
    """Projected seconds until the pool reaches ``kv.full`` from the trend over ``kv.trend_window_s`` (or
    ``window_s``): 0 when already there, None when not filling (flat or draining, fitted usage below
    ``project_from_usage``, or unknown). Exported as ``kvpilot_kv_time_to_exhaustion_seconds``."""
    latest = fraction(history[-1].kv_usage) if history else None
    if latest is None:
        return None
    if latest >= kv.full:
        return 0.0
    trend = kv_trend(history, kv, window_s, trends=trends)
    if trend is None:
        return None
    slope, level = trend
    if slope <= 0 or level < kv.project_from_usage:
        return None
    return max(0.0, (kv.full - level) / slope)


def arrival_rates(history: Sequence[ReplicaSample], rate_window_s: float, over_s: float) -> list[tuple[float, float]]:
    """The replica's arrival rate (requests/s over ``rate_window_s``: finished plus the change in flight, as
    FleetState measures it) at each sample of the last ``over_s``, as (time, rate); a counter missing or reset
    leaves its sample out."""
    arrived = [
        (s.timestamp, fin + run + wait)
        for s in history
        if (fin := finite(s.requests_finished)) is not None
        and (run := finite(s.requests_running)) is not None
        and (wait := finite(s.requests_waiting)) is not None
    ]
    if not arrived:
        return []
    start = arrived[-1][0] - over_s
    rates = []
    j = 0
    for t, a in arrived:
        if t < start:
            continue
        while j + 1 < len(arrived) and arrived[j + 1][0] <= t - rate_window_s:
            j += 1
        t0, a0 = arrived[j]
        if t0 <= t - rate_window_s and a >= a0:
            rates.append((t, (a - a0) / (t - t0)))
    return rates


def arrival_spread(history: Sequence[ReplicaSample], rate_window_s: float, over_s: float) -> float | None:
    """How bursty the replica's arrivals are: the standard deviation of its ``arrival_rates`` over the last
    ``over_s``; None with fewer than 3 rates."""
    rates = [r for _, r in arrival_rates(history, rate_window_s, over_s)]
    return statistics.pstdev(rates) if len(rates) >= 3 else None


@dataclass(frozen=True, slots=True)
class Demand:
    """What the planner knows of one deployment's demand, handed to the detector by the control loop as plain
    numbers (``detectors`` may not import ``scaler``): what one ready replica serves (requests/s at the current
    token mix, the planner's ``capacity_rps``) and the arrival rate it forecasts ``horizon_s`` ahead, plus how fast
    that demand, in replicas' worth (forecast over capacity), has been moving (``replicas_slope_per_s``, filled in
    by ``DemandTrend`` from the last few minutes). Any may be unknown (None or NaN): the detector then reads what it
    has."""

    capacity_rps: float | None
    forecast_rps: float | None
    horizon_s: float
    replicas_slope_per_s: float | None = None

    def load(self, ready_replicas: int) -> float | None:
        """Forecast arrivals over what ``ready_replicas`` serve (1 = exactly at capacity); None when unknown."""
        cap, fc = finite(self.capacity_rps), finite(self.forecast_rps)
        if cap is None or fc is None or cap <= 0 or ready_replicas <= 0:
            return None
        return max(fc, 0.0) / (cap * ready_replicas)

    def load_ahead(self, ready_replicas: int, ahead_s: float) -> float | None:
        """``load`` with the demand carried ``ahead_s`` further along its own recent trend (rising or falling);
        the plain load when the trend is unknown, None when the load is."""
        cap, fc, slope = finite(self.capacity_rps), finite(self.forecast_rps), finite(self.replicas_slope_per_s)
        if cap is None or fc is None or cap <= 0 or ready_replicas <= 0:
            return None
        ahead = max(fc, 0.0) / cap + (slope or 0.0) * ahead_s
        return max(ahead, 0.0) / ready_replicas

    def rise_per_min(self, ready_replicas: int) -> float | None:
        """How much load the demand's trend adds a minute (replicas' worth per ready replica): the demand still
        rising, or levelled off; None when the trend or the replicas are unknown."""
        slope = finite(self.replicas_slope_per_s)
        return None if slope is None or ready_replicas <= 0 else slope * 60.0 / ready_replicas

    def replicas(self) -> float | None:
        """The forecast in replicas' worth: forecast arrivals over what one ready replica serves; None if unknown."""
        cap, fc = finite(self.capacity_rps), finite(self.forecast_rps)
        return None if cap is None or fc is None or cap <= 0 else max(fc, 0.0) / cap

    def projected_usage(
        self, usage: float, arrival_rps: float | None, ready_replicas: int, burst_rps: float = 0.0
    ) -> float | None:
        """The replica's KV usage at the horizon by Little's law (``projected_usage``), from its measured arrivals
        and usage and this deployment's forecast shared over its ready replicas plus ``burst_rps`` (the margin for
        this replica's burstiness); None when unknown."""
        cap, fc, now = finite(self.capacity_rps), finite(self.forecast_rps), finite(arrival_rps)
        if cap is None or fc is None or now is None or cap <= 0 or ready_replicas <= 0:
            return None
        return projected_usage(usage, now, max(fc, 0.0) / ready_replicas + burst_rps, cap)


class DemandTrend:
    """The planner's demand per deployment over the last ``window_s``, in replicas' worth (``Demand.replicas``: the
    forecast over what one replica serves at the current token mix, so longer requests count as more demand), kept
    by whoever holds the detector across ticks (``Detection``): each tick's ``Demand`` comes back with
    ``replicas_slope_per_s``, the Theil-Sen slope of that demand within the window (None with fewer than
    ``min_samples``). Demand that has been rising for minutes keeps rising past the horizon more often than not;
    demand that holds does not, and that is what tells a ramp from a plateau at the same load. Deployments without
    numbers this tick are forgotten."""

    def __init__(self, window_s: float, min_samples: int = 3) -> None:
        if not window_s > 0:
            raise ValueError(f"DemandTrend: window_s must be > 0, got {window_s}")
        self.window_s = window_s
        self.min_samples = min_samples
        self._seen: dict[str, list[tuple[float, float]]] = {}

    def observe(self, now: float, demand: Mapping[str, Demand]) -> dict[str, Demand]:
        out: dict[str, Demand] = {}
        for key, d in demand.items():
            points = [(t, v) for t, v in self._seen.get(key, []) if now - self.window_s <= t < now]
            replicas = d.replicas()
            if replicas is not None:
                points.append((now, replicas))
            self._seen[key] = points
            out[key] = dataclasses.replace(d, replicas_slope_per_s=_theil_sen_slope(points, self.min_samples))
        for key in [k for k in self._seen if k not in demand]:
            del self._seen[key]
        return out


def _theil_sen_slope(points: Sequence[tuple[float, float]], min_samples: int) -> float | None:
    if len(points) < min_samples:
        return None
    points = thinned(list(points))  # a short tick's many points cost pairs, not reading (kv_trend.MAX_TREND_POINTS)
    slopes = [(v2 - v1) / (t2 - t1) for i, (t1, v1) in enumerate(points) for t2, v2 in points[i + 1 :] if t2 > t1]
    return statistics.median(slopes) if slopes else None


def projected_usage(usage: float, arrival_rps: float, forecast_rps: float, capacity_rps: float) -> float | None:
    """KV usage when the arrivals reach ``forecast_rps`` (one replica's share), by Little's law.

    The pool holds (sequences in flight) x (tokens per sequence), and sequences in flight = arrival rate x time
    in system. Time in system grows with the batch: a decode step costs a fixed part plus a part per sequence
    and per KV token read (scaler.capacity.ServingProfile), so with ``rho`` = arrivals / the saturation rate
    (``capacity_rps``, where the step cost per request outgrows what arrives), time in system ~ W0 / (1 - rho)
    and the sequences in flight ~ rate / (1 - rho). Tokens per sequence stay those measured now (usage / running),
    so the usage scales by the same factor:

        projected = usage x [forecast / (1 - rho_forecast)] / [arrivals / (1 - rho_now)]

    Infinite when the forecast reaches the saturation rate (the queue grows without bound; the pool fills);
    None when the replica measures no arrivals (nothing to scale from)."""
    if arrival_rps <= 1e-9 or capacity_rps <= 0:
        return None
    rho_f = forecast_rps / capacity_rps
    if rho_f >= 1.0:
        return math.inf
    rho_now = min(arrival_rps / capacity_rps, _MAX_RHO_NOW)
    return usage * (forecast_rps / (1.0 - rho_f)) / (arrival_rps / (1.0 - rho_now))


# Arrivals measured at or past the saturation rate (a burst, a noisy 60 s rate) would make the pool's present
# state look like an infinite queue and every lower forecast look like relief; capped here.
_MAX_RHO_NOW = 0.95


@dataclass(frozen=True, slots=True)
class KvReading:
    """What the detector read for one replica at one tick (also its evidence)."""

    usage: float
    peak_usage: float  # highest usage within the rate window
    slope_per_s: float | None
    time_to_exhaustion_s: float | None
    confirm_time_to_exhaustion_s: float | None  # the same projection over the longer confirm window
    requests_waiting: float | None
    requests_running: float | None
    preemptions_rate: float | None  # measured preemptions per second over the rate window
    in_flight_growth: float | None  # arrival_rate - requests_finished_rate, requests/s
    arrival_rate: float | None
    load: float | None = None  # the deployment's forecast arrivals over what its ready replicas serve (Demand)
    load_ahead: float | None = None  # the same with the forecast carried further along its trend (Demand.load_ahead)
    demand: Demand | None = None
    projected_usage: float | None = None  # usage at the horizon by Little's law (Demand.projected_usage)
    demand_rise: float | None = None  # load the demand's trend adds a minute (Demand.rise_per_min)
    arrivals_rise: float | None = None  # load the replica's own arrivals added a minute (over the trend window)

    @property
    def preempting(self) -> bool:
        return (self.preemptions_rate or 0.0) > 0.0

    def filling(self, th: KvThresholds) -> bool:
        """Still filling by the flow: requests wait for admission, or arrive faster than they finish."""
        if (self.requests_waiting or 0.0) > 0.0:
            return True
        growth, arrivals = self.in_flight_growth, self.arrival_rate
        if growth is None or arrivals is None:
            return True  # the engine does not say: the trend alone decides
        return growth > th.min_in_flight_growth * max(arrivals, 1e-9)

    def keeps_up(self, th: KvThresholds, ahead_s: float) -> bool:
        """Whether the pool levels off below full for ``ahead_s`` more seconds, by Little's law: a pool holds
        (sequences in flight) x (tokens per sequence), and the sequences in flight follow the arrivals
        (``projected_usage``), so the level the replica's load implies ``ahead_s`` from now is where a pool rising
        with its arrivals stops. The load: the larger of the replica's own measured arrivals and its share of the
        planner's forecast, over what one replica serves, carried along the faster of the rises of its own arrivals
        and of the demand. Below ``th.full``: the pool is reaching its level, not its end. False where a number is
        unknown (the trend alone then decides) or requests wait for admission (a queue)."""
        d = self.demand
        cap = None if d is None else finite(d.capacity_rps)
        arrivals = self.arrival_rate
        if cap is None or cap <= 0 or arrivals is None or arrivals <= 0 or self.arrivals_rise is None:
            return False
        if (self.requests_waiting or 0.0) > 0.0:
            return False
        rise = max(self.arrivals_rise, self.demand_rise or 0.0, 0.0)
        load = max(arrivals / cap, self.load or 0.0) + rise * max(ahead_s, 0.0) / 60.0
        level = projected_usage(self.usage, arrivals, load * cap, cap)
        return level is not None and level < th.full


def read(
    view: ReplicaView,
    history: Sequence[ReplicaSample],
    th: KvThresholds,
    rate_window_s: float,
    demand: Demand | None = None,
    ready_replicas: int = 0,
    *,
    confirm: bool = True,
    trends: KvTrends | None = None,
) -> KvReading | None:
    """The replica's reading from its ``history`` (oldest first, as ``FleetState`` keeps it), or None when its KV
    usage is unknown (not exported, or impossible); without the longer trend's projection
    (``confirm_time_to_exhaustion_s`` None) unless ``confirm``. ``trends``: the state's ``KvTrends`` (without, this
    reading's own: the slope and the projection share one fit)."""
    usage = fraction(view.sample.kv_usage)
    if usage is None:
        return None
    trends = KvTrends() if trends is None else trends
    # The rate window's samples: the history is oldest first, so they are found by bisection, not by a pass over it.
    start = view.sample.timestamp - rate_window_s
    recent = history[bisect_left(history, start, key=_timestamp) :]
    # `fraction` only where it could change a usage (see `kv_trend.fit_trend`).
    window = [v for s in recent if (v := s.kv_usage) is not None and (0.0 < v < 1.0 or (v := fraction(v)) is not None)]
    arrivals, finished = finite(view.arrival_rate), finite(view.requests_finished_rate)
    burst = 0.0
    if demand is not None and th.burst_margin > 0:
        spread = arrival_spread(history, rate_window_s, th.burst_window_s)
        burst = th.burst_margin * (spread or 0.0)
    return KvReading(
        usage=usage,
        peak_usage=max([usage, *window]),
        slope_per_s=kv_slope_per_s(history, th, trends=trends),
        time_to_exhaustion_s=time_to_exhaustion_s(history, th, trends=trends),
        confirm_time_to_exhaustion_s=(
            time_to_exhaustion_s(history, th, th.confirm_window_s, trends=trends) if confirm else None
        ),
        requests_waiting=finite(view.sample.requests_waiting),
        requests_running=finite(view.sample.requests_running),
        preemptions_rate=finite(view.preemptions_rate),
        in_flight_growth=None if arrivals is None or finished is None else arrivals - finished,
        arrival_rate=arrivals,
        load=None if demand is None else demand.load(ready_replicas),
        load_ahead=None if demand is None else demand.load_ahead(ready_replicas, th.demand_trend_ahead_s),
        demand=demand,
        projected_usage=None if demand is None else demand.projected_usage(usage, arrivals, ready_replicas, burst),
        demand_rise=None if demand is None else demand.rise_per_min(ready_replicas),
    )


def judge(r: KvReading, th: KvThresholds) -> tuple[Severity, str] | None:
    """(severity, what the operator reads) for a reading, or None when the pool is fine."""
    tte = r.time_to_exhaustion_s
    waiting = r.requests_waiting or 0.0
    if r.preempting and r.peak_usage >= th.near_full:
        return Severity.CRITICAL, (
            f"preempting {r.preemptions_rate:.2g} requests/s: KV cache {r.peak_usage:.0%} full within the last "
            f"minute (now {r.usage:.0%}), {waiting:g} waiting{_demand(r)}"
        )
    if r.usage >= th.near_full and waiting > 0:
        return Severity.CRITICAL, (
            f"KV cache {r.usage:.0%} full with {waiting:g} requests waiting for blocks: {_exhausted(tte)}; "
            f"no preemptions measured yet{_demand(r)}"
        )
    proj = r.projected_usage
    # Little's law: the forecast arrivals at the horizon hold more KV than this pool has (an option) ...
    littles_law = (
        proj is not None
        and th.projected_usage is not None  # None: the Little's-law rule is off
        and proj >= th.projected_usage
        and r.peak_usage >= th.projected_min_usage
    )
    # ... or demand at the horizon, carried along its own trend, passes what the ready replicas serve, on a pool
    # that already feels it, while that demand is still rising (one that has levelled off holds its pool).
    load = r.load if r.load_ahead is None else r.load_ahead
    rising = th.demand_min_rise is None or r.demand_rise is None or r.demand_rise >= th.demand_min_rise
    demand = (
        load is not None
        and th.demand_load is not None  # None: off
        and load >= th.demand_load
        and r.peak_usage >= th.demand_min_usage
        and rising
    )
    if littles_law or demand:
        severity = (
            Severity.CRITICAL
            if tte is not None and tte <= th.critical_time_to_exhaustion_s and waiting > 0
            else Severity.WARNING
        )
        projected = f"{_projected(proj)}; " if littles_law and proj is not None else ""
        return severity, (
            f"KV cache {r.usage:.0%} full ({r.peak_usage:.0%} within the last minute){_demand(r)}: "
            f"{projected}{_exhausted(tte)}; no preemptions measured yet"
        )
    confirm = r.confirm_time_to_exhaustion_s
    if tte is None or tte > th.warn_time_to_exhaustion_s or not r.filling(th):
        return None
    if tte > 0 and r.keeps_up(th, tte):
        return None  # rising with a demand the replica serves: reaching its level (the demo's first minutes)
    if tte > 0 and (confirm is None or confirm > th.confirm_time_to_exhaustion_s):
        return None  # the one-minute slope alone: too often a few long prompts admitted together
    severity = Severity.CRITICAL if tte <= th.critical_time_to_exhaustion_s and waiting > 0 else Severity.WARNING
    return severity, (
        f"KV cache {r.usage:.0%} full and filling at {(r.slope_per_s or 0.0) * 60:.0%}/min: {_exhausted(tte)}; "
        f"no preemptions measured yet{_demand(r)}"
    )


def _awaits_confirmation(r: KvReading, th: KvThresholds) -> bool:
    """Whether ``judge`` reads the longer trend's projection: the short one projects the pool full, filling, within
    the warning time, and not full already (``judge``'s last rule)."""
    tte = r.time_to_exhaustion_s
    return tte is not None and 0 < tte <= th.warn_time_to_exhaustion_s and r.filling(th) and not r.keeps_up(th, tte)


def _demand(r: KvReading) -> str:
    d = r.demand
    if d is None or r.load is None:
        return ""
    ahead = ""
    slope = finite(d.replicas_slope_per_s)
    if slope is not None and r.load_ahead is not None and slope != 0:
        ahead = f", {r.load_ahead:.0%} along its trend ({slope * 60:+.2g} replicas' worth per minute)"
    return (
        f"; demand {d.forecast_rps:.3g} requests/s forecast in {d.horizon_s:.0f} s, "
        f"{r.load:.0%} of what the ready replicas serve{ahead}"
    )


def _projected(proj: float) -> str:
    if math.isinf(proj):
        return "the forecast reaches what the replica serves: the queue and the pool grow without bound"
    return f"~{proj:.0%} of the pool held at the forecast (Little's law)"


def _exhausted(tte: float | None) -> str:
    # A warning from the demand (or Little's law) opens before the usage trend projects anything: the text says the
    # trend has no projection yet, not that the pool will not fill.
    if tte is None:
        return "no exhaustion projected by the usage trend yet"
    return "exhausted now" if tte <= 0 else f"exhausted in ~{tte:.0f} s"


def _replica_finding(
    view: ReplicaView,
    state: FleetState,
    th: KvThresholds,
    now: float,
    demand: Demand | None,
    ready_replicas: int,
    trends: KvTrends,
) -> Finding | None:
    # The history read: only the windows the reading looks at (rate and trend), not the hour kept; the whole history
    # where the arrivals' spread is read (it needs the last counted sample before its window, wherever that is).
    rate_window_s = state.rate_window_s
    latest_t = view.sample.timestamp
    if demand is not None and th.burst_margin > 0:
        history = state.replica_history(view.key)
    else:
        history = state.replica_history_since(view.key, latest_t - max(th.trend_window_s, rate_window_s))
    r = read(view, history, th, rate_window_s, demand, ready_replicas, confirm=False, trends=trends)
    if r is None:
        return None
    verdict = judge(r, th)
    if verdict is None and not _awaits_confirmation(r, th):
        return None
    # The longer trend is worked out only where it is read: where it decides (a projection alone), and for the
    # evidence of a finding. Nearly every replica at every tick is neither, and its fit costs 4x the short one's.
    if history[0].timestamp > latest_t - th.confirm_window_s:
        history = state.replica_history_since(view.key, latest_t - th.confirm_window_s)
    confirm = time_to_exhaustion_s(history, th, th.confirm_window_s, trends=trends)
    rise = None
    cap = None if demand is None else finite(demand.capacity_rps)
    if cap is not None and cap > 0:
        slope = _theil_sen_slope(arrival_rates(history, rate_window_s, th.trend_window_s), th.min_trend_samples)
        rise = None if slope is None else slope * 60.0 / cap
    r = dataclasses.replace(r, confirm_time_to_exhaustion_s=confirm, arrivals_rise=rise)
    verdict = judge(r, th)
    if verdict is None:
        return None
    severity, text = verdict
    return Finding(
        kind=KIND,
        severity=severity,
        subject=Subject(deployment=view.deployment_key, replica=view.sample.replica, node=view.sample.node),
        since=now,
        summary=f"{view.sample.replica}: {text}",
        evidence={
            "kv_usage": r.usage,
            "kv_usage_peak": r.peak_usage,
            "kv_slope_per_s": r.slope_per_s,
            "time_to_exhaustion_s": r.time_to_exhaustion_s,
            "confirm_time_to_exhaustion_s": r.confirm_time_to_exhaustion_s,
            "requests_waiting": r.requests_waiting,
            "requests_running": r.requests_running,
            "preemptions_rate": r.preemptions_rate,
            "in_flight_growth": r.in_flight_growth,
            "demand_load": r.load,
            "demand_load_ahead": r.load_ahead,
            "demand_replicas_slope_per_s": None if r.demand is None else finite(r.demand.replicas_slope_per_s),
            "demand_rise_per_min": r.demand_rise,
            "projected_usage": r.projected_usage,
            "capacity_rps": None if r.demand is None else finite(r.demand.capacity_rps),
            "forecast_rps": None if r.demand is None else finite(r.demand.forecast_rps),
        },
        action="scale_out",
    )


def detect(
    state: FleetState,
    *,
    thresholds: Thresholds,
    now: float,
    demand: Mapping[str, Demand] | None = None,
    trends: KvTrends | None = None,
) -> list[Finding]:
    """Findings for every ready replica; ``demand``: the planner's numbers per deployment key, where the control
    loop has them; ``trends``: the trends kept for ``state`` across ticks (``Detection`` holds them; without, this
    call's own)."""
    trends = KvTrends() if trends is None else trends
    out: list[Finding] = []
    ready = {k: v.ready_replicas for k, v in state.deployments().items()} if demand else {}
    for view in state.replicas():
        if not view.ready:
            continue  # a stale sample's KV usage says nothing about now; target_down reports it
        key = view.deployment_key
        hint = None if demand is None else demand.get(key)
        finding = _replica_finding(view, state, thresholds.kv, now, hint, ready.get(key, 0), trends)
        if finding is not None:
            out.append(finding)
    return out
