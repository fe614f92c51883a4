"""Prefix-cache misses: the deployment's windowed hit ratio (Δhits/Δqueries, tokens) against its own baseline.

It fires on the pattern that routing can fix: shared prefixes still exist (the deployment keeps a clear
residue of hits) but every replica's ratio fell together, because requests that share a prefix are spread
over replicas (a scale-out, or a router that lost affinity). A smaller fall counts where the replicas' ratios also
became alike: a router that spreads requests regardless of their prefixes sends every replica the same mix, while
one that keeps prefixes together leaves each its own ratio (``detectors._ratio_spread``). It stays silent when the
ratio falls to ~0:
spreading cannot erase the hits of a prefix that is reused, so that is traffic that stopped sharing
prefixes, and no routing change would bring the hits back. It also stays silent while the deployment preempts
more than in its baseline: KV pressure evicts cached prefixes and floods the window with unshared prompt tokens,
and kv_exhaustion reports it.
"""

from __future__ import annotations

import math
import operator
import statistics
from bisect import bisect_left, bisect_right, insort
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import NamedTuple

from collector.state import DeploymentPoint, DeploymentSignals, DeploymentView, FleetState
from detectors._ratio_spread import spreads
from detectors._values import finite, fraction
from detectors.finding import Finding, Severity, Subject
from detectors.hysteresis import Hysteresis
from detectors.thresholds import HysteresisPolicy, PrefixThresholds, Thresholds

KIND = "prefix_cache_miss"


class Baseline(NamedTuple):
    """The deployment before the recent window, in medians: a burst somewhere in that history moves none of them
    (with it, the bar a new burst of preemption must clear). A background too sparse to show in half of its rate
    windows has a median of zero, and then any preemption in the settle window silences the detector."""

    hit_ratio: float  # median
    ready_replicas: float  # median
    preemptions_per_replica_s: float  # median of the deployment's preemption rate over its ready replicas


def baseline(history: Sequence[DeploymentPoint], th: PrefixThresholds, now: float) -> Baseline | None:
    """Medians over the history older than ``baseline_exclude_recent_s``; None when that history spans less than
    ``min_baseline_s``. Worked out from the whole history (``PrefixBaselines`` keeps the same answer tick by tick)."""
    cutoff = now - th.baseline_exclude_recent_s
    points = [p for p in history if p.t <= cutoff and fraction(p.prefix_hit_ratio) is not None]
    if not points or points[-1].t - points[0].t < th.min_baseline_s:
        return None
    return Baseline(
        hit_ratio=statistics.median(fraction(p.prefix_hit_ratio) or 0.0 for p in points),
        ready_replicas=statistics.median(p.ready_replicas for p in points),
        preemptions_per_replica_s=statistics.median(_preemptions_per_replica(p) for p in points),
    )


