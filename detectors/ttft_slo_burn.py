"""TTFT SLO burn: multi-window, multi-burn-rate alerting (Google SRE workbook) from TTFT histograms.

Burn rate = (share of requests slower than the target) / (error budget = 1 - objective). A window pair
fires only when both its long and short windows burn faster than the factor: the long window proves it
matters, the short one that it is still happening (so the finding closes soon after recovery).
"""

from __future__ import annotations

import math

from collector.samples import Histogram
from collector.state import DeploymentView, FleetState
from detectors.finding import Finding, Severity, Subject
from detectors.thresholds import Thresholds, TtftSlo

KIND = "ttft_slo_burn"


def slow_share(h: Histogram | None, target_s: float) -> tuple[float, float] | None:
    """(share of requests slower than target, request count); the bucket bound at or above the target
    counts as "within" (a histogram cannot say better). None when empty or unknown."""
    if h is None or not math.isfinite(h.count) or h.count <= 0:
        return None
    for bound, cum in zip(h.bounds, h.counts, strict=True):
        if bound >= target_s and not math.isinf(bound):
            if not math.isfinite(cum):
                return None
            return min(1.0, max(0.0, 1.0 - cum / h.count)), h.count
    return 0.0, h.count  # target above every finite bound: nothing can be shown to be slow


def window_histogram(state: FleetState, view: DeploymentView, window_s: float, now: float) -> Histogram | None:
    """TTFT histogram increase over the last ``window_s``, summed over the deployment's replicas
    (``histogram_add`` of their ``ttft_increase``)."""
    return state.ttft_increase_sum((replica.key for replica in view.replicas), now - window_s)


def burn_rate(share: float, slo: TtftSlo) -> float:
    return share / (1.0 - slo.objective)


def _deployment_finding(state: FleetState, view: DeploymentView, slo: TtftSlo, now: float) -> Finding | None:
    evidence: dict[str, float | str | None] = {"target_s": slo.target_s, "objective": slo.objective}
    fired: list[tuple[Severity, float, float, float]] = []
    for w in slo.windows:
        # The short window first: when it is not burning the pair cannot fire, and it is the cheap one.
        short = slow_share(window_histogram(state, view, w.short_s, now), slo.target_s)
        if short is None or short[1] < slo.min_requests:
            continue
        b_short = burn_rate(short[0], slo)
        evidence[f"burn_{w.short_s:g}s"] = b_short
        if b_short <= w.factor:
            continue
        long_ = slow_share(window_histogram(state, view, w.long_s, now), slo.target_s)
        if long_ is None:
            continue
        b_long = burn_rate(long_[0], slo)
        evidence[f"burn_{w.long_s:g}s"] = b_long
        if b_long > w.factor and b_short > w.factor:
            fired.append((Severity(w.severity), b_long, b_short, w.factor))
    if not fired:
        return None
    severity, b_long, b_short, factor = max(fired, key=lambda f: (f[0] == Severity.CRITICAL, f[1]))
    return Finding(
        kind=KIND,
        severity=severity,
        subject=Subject(deployment=view.key),
        since=now,
        summary=(
            f"{view.key} burns its TTFT error budget ({slo.objective:.1%} within {slo.target_s:g} s) "
            f"{b_long:.1f}x (long) and {b_short:.1f}x (short), above {factor:g}x"
        ),
        evidence=evidence,
        action="scale_out",
    )


def detect(state: FleetState, *, thresholds: Thresholds, now: float) -> list[Finding]:
    out: list[Finding] = []
    for view in state.deployments().values():
        finding = _deployment_finding(state, view, thresholds.ttft, now)
        if finding is not None:
            out.append(finding)
    return out
