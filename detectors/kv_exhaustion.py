"""KV-cache exhaustion: a replica's KV pool near full with queueing or preemptions, or projected full soon.

The pool belongs to one replica, so every test is per replica: a deployment mean of 60% can hide one
replica at 100% that is already preempting. The projection is a robust (Theil-Sen) slope of ``kv_usage`` over
the recent history; it is what lets the warning land before the first preemption, not after.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from collector.samples import ReplicaSample
from collector.state import FleetState, ReplicaView
from detectors._values import finite, fraction
from detectors.finding import Finding, Severity, Subject
from detectors.thresholds import KvThresholds, Thresholds

KIND = "kv_exhaustion"


def kv_trend(history: Sequence[ReplicaSample], kv: KvThresholds) -> tuple[float, float] | None:
    """Theil-Sen (slope per second, fitted usage at the latest sample) of kv_usage over the trend window;
    None when too few points. The median of pairwise slopes ignores a noisy scrape or two (least squares
    would let one spike at the window's end set the slope), and the fitted level, not the last raw value,
    is what is projected. O(n^2) pairs over ~18 samples per replica: cheap."""
    if not history:
        return None
    start = history[-1].timestamp - kv.trend_window_s
    pts = [(s.timestamp, v) for s in history if s.timestamp >= start and (v := fraction(s.kv_usage)) is not None]
    if len(pts) < kv.min_trend_samples:
        return None
    slopes = [(v2 - v1) / (t2 - t1) for i, (t1, v1) in enumerate(pts) for t2, v2 in pts[i + 1 :] if t2 > t1]
    if not slopes:
        return None
    slope = statistics.median(slopes)
    t_last = pts[-1][0]
    level = statistics.median(v + slope * (t_last - t) for t, v in pts)
    return slope, level


def kv_slope_per_s(history: Sequence[ReplicaSample], kv: KvThresholds) -> float | None:
    trend = kv_trend(history, kv)
    return None if trend is None else trend[0]


def time_to_exhaustion_s(history: Sequence[ReplicaSample], kv: KvThresholds) -> float | None:
    """Projected seconds until the pool reaches ``kv.full``: 0 when already there, None when not filling
    (flat or draining, fitted usage below ``project_from_usage``, or unknown). Exported as
    ``kvpilot_kv_time_to_exhaustion_seconds``."""
    latest = fraction(history[-1].kv_usage) if history else None
    if latest is None:
        return None
    if latest >= kv.full:
        return 0.0
    trend = kv_trend(history, kv)
    if trend is None:
        return None
    slope, level = trend
    if slope <= 0 or level < kv.project_from_usage:
        return None
    return max(0.0, (kv.full - level) / slope)


def _replica_finding(
    view: ReplicaView, history: Sequence[ReplicaSample], th: KvThresholds, now: float
) -> Finding | None:
    usage = fraction(view.sample.kv_usage)
    if usage is None:
        return None
    waiting = finite(view.sample.requests_waiting) or 0.0
    preemptions_rate = finite(view.preemptions_rate)
    preempting = (preemptions_rate or 0.0) > 0.0
    tte = time_to_exhaustion_s(history, th)
    evidence: dict[str, float | str | None] = {
        "kv_usage": usage,
        "kv_slope_per_s": kv_slope_per_s(history, th),
        "time_to_exhaustion_s": tte,
        "requests_waiting": finite(view.sample.requests_waiting),
        "preemptions_rate": preemptions_rate,
    }
    if preempting or (usage >= th.near_full and waiting > 0):
        why = "preempting requests" if preempting else f"{waiting:g} requests waiting"
        summary = f"KV cache {usage:.0%} full on {view.sample.replica}, {why}"
        severity = Severity.CRITICAL
    elif tte is not None and tte <= th.warn_time_to_exhaustion_s:
        summary = f"KV cache on {view.sample.replica} projected full in {tte:.0f} s (now {usage:.0%})"
        severity = Severity.WARNING
    else:
        return None
    return Finding(
        kind=KIND,
        severity=severity,
        subject=Subject(deployment=view.deployment_key, replica=view.sample.replica, node=view.sample.node),
        since=now,
        summary=summary,
        evidence=evidence,
        action="scale_out",
    )


def detect(state: FleetState, *, thresholds: Thresholds, now: float) -> list[Finding]:
    out: list[Finding] = []
    for view in state.replicas():
        if not view.ready:
            continue  # a stale sample's KV usage says nothing about now; target_down reports it
        finding = _replica_finding(view, state.replica_history(view.key), thresholds.kv, now)
        if finding is not None:
            out.append(finding)
    return out
