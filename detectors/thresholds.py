"""Every detector threshold, in one place, shared by the detectors and the generated alert rules.

The Prometheus rules in ``alerts/`` interpolate these same values, so a detector and the alert that pages
on it can never disagree about what "near full" or "too slow" means (the kubernetes-mixin habit).
Configuration is parsed once, at construction, and fails fast naming the offending field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


def described(default: T, description: str) -> T:
    """A dataclass field with a default and its description, kept as field metadata: the configuration reference
    (kvpilot/generate/settings_doc.py) renders the description, as it renders the settings' Field descriptions."""
    return field(default=default, metadata={"description": description})


def _check(
    owner: object, name: str, *, lo: float | None = None, hi: float | None = None, strict_lo: bool = False
) -> None:
    value = getattr(owner, name)
    where = f"{type(owner).__name__}.{name}"
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number, got {value!r}")
    if lo is not None and (value <= lo if strict_lo else value < lo):
        raise ValueError(f"{where} must be {'>' if strict_lo else '>='} {lo}, got {value}")
    if hi is not None and value > hi:
        raise ValueError(f"{where} must be <= {hi}, got {value}")


@dataclass(frozen=True, slots=True)
class HysteresisPolicy:
    """Open a finding after ``open_after_ticks`` consecutive bad ticks; close it after ``close_after_ticks`` clean."""

    open_after_ticks: int = 3
    close_after_ticks: int = 3

    def __post_init__(self) -> None:
        _check(self, "open_after_ticks", lo=1)
        _check(self, "close_after_ticks", lo=1)