class _KeptBaseline:
    """One deployment's baseline kept from tick to tick: the points it last covered and each median's values, sorted.

    The baseline covers up to an hour of points (720 at 5 s) and moves by a point or two a tick, so a tick adds the
    points that aged past the cutoff and drops those the history let go, instead of three medians over all of them.
    The sorted lists stay what ``sorted`` makes of the values in history order (a new value goes after its equals,
    the oldest of equals leaves first), so each median is ``statistics.median``'s, to the sign of a zero."""

    __slots__ = ("counted", "covered", "preemptions", "ratios", "replicas")

    def __init__(self) -> None:
        self.covered: list[DeploymentPoint] = []  # the history's points at or before the last cutoff, oldest first
        self.counted: deque[DeploymentPoint] = deque()  # those with a hit ratio
        self.ratios: list[float] = []
        self.replicas: list[int] = []
        self.preemptions: list[float] = []

    def _clear(self) -> None:
        self.covered, self.ratios, self.replicas, self.preemptions = [], [], [], []
        self.counted.clear()

    def update(self, history: Sequence[DeploymentPoint], th: PrefixThresholds, now: float) -> Baseline | None:
        """``baseline(history, th, now)`` for a ``history`` oldest first (its times checked)."""
        cutoff = now - th.baseline_exclude_recent_s
        if not math.isfinite(cutoff) or not _in_order(history):
            self._clear()
            return baseline(history, th, now)
        covered = history[: bisect_right(history, cutoff, key=_t)]
        old = self.covered
        gone = bisect_left(old, covered[0].t, key=_t) if covered else len(old)
        kept = len(old) - gone
        # The points covered last that are still covered must start the points covered now, the very same objects;
        # otherwise this is another history (a deployment gone and back, one handed another state's): start again.
        if kept <= len(covered) and all(map(operator.is_, old[gone:], covered[:kept])):
            for p in old[:gone]:
                self._drop(p)
        else:
            self._clear()
            kept = 0
        for p in covered[kept:]:
            self._add(p)
        self.covered = list(covered)
        counted = self.counted
        if not counted or counted[-1].t - counted[0].t < th.min_baseline_s:
            return None
        return Baseline(
            hit_ratio=_median(self.ratios),
            ready_replicas=_median(self.replicas),
            preemptions_per_replica_s=_median(self.preemptions),
        )

    def _add(self, p: DeploymentPoint) -> None:
        ratio = fraction(p.prefix_hit_ratio)
        if ratio is not None:
            self.counted.append(p)
            insort(self.ratios, ratio or 0.0)
            insort(self.replicas, p.ready_replicas)
            insort(self.preemptions, _preemptions_per_replica(p))

    def _drop(self, p: DeploymentPoint) -> None:
        ratio = fraction(p.prefix_hit_ratio)
        if ratio is not None:
            self.counted.popleft()
            for values, value in (
                (self.ratios, ratio or 0.0),
                (self.replicas, p.ready_replicas),
                (self.preemptions, _preemptions_per_replica(p)),
            ):
                del values[bisect_left(values, value)]


def _median(values: Sequence[float]) -> float:
    """``statistics.median`` of values already sorted."""
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def _in_order(history: Sequence[DeploymentPoint]) -> bool:
    times = list(map(_t, history))
    return all(map(operator.le, times, times[1:]))


_t = operator.attrgetter("t")


class PrefixBaselines:
    """Each deployment's baseline kept from tick to tick (``_KeptBaseline``), per cutoff, by whoever holds one fleet
    state across ticks (``detectors.registry.Detection``). A deployment's entries go when the state no longer has
    it (``keep_only``); one back later starts again from its history, to the same medians.

    With the lost-affinity option on, it also knows which of this detector's findings are open: a ``Hysteresis``
    under the control loop's policy, fed this detector's candidates as the loop's is (``note``), so it opens and
    closes them on the same ticks. An open finding is held through ticks that cannot tell (``_held``)."""

    __slots__ = ("_deployments", "_fed", "_open")

    def __init__(self) -> None:
        self._deployments: dict[str, dict[float, _KeptBaseline]] = {}  # deployment key -> cutoff -> kept
        self._open: Hysteresis | None = None
        self._fed: float | None = None  # the last tick noted

    def baseline(
        self, key: str, history: Sequence[DeploymentPoint], th: PrefixThresholds, now: float
    ) -> Baseline | None:
        """``baseline(history, th, now)`` for deployment ``key``, from what was kept at its last ask."""
        cutoffs = self._deployments.setdefault(key, {})
        kept = cutoffs.get(th.baseline_exclude_recent_s)
        if kept is None:
            kept = cutoffs[th.baseline_exclude_recent_s] = _KeptBaseline()
        return kept.update(history, th, now)

    def open_findings(self) -> dict[str, Finding]:
        """The findings open after the last tick noted, by deployment."""
        return {} if self._open is None else {f.subject.deployment: f for f in self._open.active()}

    def note(self, found: Sequence[Finding], policy: Callable[[str], HysteresisPolicy], now: float) -> None:
        """One tick's candidates, once a tick (a second ask at the same tick changes nothing). A tick is told by its
        time, not ordered by it: after a step back of the wall clock (NTP) the ticks come earlier than the last one
        noted, and refusing them held what was open for as long as the step, an hour after the loop closed it."""
        if now == self._fed:
            return
        if self._open is None:
            self._open = Hysteresis(policy)
        self._open.update(found, now=now)
        self._fed = now

    def keep_only(self, deployments: Collection[str]) -> None:
        """Forget every deployment whose key is not in ``deployments``: those the fleet no longer has."""
        for key in [k for k in self._deployments if k not in deployments]:
            del self._deployments[key]

    def __contains__(self, deployment: object) -> bool:
        return deployment in self._deployments


