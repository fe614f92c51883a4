"""Rollouts: a deployment whose ready replicas serve two versions at once is being rolled.

A version is what the engine says about itself on every scrape: the model it serves and the engine that serves
it (a new build shows as a new engine name or model name; static and PromQL modes see nothing else). A rollout is
visible once replicas seen within ``RolloutThresholds.window_s`` report two versions (in static mode a replica
that is still loading serves no page, so the first wave shows when its replicas come up). While it runs, the
replicas taken out at once are the deficit of ready replicas against the most that were ready within the window:
drained ones are gone, their successors still load weights. Two findings:

- the rollout takes out more than ``RolloutThresholds.max_replaced_fraction`` of the replicas at once (the usual
  advice is ~25 %: each wave costs a cold start of reduced capacity, and TTFT's tail pays for it);
- TTFT burns the SLO's error budget faster than ``burn_factor`` over ``ttft_window_s`` during the rollout.

Both say the versions and how many replicas each serves, so the operator sees how far the rollout has got.

``observe`` is what the control loop's rollout stage reads (``scaler.rollout_stage.RolloutStage``): ready replicas per
version, which version is the new one (the one whose first replica appeared last), and the ready replicas now
against the window's peak. The stage and this detector read that peak no higher than the most ready since the
count of replicas asked for last fell (``ReadyPeaks``): the replicas a scale-down removes are no wave's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from collector.state import DeploymentView, FleetState, ReplicaView
from detectors.finding import Finding, Severity, Subject
from detectors.thresholds import Thresholds
from detectors.ttft_slo_burn import burn_rate, slow_share, window_histogram

KIND = "rollout"


def version(replica: ReplicaView) -> str:
    """What tells two builds of a replica apart on its metrics page: engine and model."""
    return f"{replica.sample.engine}:{replica.sample.model or '?'}"


def versions(view: DeploymentView, *, since: float) -> dict[str, int]:
    """Replicas seen at or after ``since`` per version, most replicas first (then by name, for a stable text)."""
    counts: dict[str, int] = {}
    for r in view.replicas:
        if r.last_seen >= since:
            counts[version(r)] = counts.get(version(r), 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


@dataclass(frozen=True, slots=True)
class Versions:
    """A deployment's versions at one tick (plain values, for the control loop's rollout stage)."""

    seen: dict[str, int]  # replicas seen within the window per version
    ready_by_version: dict[str, int]  # ready replicas now per version
    new_version: str | None  # the version whose first replica appeared last; None with one version
    ready: int
    peak_ready: int  # the most ready replicas within the window

    @property
    def text(self) -> str:
        return ", ".join(f"{n} on {v}" for v, n in self.seen.items())


def observe(state: FleetState, view: DeploymentView, th: Thresholds, now: float) -> Versions:
    since = now - th.rollout.window_s
    seen = versions(view, since=since)
    ready: dict[str, int] = {}
    first: dict[str, float] = {}
    for r in view.replicas:
        if r.last_seen < since:
            continue
        v = version(r)
        if r.ready:
            ready[v] = ready.get(v, 0) + 1
        started = state.replica_history_start(r.key)  # its oldest kept sample: all this reads of its history
        born = r.last_seen if started is None else started
        first[v] = min(first.get(v, born), born)
    new = max(first, key=lambda v: (first[v], v)) if len(first) >= 2 else None
    history_ready = [p.ready_replicas for p in state.deployment_history_since(view.key, since)]
    return Versions(seen, ready, new, view.ready_replicas, max([view.ready_replicas, *history_ready]))


class ReadyPeaks:
    """Per deployment, the most replicas ready since the count asked for last fell: the peak a ready deficit is read
    against, no higher than the window's. A scale-down (the planner's mid-rollout, or a surge withdrawn) removes
    replicas that never come back, so a deficit against a peak before it is no wave's: read against the window's,
    the planner's 18 -> 7 mid-rollout (Azure code x8, ``kvpilot backtest --rollout-at 300``) was a wave of 11 in
    progress. Each tick's ready replicas are capped by its count, so that pods of the scale-down still terminating
    (still scraped ready for a tick or two) do not raise the peak again; ready replicas, not the count, so that a
    surge loading cannot raise it. The rollout stage's tracker (``scaler.rollout.RolloutTracker``) and this
    detector each keep one, fed the same count each tick."""

    def __init__(self) -> None:
        # Per deployment: the count asked for at the last tick, and the most ready replicas (each tick's capped by its
        # count) since that count last fell; None until it has fallen.
        self._since_fall: dict[str, tuple[int | None, int | None]] = {}

    def forget(self, key: str) -> None:
        self._since_fall.pop(key, None)

    def keep_only(self, deployments: Collection[str]) -> None:
        """Forget every deployment whose key is not in ``deployments``: those the fleet no longer has."""
        for key in [k for k in self._since_fall if k not in deployments]:
            del self._since_fall[key]

    def read(self, key: str, *, ready: int, count: int | None, window_peak: int) -> int:
        """This tick's peak for ``key``: ``window_peak`` (the most ready within the window), no higher than the most
        ready since ``count`` (the replicas asked for; None: not known) last fell. Call it once a tick."""
        before, peak = self._since_fall.get(key, (None, None))
        capped = ready if count is None else min(ready, count)
        if count is not None and before is not None and count < before:
            peak = capped
        elif peak is not None:
            peak = max(peak, capped)
        self._since_fall[key] = (count, peak)
        return window_peak if peak is None else min(window_peak, peak)


def _finding(
    state: FleetState,
    view: DeploymentView,
    th: Thresholds,
    now: float,
    *,
    asked: Mapping[str, int] | None = None,
    peaks: ReadyPeaks | None = None,
) -> Finding | None:
    rollout = th.rollout
    obs = observe(state, view, th, now)
    peak = obs.peak_ready
    if asked is not None and peaks is not None:  # every tick, so that a fall is seen before the rollout is
        count = asked.get(view.key)
        peak = max(peaks.read(view.key, ready=view.ready_replicas, count=count, window_peak=peak), view.ready_replicas)
    seen = obs.seen
    if len(seen) < 2:
        return None  # one version (or none): no rollout visible
    replacing = peak - view.ready_replicas
    total = peak
    share = replacing / peak if peak else 0.0
    mix = obs.text
    evidence: dict[str, float | str | None] = {
        "replicas_ready_peak": float(total),
        "replicas_out": float(replacing),
        "replaced_share": share,
        "versions": mix,
    }
    slow = slow_share(window_histogram(state, view, rollout.ttft_window_s, now), th.ttft.target_s)
    burn = None if slow is None or slow[1] < th.ttft.min_requests else burn_rate(slow[0], th.ttft)
    evidence["ttft_burn_rate"] = burn
    if burn is not None and burn > rollout.burn_factor:
        severity = Severity.CRITICAL if share > rollout.max_replaced_fraction else Severity.WARNING
        summary = (
            f"{view.key}: TTFT burns its error budget {burn:.1f}x (above {rollout.burn_factor:g}x over "
            f"{rollout.ttft_window_s:g} s) during a rollout ({mix}; {replacing} of {total} replicas not ready)"
        )
    elif share > rollout.max_replaced_fraction:
        severity = Severity.WARNING
        summary = (
            f"{view.key}: a rollout replaces {replacing} of {total} replicas at once ({share:.0%}, above "
            f"{rollout.max_replaced_fraction:.0%}); {mix}"
        )
    else:
        return None
    return Finding(
        kind=KIND,
        severity=severity,
        subject=Subject(deployment=view.key),
        since=now,
        summary=summary,
        evidence=evidence,
        action="scale_out",
    )


def detect(
    state: FleetState,
    *,
    thresholds: Thresholds,
    now: float,
    replicas_asked: Mapping[str, int] | None = None,
    peaks: ReadyPeaks | None = None,
) -> list[Finding]:
    """``replicas_asked``: per deployment, the count of replicas asked for as the rollout stage reads it this tick
    (the scale source's, else what the stage published last; ``RolloutStage.replicas_asked``), where the control
    loop hands it over; ``peaks``: what this detector keeps of it from tick to tick (``Detection`` holds it). Without
    them the ready deficit is read against the window's peak alone, and a scale-down mid-rollout reads as a wave."""
    out: list[Finding] = []
    if replicas_asked is not None and peaks is None:
        peaks = ReadyPeaks()
    for view in state.deployments().values():
        finding = _finding(state, view, thresholds, now, asked=replicas_asked, peaks=peaks)
        if finding is not None:
            out.append(finding)
    return out