@dataclass(frozen=True, slots=True)
class KvThresholds:
    """KV-cache exhaustion: the pool is per replica, so every test is per replica.

    Tuned on the labelled episodes of ``bench/kv_episodes.py`` (every shared trace; tuning seeds 1-2, reported on
    seeds 7-8 and, for continuity, 3-4 in BENCHMARKS.md): the goal is a warning at least 60 s before the first
    preemption on >= 90 % of the episodes that preempt, and on <= 20 % of those that do not (missed: 42 % and 40 %
    on seeds 7-8)."""

    near_full: float = described(
        0.90, 'Usage at which a replica is "near full": with queueing or preemptions this is critical.'
    )
    project_from_usage: float = described(
        0.40, "Below this (fitted) usage no projection is made: a trend from a cold pool says nothing useful."
    )
    warn_time_to_exhaustion_s: float = described(
        180.0,
        "Warn when the pool is projected full within this many seconds (trend over trend_window_s), the longer trend "
        "agrees (confirm_*, below) and the pool is still filling (min_in_flight_growth). A cold start (~120 s) plus "
        "the 60 s lead. On the tuning seeds this and the confirmation cut false warnings from 3 of 32 quiet episodes "
        "(the projection alone: 90 s trend, 300 s horizon) to 0, at one preempting episode fewer warned.",
    )
    critical_time_to_exhaustion_s: float = described(
        60.0, "... and page when projected full within this many seconds while requests already wait for blocks."
    )
    min_in_flight_growth: float = described(
        0.0,
        '"Still filling": requests wait for admission, or arrive faster than they finish by at least this share of '
        "the arrival rate (sequences in flight grow, each by one token per decode step). A pool whose arrivals and "
        "completions balance levels off, whatever its usage trend said a minute ago.",
    )
    trend_window_s: float = described(
        60.0,
        "Trend window for the Theil-Sen fit of kv_usage over the replica's recent samples: short enough to follow the "
        "rush (a pool that fills does so in the last minute or two), 12 samples at 5 s.",
    )
    confirm_window_s: float = described(
        120.0,
        "The confirmation: the trend over this longer window must also project the pool full, within "
        "confirm_time_to_exhaustion_s. A one-minute slope spikes on noise (a few long prompts admitted together); a "
        "pool that really fills shows it over two minutes too.",
    )
    confirm_time_to_exhaustion_s: float = described(
        600.0, "The horizon of that confirmation: the longer trend need only project the pool full within this long."
    )
    min_trend_samples: int = described(3, "At least this many samples in the window before a slope is trusted.")
    full: float = described(0.98, "Usage treated as exhausted (vLLM preempts when no free block remains).")
    demand_load: float | None = described(
        0.8,
        "Demand against capacity (the planner's numbers, passed in by the control loop): warn when the arrivals "
        "forecast at the horizon reach this share of what the ready replicas serve, on a pool that already feels it "
        "(demand_min_usage); None turns the rule off. 0.8 was tuned on seeds 1-2 (16/30 preempting episodes warned >= "
        '60 s ahead, 4/38 quiet ones warned); on reporting seeds 3-4, 58 % and 26 % (BENCHMARKS.md "Detectors"). With '
        "demand_trend_ahead_s (below), on reporting seeds 7-8: 17/40 and 16/40.",
    )
    demand_min_usage: float = described(
        0.5,
        'The pool "feels it": its usage peaked at or above this within the rate window (with demand_load).',
    )
    demand_trend_ahead_s: float = described(
        60.0,
        "demand_load reads the demand (the forecast in replicas' worth) carried this many seconds further along its "
        "own Theil-Sen trend over demand_trend_window_s (kv_exhaustion.DemandTrend; 0: the forecast as the planner "
        "gives it). A ramp's demand has been rising for minutes before its pool fills; a plateau's holds. Chosen on "
        'tuning seeds 1-2 by the rule written down before measuring (BENCHMARKS.md "Detectors", 2026-12-03): 19/30 '
        "preempting episodes warned >= 60 s ahead (sudden bursts apart) and 6/38 quiet ones warned, against 17/30 and "
        "4/38 without it; ~370 configurations of seven rule families were replayed offline on those seeds.",
    )
    demand_trend_window_s: float = described(180.0, "The window of demand whose trend demand_trend_ahead_s follows.")
    demand_min_rise: float | None = described(
        0.05,
        "demand_load opens only while the demand is still rising: its trend adds at least this much load a minute "
        "(replicas' worth per ready replica; unknown trend: not required). A demand that has levelled off holds its "
        "pool where it is, whatever share of the planner's steady-state capacity it reads (quiet plateaus at 0.8-1.2 "
        "of it). 0.05 is where level demand's own slope noise ends (|slope| on tuning seeds 1-2's plateaus once "
        "level: median 0.015, 90th percentile 0.044, 95th 0.058). Passed the rule written down before measuring "
        '(BENCHMARKS.md "Detectors", 2026-12-03 22:00): seeds 1-2 19/30 caught and 5/38 quiet warned (against 19/30, '
        "6/38), seeds 3-4 14/38 and 10/42 (against 14/38, 12/42); then on the fresh reporting seeds 11-12, 19/45 and "
        "9/35 (against 19/45, 11/35). None turns it off.",
    )
    projected_usage: float | None = described(
        None,
        "Little's law (kv_exhaustion.projected_usage): warn when the KV usage the forecast arrivals would hold at the "
        "horizon reaches this, on a pool that peaked at projected_min_usage or more within the rate window; None (the "
        "default) turns the rule off. Below 1 where used: the usage read at a tick is a point on a sawtooth. 0.6 (in "
        "place of demand_load) was the best of 40 configurations on tuning seed 1 (9/11 warned >= 60 s ahead, 1/23 "
        "quiet warned against 8/11 and 2/23 for demand_load), but on reporting seeds 3-4 it warned 13/24 and 15/42 "
        "quiet against demand_load's 14/24 and 11/42, so it is an option, not the default.",
    )
    projected_min_usage: float = described(
        0.3,
        'The pool "feels it" (with projected_usage): its usage peaked at or above this within the rate window.',
    )
    burst_margin: float = described(
        0.0,
        "Burst-aware: the forecast each replica must hold is its share plus this many standard deviations of its own "
        "arrival rate over burst_window_s (kv_exhaustion.arrival_spread), measured online. 0 (off): on tuning seed 1 "
        "a margin of 1 warned 2-5 quiet episodes for the same or fewer preempting ones caught.",
    )
    burst_window_s: float = described(
        60.0, "The window of 60 s arrival rates whose standard deviation burst_margin counts."
    )

    def __post_init__(self) -> None:
        for name in ("near_full", "project_from_usage", "full"):
            _check(self, name, lo=0.0, hi=1.0)
        _check(self, "warn_time_to_exhaustion_s", lo=0.0, strict_lo=True)
        _check(self, "critical_time_to_exhaustion_s", lo=0.0)
        _check(self, "min_in_flight_growth", lo=-1.0, hi=1.0)
        _check(self, "trend_window_s", lo=0.0, strict_lo=True)
        _check(self, "confirm_window_s", lo=0.0, strict_lo=True)
        _check(self, "confirm_time_to_exhaustion_s", lo=0.0, strict_lo=True)
        _check(self, "min_trend_samples", lo=2)
        if self.demand_load is not None:
            _check(self, "demand_load", lo=0.0, strict_lo=True)
        _check(self, "demand_min_usage", lo=0.0, hi=1.0)
        _check(self, "demand_trend_ahead_s", lo=0.0)
        _check(self, "demand_trend_window_s", lo=0.0, strict_lo=True)
        if self.demand_min_rise is not None:
            _check(self, "demand_min_rise", lo=0.0)
        _check(self, "projected_min_usage", lo=0.0, hi=1.0)
        if self.projected_usage is not None:
            _check(self, "projected_usage", lo=0.0, strict_lo=True)
        _check(self, "burst_margin", lo=0.0)
        _check(self, "burst_window_s", lo=0.0, strict_lo=True)
        if not self.project_from_usage < self.near_full <= self.full:
            raise ValueError(
                "KvThresholds must satisfy project_from_usage < near_full <= full, got "
                f"{self.project_from_usage}, {self.near_full}, {self.full}"
            )
        if self.critical_time_to_exhaustion_s > self.warn_time_to_exhaustion_s:
            raise ValueError(
                "KvThresholds.critical_time_to_exhaustion_s must not exceed warn_time_to_exhaustion_s, got "
                f"{self.critical_time_to_exhaustion_s} > {self.warn_time_to_exhaustion_s}"
            )