def settle_window_s(th: PrefixThresholds, rate_window_s: float) -> float:
    """``settle_s``, and never less than two rate windows: traffic that stops sharing prefixes crosses the band
    between the bar and ``no_sharing_ratio`` within one rate window, so it never fills half of the settle window,
    and the median rule below stays silent on it whatever the configured rate window."""
    return max(th.settle_s, 2.0 * rate_window_s)


def _queries_rate(view: DeploymentView) -> float:
    return sum(finite(r.prefix_queries_rate) or 0.0 for r in view.replicas if r.ready)


def _preemptions_per_replica(signals: DeploymentSignals) -> float:
    """Preemptions per second per ready replica (a missing rate counts as none): a scale-out adds replicas that
    preempt in the background as the others do, and that is no new KV pressure."""
    rate = finite(signals.preemptions_rate) or 0.0
    return rate / signals.ready_replicas if signals.ready_replicas > 0 else 0.0


def _window_preemptions(view: DeploymentView, recent: Sequence[DeploymentPoint]) -> float:
    """Preemptions per second per ready replica over the settle window (each point's rate covers the rate window
    before it, as its hit ratio does). The mean, not the peak: the mean is about the window's count over its span,
    so a burst adds all of its preemptions to it while a steady background averages out; the peak of many
    overlapping rate windows of a steady background sits above that background's median by chance."""
    return statistics.fmean([_preemptions_per_replica(view), *(_preemptions_per_replica(p) for p in recent)])


def _settled_ratio(recent: Sequence[DeploymentPoint]) -> float:
    """The median hit ratio over the settle window (the baseline is a median too): a fall that holds for most of the
    window counts, whatever the noise above the bar in the rest. A point without a ratio counts as above any bar."""
    return statistics.median(r if (r := fraction(p.prefix_hit_ratio)) is not None else math.inf for p in recent)


# The fewest replicas whose spread can say that they became alike. Two replicas' ratios are one difference, and
# prefix affinity lets it close for minutes whenever the traffic's mix moves both together (the demo's workload over
# 2 fixed affinity replicas: the lost-affinity reading opened with no routing change on 2 of 4 seeds); three or more
# must all meet at once.
MIN_SPREAD_REPLICAS = 3


class Spreads(NamedTuple):
    """How alike the replicas' hit ratios are (``detectors._ratio_spread``): over the rate window ending now, their
    median over ``lost_affinity_window_s`` (every tick) and over the baseline (one time per rate window)."""

    now: float | None
    settled: float | None
    baseline: float | None

    def _alike(self, spread: float | None, th: PrefixThresholds) -> bool:
        return (
            spread is not None
            and self.baseline is not None
            and self.baseline >= th.min_baseline_spread
            and spread <= th.lost_affinity_spread * self.baseline
        )

    def evened_out(self, th: PrefixThresholds) -> bool:
        """The replicas' ratios became alike, from a baseline where they were not, and are alike now: lost affinity.
        A router that spreads prefixes keeps them alike for as long as it runs, while prefix affinity lets them meet
        by chance for a few minutes, then part."""
        return self._alike(self.settled, th) and self._alike(self.now, th)

    def still_alike(self, th: PrefixThresholds) -> bool:
        """Alike over most of the window (an open finding's hold: the fault read as still there)."""
        return self._alike(self.settled, th)


