"""What a backtest reports per policy, and the arithmetic that turns finished requests into it."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

import numpy as np

from scaler.backtest.faults import FaultHit
from scaler.backtest.policies.base import ForecastPoint


@dataclass
class PolicyResult:
    name: str
    slo_attainment: float  # share of arrived requests whose first token came within the TTFT SLO
    replica_hours: float  # every replica that held GPUs (loading, ready, draining), integrated over the trace
    p50_ttft_s: float
    p99_ttft_s: float
    scale_events: int  # times the desired count changed
    requests: int
    times: list[float] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)
    ready: list[int] = field(default_factory=list)
    desired: list[int] = field(default_factory=list)  # the count the policy held after each tick's decision
    demand: list[float] = field(default_factory=list)  # arrival rate (req/s, 60 s window)
    forecasts: list[ForecastPoint] = field(default_factory=list)
    # With a rollout injected (``BacktestConfig.rollout_at_s``): the window from its start until every replica
    # serves the new version (the trace's end if it never does), and TTFT over the requests arriving within it.
    rollout: RolloutWindow | None = None
    # Where the policy missed: the minutes with the most requests outside the SLO (fluid level: estimated).
    worst_minutes: list[MissedMinute] = field(default_factory=list)
    # With faults injected (``BacktestConfig.faults``): what each did in this replay (``scaler.backtest.faults``).
    faults: list[FaultHit] = field(default_factory=list)

    def summary(self) -> dict[str, float | int]:
        """The five numbers of the `--json` contract, JSON-safe (finite)."""
        return {
            "slo_attainment": round(self.slo_attainment, 6),
            "replica_hours": round(self.replica_hours, 4),
            "p50_ttft_s": round(_finite(self.p50_ttft_s), 4),
            "p99_ttft_s": round(_finite(self.p99_ttft_s), 4),
            "scale_events": self.scale_events,
        }


@dataclass
class RolloutWindow:
    start_s: float
    end_s: float
    slo_attainment: float = 0.0
    p99_ttft_s: float = 0.0
    requests: int = 0

    def to_json(self) -> dict[str, float | int]:
        return {
            "start_s": round(self.start_s, 1),
            "end_s": round(self.end_s, 1),
            "slo_attainment": round(self.slo_attainment, 6),
            "p99_ttft_s": round(_finite(self.p99_ttft_s), 4),
            "requests": self.requests,
        }


@dataclass(frozen=True)
class MissedMinute:
    """One minute of arrivals and how many of them got their first token outside the SLO (or never)."""

    start_s: float
    arrived: int
    outside: int
    ready: int  # the fewest replicas serving during the minute

    def to_json(self) -> dict[str, float | int]:
        return {"start_s": self.start_s, "arrived": self.arrived, "outside": self.outside, "ready": self.ready}


def worst_minutes(
    arrivals: np.ndarray,
    ttfts: np.ndarray,
    weights: np.ndarray,
    slo_s: float,
    ready_at: tuple[list[float], list[int]],
    keep: int = 5,
) -> list[MissedMinute]:
    """The `keep` minutes with the most requests outside the SLO, most first (ties: earlier first).

    One entry per request (or, at the fluid level, per quantile point weighted by the requests it stands for):
    when it arrived, its TTFT (infinite for one that never got a first token: always outside) and its weight;
    `ready_at` is the replay's (times, ready replicas) series. Minutes with none outside are left out, so a policy
    that never missed reports an empty list. Counts are rounded to whole requests."""
    if len(arrivals) == 0:
        return []
    minute = np.floor(np.asarray(arrivals, dtype=np.float64) / 60.0).astype(np.int64)
    base = int(minute.min())
    minute -= base  # bincount wants non-negative bins; added back below
    arrived = np.bincount(minute, weights=weights)
    outside = np.bincount(minute, weights=np.where(np.asarray(ttfts) > slo_s, weights, 0.0), minlength=len(arrived))
    counted = np.round(outside).astype(np.int64)
    order = sorted((m for m in np.flatnonzero(counted > 0).tolist()), key=lambda m: (-counted[m], m))[:keep]
    times, ready = ready_at
    out = []
    for m in order:
        start = (m + base) * 60.0
        # The fewest replicas serving at any tick of the minute (the tick before it if none falls within).
        lo = max(0, bisect.bisect_right(times, start) - 1)
        hi = max(lo + 1, bisect.bisect_left(times, start + 60.0))
        out.append(
            MissedMinute(start, round(float(arrived[m])), int(counted[m]), min(ready[lo:hi]) if ready[lo:hi] else 0)
        )
    return out


def _finite(x: float) -> float:
    return x if math.isfinite(x) else 1e9


def ttft_stats(ttfts: list[float], unfinished_waits: list[float], slo_s: float) -> tuple[float, float, float, int]:
    """(attainment, p50, p99, n). Requests that never got a first token count with the time they waited (a lower
    bound, so the percentiles never flatter a policy that left them queued) and always as outside the SLO."""
    all_ttft = np.asarray(ttfts + unfinished_waits, dtype=float)
    n = len(all_ttft)
    if n == 0:
        return 1.0, 0.0, 0.0, 0
    within = int(np.count_nonzero(np.asarray(ttfts, dtype=float) <= slo_s))
    return within / n, float(np.quantile(all_ttft, 0.5)), float(np.quantile(all_ttft, 0.99)), n