@dataclass(frozen=True, slots=True)
class PrefixThresholds:
    """Prefix-cache hit ratio (Δhits/Δqueries, tokens) against the deployment's own baseline."""

    relative_drop: float = described(0.40, "Fire when the windowed ratio falls below baseline × (1 - relative_drop).")
    min_baseline: float = described(
        0.20, "A deployment whose baseline is below this never had a useful prefix cache: stay silent."
    )
    min_queries_rate: float = described(
        50.0, "Ignore windows with less traffic than this (tokens per second of prefix queries)."
    )
    baseline_exclude_recent_s: float = described(
        300.0, "The baseline is taken from history older than this (so the current dip is not in its own baseline)."
    )
    min_baseline_s: float = described(300.0, "... and needs this much history to be trusted.")
    no_sharing_ratio: float = described(
        0.02,
        "A deployment-wide ratio at or below this means the traffic itself stopped sharing prefixes: spreading leaves "
        "a residue of hits (each replica still caches the prefixes it sees; 0.05 on the Mooncake trace over 4-8 "
        "round-robin replicas in the simulator), while prefix-free traffic leaves none.",
    )
    settle_s: float = described(
        120.0,
        "The fallen ratio must hold for most of this window (its median below the bar) before it counts: the windowed "
        "ratio of traffic that stops sharing prefixes passes through the intermediate band for up to one rate window "
        "on its way to zero, so the detector takes at least twice the rate window, whatever is set here.",
    )
    replica_spread: float = described(
        0.25,
        'Per-replica ratios "collapsed together" when their spread (max - min) is within this.',
    )
    preemption_rise_factor: float = described(
        2.0,
        "Silent while the settle window's preemptions per ready replica (their mean) exceed this many times the "
        "baseline's (its median): KV pressure that evicts cached prefixes is preemption the baseline did not have, "
        "while a steady background (vLLM preempting a little all day on a busy pool) was there when the baseline "
        "ratio was measured. With none in the baseline, any preemption silences. Twice: the window's mean counts ~3 "
        "minutes of preemptions (settle window plus rate window), so a steady background stays within it, and a burst "
        "that evicts enough prefixes to move the ratio by relative_drop preempts far more often than a background "
        "does.",
    )
    lost_affinity_drop: float | None = described(
        0.2,
        "A smaller fall counts when the replicas' ratios also became alike (null: only relative_drop counts). A router "
        "that keeps prefixes together leaves each replica the ratio of the prefixes it owns, one that spreads requests "
        "regardless of their prefixes (round-robin, a random pick) sends every replica the same mix. Fire when the "
        "settled ratio falls below baseline × (1 - lost_affinity_drop) with that evening-out (lost_affinity_spread) "
        "over 3 or more replicas; an open finding is held while new KV pressure masks the reading and while the "
        "replicas stay alike under the baseline. 0.2 raised the demo's round-robin on 17 of 17 seeds, one finding "
        'each (BENCHMARKS.md "Demo"; the 40 % rule alone: 13 of 17).',
    )
    lost_affinity_spread: float = described(
        0.5,
        "The replicas' ratios count as alike when their spread (the coefficient of variation of the ratios of 3 or "
        "more replicas, each past its first rate window, over a rate window) is at most this share of the baseline's "
        "(its median over the baseline, one rate window a minute, from min_baseline_s of such times), both over the "
        "rate window ending now and as its median over lost_affinity_window_s.",
    )
    lost_affinity_window_s: float = described(
        240.0,
        "The window over which the replicas' spread must have evened out (its median; alike now as well), longer than "
        "the settle window: under prefix affinity on 3 replicas of the demo's workload it dips to 0.02-0.05 for a "
        "minute or two at a time, while a router that lost affinity keeps the replicas alike for as long as it runs. "
        "New preemption within it holds an open finding (KV pressure evens or parts the ratios, whatever the routing).",
    )
    min_baseline_spread: float = described(
        0.12,
        "... and only where the baseline's spread was at least this: there must have been a skew to lose. Prefix "
        "affinity on the demo's workload leaves 0.13-0.17 over 3 replicas, 0.20-0.22 over 4, 0.31 over 5 (2 replicas "
        "are never read: both cache the few popular system prompts, and their ratios become alike with no routing "
        "change at all).",
    )

    def __post_init__(self) -> None:
        for name in ("relative_drop", "min_baseline", "no_sharing_ratio", "replica_spread", "lost_affinity_spread"):
            _check(self, name, lo=0.0, hi=1.0)
        _check(self, "min_baseline_spread", lo=0.0)
        if self.lost_affinity_drop is not None:
            _check(self, "lost_affinity_drop", lo=0.0, hi=1.0)
        for name in (
            "min_queries_rate",
            "baseline_exclude_recent_s",
            "min_baseline_s",
            "settle_s",
            "lost_affinity_window_s",
        ):
            _check(self, name, lo=0.0)
        _check(self, "preemption_rise_factor", lo=1.0)


