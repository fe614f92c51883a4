"""Prefix-cache misses: the deployment's windowed hit ratio (Δhits/Δqueries, tokens) against its own baseline.

It fires on the pattern that routing can fix: shared prefixes still exist (the deployment keeps a clear
residue of hits) but every replica's ratio fell together, because requests that share a prefix are spread
over replicas (a scale-out, or a router that lost affinity). It stays silent when the ratio falls to ~0:
spreading cannot erase the hits of a prefix that is reused, so that is traffic that stopped sharing
prefixes, and no routing change would bring the hits back.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from collector.state import DeploymentPoint, DeploymentView, FleetState
from detectors._values import finite, fraction
from detectors.finding import Finding, Severity, Subject
from detectors.thresholds import PrefixThresholds, Thresholds

KIND = "prefix_cache_miss"


def baseline(history: Sequence[DeploymentPoint], th: PrefixThresholds, now: float) -> tuple[float, float] | None:
    """(median hit ratio, median ready replicas) over the history older than ``baseline_exclude_recent_s``;
    None when that history spans less than ``min_baseline_s``."""
    cutoff = now - th.baseline_exclude_recent_s
    points = [p for p in history if p.t <= cutoff and fraction(p.prefix_hit_ratio) is not None]
    if not points or points[-1].t - points[0].t < th.min_baseline_s:
        return None
    return (
        statistics.median(fraction(p.prefix_hit_ratio) or 0.0 for p in points),
        statistics.median(p.ready_replicas for p in points),
    )


def _queries_rate(view: DeploymentView) -> float:
    return sum(finite(r.prefix_queries_rate) or 0.0 for r in view.replicas if r.ready)


def _deployment_finding(
    view: DeploymentView, history: Sequence[DeploymentPoint], th: PrefixThresholds, now: float
) -> Finding | None:
    current = fraction(view.prefix_hit_ratio)
    if current is None or _queries_rate(view) < th.min_queries_rate:
        return None
    base = baseline(history, th, now)
    if base is None:
        return None
    base_ratio, base_replicas = base
    if base_ratio < th.min_baseline or current >= base_ratio * (1.0 - th.relative_drop):
        return None
    threshold = base_ratio * (1.0 - th.relative_drop)
    recent = [fraction(p.prefix_hit_ratio) for p in history if p.t >= now - th.settle_s]
    if any(r is None or r >= threshold or r <= th.no_sharing_ratio for r in recent) or current <= th.no_sharing_ratio:
        return None  # not settled in the band yet, or the traffic stopped sharing prefixes (routing cannot help)
    per_replica = [v for r in view.replicas if r.ready and (v := fraction(r.prefix_hit_ratio)) is not None]
    spread = max(per_replica) - min(per_replica) if per_replica else 0.0
    scaled_out = view.ready_replicas > base_replicas
    collapsed_together = len(per_replica) >= 2 and spread <= th.replica_spread
    if not (scaled_out or collapsed_together):
        return None  # one replica's cache, not the routing: the other detectors see that replica
    pattern = "scale_out" if scaled_out else "spread"
    how = (
        f"as ready replicas rose from {base_replicas:g} to {view.ready_replicas}"
        if scaled_out
        else f"on all {len(per_replica)} replicas together"
    )
    drop = 1.0 - current / base_ratio
    return Finding(
        kind=KIND,
        severity=Severity.WARNING,
        subject=Subject(deployment=view.key),
        since=now,
        summary=(
            f"prefix-cache hit ratio of {view.key} fell from {base_ratio:.0%} to {current:.0%} {how} "
            f"(down {drop:.0%}, warns from {th.relative_drop:.0%}): shared prefixes are spread over replicas, "
            "their prompts recomputed; use prefix-aware or sticky routing"
        ),
        evidence={
            "hit_ratio": current,
            "baseline_hit_ratio": base_ratio,
            "baseline_ready_replicas": base_replicas,
            "ready_replicas": float(view.ready_replicas),
            "replica_ratio_min": min(per_replica) if per_replica else None,
            "replica_ratio_max": max(per_replica) if per_replica else None,
            "pattern": pattern,
            "drop": drop,
            "drop_threshold": th.relative_drop,
        },
        action="prefix_aware_routing",
    )


def detect(state: FleetState, *, thresholds: Thresholds, now: float) -> list[Finding]:
    out: list[Finding] = []
    for key, view in state.deployments().items():
        finding = _deployment_finding(view, state.deployment_history(key), thresholds.prefix, now)
        if finding is not None:
            out.append(finding)
    return out