def _spreads(
    state: FleetState, view: DeploymentView, history: Sequence[DeploymentPoint], th: PrefixThresholds, now: float
) -> Spreads:
    """Read from the replicas' kept history, so only where a fall asks for it (not every tick of every deployment)."""
    recent = [p.t for p in history if p.t >= now - th.lost_affinity_window_s]
    cutoff = now - th.baseline_exclude_recent_s
    baseline_times: list[float] = []
    for p in history:
        if p.t > cutoff:
            break
        if not baseline_times or p.t - baseline_times[-1] >= state.rate_window_s:
            baseline_times.append(p.t)
    replicas = [r.key for r in view.replicas]

    def spread(times: list[float], *, least: int = 1) -> float | None:
        # a replica counts once it has served a rate window: its first one fills its cache
        found = spreads(state, replicas, times, min_replicas=MIN_SPREAD_REPLICAS, warm_s=state.rate_window_s)
        return statistics.median(found) if len(found) >= least else None

    # The baseline's spread is read over the replicas there now, at the times when enough of them served: like the
    # baseline ratio, it needs min_baseline_s of such times before it is trusted (a fleet whose replicas were
    # replaced or added within the baseline has a few such minutes at first, and their spread says little).
    least = max(1, math.ceil(th.min_baseline_s / state.rate_window_s))
    return Spreads(now=spread([now]), settled=spread(recent), baseline=spread(baseline_times, least=least))


def _masked(
    view: DeploymentView,
    history: Sequence[DeploymentPoint],
    base: Baseline,
    th: PrefixThresholds,
    now: float,
    settle_s: float,
) -> bool:
    """New KV pressure in any window the lost-affinity reading looks at (the settle window, the spread's window):
    preemption evicts cached prefixes unevenly and floods the windows with unshared prompts, so neither the ratio
    nor the replicas' spread says anything about routing until it has left them."""
    bar = base.preemptions_per_replica_s * th.preemption_rise_factor
    for span in {settle_s, max(settle_s, th.lost_affinity_window_s)}:
        recent = [p for p in history if p.t >= now - span]
        if _window_preemptions(view, recent) > bar:
            return True
    return False


def _held(finding: Finding, why: str) -> Finding:
    """An open finding kept through a tick that did not confirm it but could not tell it was over: its reading as
    last confirmed, with why it is held."""
    return replace(finding, evidence={**finding.evidence, "held": why})