@dataclass(frozen=True, slots=True)
class GpuThresholds:
    """Stuck or sick GPUs."""

    busy_utilisation: float = described(
        0.95,
        '"Pinned busy": utilisation at or above this while the replica makes no token progress.',
    )
    idle_utilisation: float = described(
        0.05,
        '"Idle": utilisation at or below this while requests are running.',
    )
    gsp_recurring_count: float = described(
        2.0, "XID 119/120 (GSP errors) count as recurring, hence drain class, from this many occurrences."
    )

    def __post_init__(self) -> None:
        _check(self, "busy_utilisation", lo=0.0, hi=1.0)
        _check(self, "idle_utilisation", lo=0.0, hi=1.0)
        _check(self, "gsp_recurring_count", lo=1.0)
        if self.idle_utilisation >= self.busy_utilisation:
            raise ValueError(
                f"GpuThresholds.idle_utilisation ({self.idle_utilisation}) must be below "
                f"busy_utilisation ({self.busy_utilisation})"
            )


@dataclass(frozen=True, slots=True)
class BurnWindow:
    """One multi-window burn-rate rule: both windows must burn faster than ``factor``."""

    long_s: float
    short_s: float
    factor: float
    severity: str = field(metadata={"description": '"critical" pages, "warning" tickets'})

    def __post_init__(self) -> None:
        _check(self, "long_s", lo=0.0, strict_lo=True)
        _check(self, "short_s", lo=0.0, strict_lo=True)
        _check(self, "factor", lo=0.0, strict_lo=True)
        if self.short_s >= self.long_s:
            raise ValueError(f"BurnWindow.short_s ({self.short_s}) must be shorter than long_s ({self.long_s})")
        if self.severity not in ("critical", "warning"):
            raise ValueError(f"BurnWindow.severity must be 'critical' or 'warning', got {self.severity!r}")


@dataclass(frozen=True, slots=True)
class TtftSlo:
    """TTFT service-level objective: ``objective`` of requests see their first token within ``target_s``.

    ``target_s`` should be a histogram bucket bound (vLLM's default TTFT buckets include 0.5, 1, 2.5, 5 s);
    otherwise the next bound above it is used, which flatters the burn rate, never the reverse.
    """

    target_s: float = described(1.0, "Seconds to a first token that a request must meet; best a TTFT bucket bound.")
    objective: float = described(
        0.99, "Share of requests that must meet target_s (below 1: 1 - objective is the budget)."
    )
    windows: tuple[BurnWindow, ...] = described(
        (
            BurnWindow(long_s=3600.0, short_s=300.0, factor=14.4, severity="critical"),
            BurnWindow(long_s=1800.0, short_s=150.0, factor=6.0, severity="warning"),
        ),
        "Google SRE workbook multi-window multi-burn-rate pairs, cut to the history FleetState keeps (1 h).",
    )
    min_requests: float = described(
        20.0, "Below this many requests in the short window the ratio is noise: stay silent."
    )

    def __post_init__(self) -> None:
        _check(self, "target_s", lo=0.0, strict_lo=True)
        _check(self, "objective", lo=0.0, hi=1.0, strict_lo=True)
        if self.objective >= 1.0:
            raise ValueError(
                f"TtftSlo.objective must be below 1 (an error budget of 0 cannot burn), got {self.objective}"
            )
        _check(self, "min_requests", lo=0.0)
        if not self.windows:
            raise ValueError("TtftSlo.windows must hold at least one BurnWindow")


