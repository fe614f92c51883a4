"""The Kubernetes HPA's replica arithmetic and its `behavior` (stabilisation windows, rate-limit policies), shared
by the `reactive`, `hpa-util` and `wva` baselines, so each peer scales through the HPA exactly as deployed.

Sources (every constant below):
- kubernetes/kubernetes pkg/apis/autoscaling/v2/defaults.go @ 1adaa75345752d96375fae03334fa9ed3bf535a1: default
  scale-up rules (stabilisation 0 s, selectPolicy Max, Pods 4 / 15 s and Percent 100 / 15 s), default scale-down
  rules (selectPolicy Max, Percent 100 / 15 s; the window comes from the controller flag below).
- kubernetes/kubernetes pkg/controller/podautoscaler/horizontal.go @ bba5ea7751c6b66b82c4f44ebbcff5411cfcf051:
  `stabilizeRecommendationWithBehaviors` (the scale-up window keeps the lowest recommendation in it, the
  scale-down window the highest), `calculateScaleUpLimitWithScalingRules` / `calculateScaleDownLimitWith…`
  (limits relative to the replicas at the start of each policy's period, counted from the HPA's own scale events),
  and the controller defaults `--horizontal-pod-autoscaler-sync-period=15s`,
  `--horizontal-pod-autoscaler-downscale-stabilization=5m`, `--horizontal-pod-autoscaler-tolerance=0.1`.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

TOLERANCE = 0.1  # horizontal.go @ bba5ea7: --horizontal-pod-autoscaler-tolerance default
SYNC_PERIOD_S = 15.0  # horizontal.go @ bba5ea7: --horizontal-pod-autoscaler-sync-period default
SCALE_DOWN_STABILISATION_S = 300.0  # horizontal.go @ bba5ea7: --horizontal-pod-autoscaler-downscale-stabilization
SCALE_UP_PERCENT = 100.0  # defaults.go @ 1adaa75: scaleUpLimitPercent
SCALE_UP_PODS = 4  # defaults.go @ 1adaa75: scaleUpLimitMinimumPods
SCALE_PERIOD_S = 15.0  # defaults.go @ 1adaa75: scaleUpPeriod, scaleDownPeriod
SCALE_DOWN_PERCENT = 100.0  # defaults.go @ 1adaa75: scaleDownLimitPercent


@dataclass(frozen=True)
class ScalingPolicy:
    """One `HPAScalingPolicy`: at most ``value`` pods (``kind`` "Pods") or percent ("Percent") per ``period_s``."""

    kind: str
    value: float
    period_s: float

    def __post_init__(self) -> None:
        if self.kind not in ("Pods", "Percent") or self.value <= 0 or self.period_s <= 0:
            raise ValueError(f"scaling policy must be Pods|Percent with value and period > 0, got {self}")


@dataclass(frozen=True)
class ScalingRules:
    """One direction of `spec.behavior`: stabilisation window, policies, and how to pick among them."""

    stabilisation_s: float
    policies: tuple[ScalingPolicy, ...]
    select: str = "Max"  # "Max" | "Min" | "Disabled"

    def __post_init__(self) -> None:
        if self.stabilisation_s < 0 or self.select not in ("Max", "Min", "Disabled"):
            raise ValueError(f"scaling rules need stabilisation >= 0 and select Max|Min|Disabled, got {self}")

    @property
    def longest_period_s(self) -> float:
        return max((p.period_s for p in self.policies), default=0.0)


DEFAULT_SCALE_UP = ScalingRules(
    0.0,
    (ScalingPolicy("Pods", SCALE_UP_PODS, SCALE_PERIOD_S), ScalingPolicy("Percent", SCALE_UP_PERCENT, SCALE_PERIOD_S)),
)
DEFAULT_SCALE_DOWN = ScalingRules(
    SCALE_DOWN_STABILISATION_S, (ScalingPolicy("Percent", SCALE_DOWN_PERCENT, SCALE_PERIOD_S),)
)


def average_value_replicas(metric_total: float, target_per_replica: float, current: int) -> int:
    """External metric with an AverageValue target: ceil(total / target), unless within the tolerance."""
    if current > 0:
        ratio = metric_total / (target_per_replica * current)
        if abs(ratio - 1.0) <= TOLERANCE:
            return current
    return math.ceil(metric_total / target_per_replica - 1e-9)


def utilisation_replicas(ready_values: list[float], unready: int, target: float, current: int) -> int:
    """Pods metric (average utilisation): the HPA's ready/unready handling.

    Ratio over ready pods; on a scale-up, pods not yet ready count as 0 % (they will take load), and if that
    brings the ratio back inside the tolerance, or flips the direction, the HPA holds.
    """
    if not ready_values:
        return current
    ratio = sum(ready_values) / len(ready_values) / target
    if abs(ratio - 1.0) <= TOLERANCE:
        return current
    if ratio > 1.0 and unready > 0:
        ratio = sum(ready_values) / (len(ready_values) + unready) / target
        if ratio <= 1.0 + TOLERANCE:
            return current
    return math.ceil(ratio * len(ready_values) - 1e-9)


@dataclass
class HpaBehaviour:
    """The HPA's `behavior` applied to a recommendation: stabilise, then rate-limit against its own scale events."""

    min_replicas: int = 1
    max_replicas: int | None = None
    scale_up: ScalingRules = DEFAULT_SCALE_UP
    scale_down: ScalingRules = DEFAULT_SCALE_DOWN
    _recs: deque[tuple[float, int]] = field(default_factory=deque, init=False, repr=False)
    _events: deque[tuple[float, int]] = field(default_factory=deque, init=False, repr=False)

    def seed(self, now: float, replicas: int) -> None:
        """The fleet already runs ``replicas``: as if the HPA had just recommended it."""
        self._recs.append((now, replicas))

    def apply(self, now: float, current: int, recommended: int) -> int:
        desired = self._stabilise(now, current, recommended)
        desired = self._rate_limit(now, current, desired)
        desired = max(desired, self.min_replicas)
        if self.max_replicas is not None:
            desired = min(desired, self.max_replicas)
        if desired != current:
            self._events.append((now, desired - current))
        return desired

    def _stabilise(self, now: float, current: int, recommended: int) -> int:
        keep = max(self.scale_up.stabilisation_s, self.scale_down.stabilisation_s)
        while self._recs and now - self._recs[0][0] > keep:
            self._recs.popleft()
        # horizontal.go: records strictly after (now - window) count; the new recommendation is appended after.
        up = min([r for t, r in self._recs if t > now - self.scale_up.stabilisation_s] + [recommended])
        down = max([r for t, r in self._recs if t > now - self.scale_down.stabilisation_s] + [recommended])
        self._recs.append((now, recommended))
        return min(max(current, up), down)

    def _rate_limit(self, now: float, current: int, desired: int) -> int:
        longest = max(self.scale_up.longest_period_s, self.scale_down.longest_period_s)
        while self._events and now - self._events[0][0] > longest:
            self._events.popleft()
        if desired > current:
            return min(desired, max(self._limit(now, current, self.scale_up, up=True), current))
        if desired < current:
            return max(desired, min(self._limit(now, current, self.scale_down, up=False), current))
        return desired

    def _limit(self, now: float, current: int, rules: ScalingRules, *, up: bool) -> int:
        if rules.select == "Disabled" or not rules.policies:
            return current
        proposals = []
        for p in rules.policies:
            added = sum(d for t, d in self._events if d > 0 and t > now - p.period_s)
            removed = -sum(d for t, d in self._events if d < 0 and t > now - p.period_s)
            start = current - added + removed
            if up:
                grow = start + p.value if p.kind == "Pods" else math.ceil(start * (1 + p.value / 100.0) - 1e-9)
                proposals.append(int(grow))
            else:
                shrink = start - p.value if p.kind == "Pods" else int(start * (1 - p.value / 100.0))
                proposals.append(int(shrink))
        # "Max" picks the policy allowing the largest change: the highest limit up, the lowest limit down.
        if up:
            return max(proposals) if rules.select == "Max" else min(proposals)
        return min(proposals) if rules.select == "Max" else max(proposals)