def _deployment_finding(
    state: FleetState,
    view: DeploymentView,
    history: Sequence[DeploymentPoint],
    th: PrefixThresholds,
    now: float,
    settle_s: float,
    baselines: PrefixBaselines,
    held: Finding | None = None,
) -> Finding | None:
    """The tick's finding for one deployment. ``held``: its finding open now, with the lost-affinity option on: kept
    while new KV pressure masks the reading, and while the replicas' ratios stay alike below the baseline (the router
    still spreads prefixes; the fall's size moves with the traffic) — closed only once a tick reads the fault over."""
    current = fraction(view.prefix_hit_ratio)
    if current is None or _queries_rate(view) < th.min_queries_rate:
        return None
    base = baselines.baseline(view.key, history, th, now)
    if base is None:
        return None
    base_ratio, base_replicas = base.hit_ratio, base.ready_replicas
    if base_ratio < th.min_baseline:
        return None
    threshold = base_ratio * (1.0 - th.relative_drop)
    # With the replicas' ratios evened out, a smaller fall counts (lost_affinity_drop <= relative_drop)
    even_threshold = threshold if th.lost_affinity_drop is None else base_ratio * (1.0 - th.lost_affinity_drop)
    recent = [p for p in history if p.t >= now - settle_s]
    settled = _settled_ratio(recent) if recent else math.inf
    if held is not None and _masked(view, history, base, th, now, settle_s):
        return _held(held, "kv_pressure")

    def still_lost(read: Spreads | None = None) -> Finding | None:
        if held is None or settled >= base_ratio:
            return None
        alike = (read or _spreads(state, view, history, th, now)).still_alike(th)
        return _held(held, "replicas_alike") if alike else None

    if settled >= max(threshold, even_threshold):
        return still_lost()  # not fallen for most of the settle window
    if current <= th.no_sharing_ratio or any(
        (r := fraction(p.prefix_hit_ratio)) is not None and r <= th.no_sharing_ratio for p in recent
    ):
        return None  # the traffic stopped sharing prefixes: routing cannot bring hits back
    preemptions = _window_preemptions(view, recent)
    if preemptions > base.preemptions_per_replica_s * th.preemption_rise_factor:
        return None  # new KV pressure evicted the cached prefixes: kv_exhaustion reports it, routing is not the cause
    per_replica = [v for r in view.replicas if r.ready and (v := fraction(r.prefix_hit_ratio)) is not None]
    spread = max(per_replica) - min(per_replica) if per_replica else 0.0
    scaled_out = view.ready_replicas > base_replicas
    collapsed_together = len(per_replica) >= 2 and spread <= th.replica_spread
    spreads = _spreads(state, view, history, th, now)
    fell_far = settled < threshold and (scaled_out or collapsed_together)
    if fell_far:
        pattern = "scale_out" if scaled_out else "spread"
        how = (
            f"as ready replicas rose from {base_replicas:g} to {view.ready_replicas}"
            if scaled_out
            else f"on all {len(per_replica)} replicas together"
        )
        bar = th.relative_drop
    elif settled < even_threshold and th.lost_affinity_drop is not None and spreads.evened_out(th):
        pattern = "lost_affinity"
        how = (
            f"while its {len(per_replica)} replicas' ratios became alike (spread {spreads.settled:.2f}, "
            f"{spreads.baseline:.2f} before)"
        )
        bar = th.lost_affinity_drop
    else:
        # one replica's cache (the other detectors see that replica), or a smaller fall with the replicas' skew kept:
        # traffic that shares less under a router that still keeps prefixes together
        return still_lost(spreads)
    drop = 1.0 - settled / base_ratio
    return Finding(
        kind=KIND,
        severity=Severity.WARNING,
        subject=Subject(deployment=view.key),
        since=now,
        summary=(
            f"prefix-cache hit ratio of {view.key} fell from {base_ratio:.0%} to {settled:.0%} {how} "
            f"(down {drop:.0%}, warns from {bar:.0%}): shared prefixes are spread over replicas, "
            "their prompts recomputed; use prefix-aware or sticky routing"
        ),
        evidence={
            "hit_ratio": current,
            "settled_hit_ratio": settled,
            "settle_window_s": settle_s,
            "baseline_hit_ratio": base_ratio,
            "baseline_ready_replicas": base_replicas,
            "preemptions_per_replica_s": preemptions,
            "baseline_preemptions_per_replica_s": base.preemptions_per_replica_s,
            "ready_replicas": float(view.ready_replicas),
            "replica_ratio_min": min(per_replica) if per_replica else None,
            "replica_ratio_max": max(per_replica) if per_replica else None,
            "replica_ratio_spread": spreads.settled,
            "replica_ratio_spread_now": spreads.now,
            "baseline_replica_ratio_spread": spreads.baseline,
            "pattern": pattern,
            "drop": drop,
            "drop_threshold": bar,
        },
        action="prefix_aware_routing",
    )


def detect(
    state: FleetState, *, thresholds: Thresholds, now: float, baselines: PrefixBaselines | None = None
) -> list[Finding]:
    """Findings for every deployment; ``baselines``: those kept for ``state`` across ticks (``Detection`` holds
    them; without, each is worked out afresh from the whole history)."""
    baselines = PrefixBaselines() if baselines is None else baselines
    th = thresholds.prefix
    keeps = th.lost_affinity_drop is not None  # the option holds open findings (PrefixBaselines knows which)
    held = baselines.open_findings() if keeps else {}
    out: list[Finding] = []
    settle_s = settle_window_s(th, state.rate_window_s)
    for key, view in state.deployments().items():
        history = state.deployment_history(key)
        finding = _deployment_finding(state, view, history, th, now, settle_s, baselines, held.get(key))
        if finding is not None:
            out.append(finding)
    if keeps:
        baselines.note(out, thresholds.policy, now)
    return out