@dataclass(frozen=True, slots=True)
class TargetThresholds:
    """Scrape targets: a replica not scraped successfully within this long is down."""

    down_after_s: float = described(30.0, "Seconds without a successful scrape after which a target reads as down.")

    def __post_init__(self) -> None:
        _check(self, "down_after_s", lo=0.0, strict_lo=True)


@dataclass(frozen=True, slots=True)
class RolloutThresholds:
    """A rollout (two versions among a deployment's ready replicas): how much it may take out at once, and how
    fast TTFT may burn the SLO's error budget (``ttft``) while it runs."""

    max_replaced_fraction: float = described(
        0.25,
        "Replicas known but not ready during a rollout, as a share of the deployment's replicas. ~25 % at once is the "
        "common advice for rolling updates of slow-starting servers (Kubernetes' own default maxUnavailable is 25 %).",
    )
    burn_factor: float = described(
        6.0,
        "TTFT burn rate (share slower than ttft.target_s over the error budget) that counts as burning during a "
        "rollout: the SRE workbook's 6x pair, over a window about one cold start long.",
    )
    ttft_window_s: float = described(
        150.0, "The window of TTFT that burn_factor is measured over: about one cold start long."
    )
    window_s: float = described(
        600.0,
        "A rollout is visible while replicas seen within this long report two versions; the replicas out at once are "
        "counted against the most that were ready within it. A few cold starts.",
    )

    def __post_init__(self) -> None:
        _check(self, "max_replaced_fraction", lo=0.0, hi=1.0)
        _check(self, "window_s", lo=0.0, strict_lo=True)
        _check(self, "burn_factor", lo=0.0, strict_lo=True)
        _check(self, "ttft_window_s", lo=0.0, strict_lo=True)


def _default_hysteresis() -> dict[str, HysteresisPolicy]:
    return {
        # One noisy scrape must neither page nor drain; a drain-class XID or a hang within 2 ticks.
        "stuck_gpu": HysteresisPolicy(open_after_ticks=2, close_after_ticks=3),
        "kv_exhaustion": HysteresisPolicy(open_after_ticks=2, close_after_ticks=6),
        "prefix_cache_miss": HysteresisPolicy(open_after_ticks=3, close_after_ticks=12),
        "target_down": HysteresisPolicy(open_after_ticks=2, close_after_ticks=2),
        "ttft_slo_burn": HysteresisPolicy(open_after_ticks=2, close_after_ticks=6),
        # A wave's replicas are not ready for a cold start: a rollout too wide stays so for minutes, not a tick.
        "rollout": HysteresisPolicy(open_after_ticks=3, close_after_ticks=6),
    }


@dataclass(frozen=True, slots=True)
class Thresholds:
    """All detector configuration; ``Thresholds()`` is the documented default."""

    kv: KvThresholds = field(default_factory=KvThresholds)
    prefix: PrefixThresholds = field(default_factory=PrefixThresholds)
    gpu: GpuThresholds = field(default_factory=GpuThresholds)
    ttft: TtftSlo = field(default_factory=TtftSlo)
    target: TargetThresholds = field(default_factory=TargetThresholds)
    rollout: RolloutThresholds = field(default_factory=RolloutThresholds)
    hysteresis: Mapping[str, HysteresisPolicy] = field(default_factory=_default_hysteresis)
    tick_s: float = described(5.0, "the control loop's tick; alert `for` durations are expressed in ticks × tick_s")

    def __post_init__(self) -> None:
        _check(self, "tick_s", lo=0.0, strict_lo=True)

    def policy(self, kind: str) -> HysteresisPolicy:
        return self.hysteresis.get(kind, HysteresisPolicy())

    def for_seconds(self, kind: str) -> float:
        """How long a condition must hold before a finding opens: the alert rule's `for` uses the same."""
        return self.policy(kind).open_after_ticks * self.tick_s


DEFAULT = Thresholds()
