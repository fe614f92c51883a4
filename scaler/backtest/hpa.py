"""The Kubernetes HPA's replica arithmetic with its default behaviour, shared by the `reactive` and `hpa-util`
baselines. Numbers are the HPA defaults (k8s.io/kubernetes pkg/controller/podautoscaler, HPA v2 docs):
tolerance 0.1; sync period 15 s; scale-up: no stabilisation, at most max(+100 %, +4 pods) per 15 s;
scale-down: 300 s stabilisation window (highest recommendation in it wins), at most −100 % per 15 s.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

TOLERANCE = 0.1
SYNC_PERIOD_S = 15.0
SCALE_DOWN_STABILISATION_S = 300.0
SCALE_UP_PERCENT = 100.0
SCALE_UP_PODS = 4


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
    min_replicas: int = 1
    max_replicas: int | None = None
    scale_down_stabilisation_s: float = SCALE_DOWN_STABILISATION_S

    def __post_init__(self) -> None:
        self._recs: deque[tuple[float, int]] = deque()

    def seed(self, now: float, replicas: int) -> None:
        self._recs.append((now, replicas))

    def apply(self, now: float, current: int, recommended: int) -> int:
        self._recs.append((now, recommended))
        while self._recs and now - self._recs[0][0] > self.scale_down_stabilisation_s:
            self._recs.popleft()
        # stabilizeRecommendationWithBehaviors with a 0 s up-window: rises apply at once, falls only as far
        # as the highest recommendation of the last 300 s.
        highest_recent = max(r for _, r in self._recs)
        desired = recommended if recommended > current else min(current, highest_recent)
        up_limit = max(math.ceil(current * (1 + SCALE_UP_PERCENT / 100.0)), current + SCALE_UP_PODS)
        desired = min(desired, up_limit)
        desired = max(desired, self.min_replicas)
        if self.max_replicas is not None:
            desired = min(desired, self.max_replicas)
        return desired
