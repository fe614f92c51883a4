"""`kpa`: AIBrix's KPA as its current controller runs it, on vLLM's KV-cache usage (target 70 % per pod).

Every reconcile the pods' values are averaged into one per-pod figure; the stable (180 s) and panic (60 s) windows
average that figure over time. Panic when the panic value is more than 2x the stable value (or the stable one is 0);
desired = ceil(ready pods x value / target) from the stable value, or from the larger of the two in panic, kept
within [ready / 2, 2 x ready]. The controller then stabilises: a rise applies at once (0 s up-cooldown, max of its
window), a fall takes the MINIMUM recommendation of the last 300 s. While pods are pending, a fall counts each
pending pod as running at the target (the pending-replica guard).

Sources (repository, path, commit), one per constant below:
- vllm-project/aibrix pkg/controller/podautoscaler/metrics/client.go @ 774f93f88ba3fd942489c7d2ec9db415fbb90b55:
  `UpdateMetrics` records the average of the pods' values; `DefaultStableWindowDuration = 180 s`,
  `DefaultPanicWindowDuration = 60 s`; stable and panic values are window averages.
- vllm-project/aibrix pkg/controller/podautoscaler/context/context.go @ 2576b186c06a85b180e76740a5cc422df4d606da:
  `NewBaseScalingContext` defaults MaxScaleUpRate 2, MaxScaleDownRate 2, ScaleUpCooldownWindow 0 s,
  ScaleDownCooldownWindow 300 s, PanicThreshold 2.0; the base context keeps no max-panic-pods (always 0).
- vllm-project/aibrix pkg/controller/podautoscaler/algorithm/kpa.go @ 2dbf78292d32b795f2d7cb8b74ff96a012590fd6:
  `ComputeTargetReplicas` (bounds [floor(ready / 2), max(1, ceil(2 x ready))], the larger count in panic); the
  panic entry (stable <= 0 or panic / stable > PanicThreshold) is `KPAAlgorithm.shouldEnterPanicMode` of the later
  file in the same place (its commit was not recorded where it was read).
- vllm-project/aibrix pkg/controller/podautoscaler/podautoscaler_controller.go
  @ 774f93f88ba3fd942489c7d2ec9db415fbb90b55:
  `stabilizeRecommendation` (up: max over the up-cooldown window; down: min over the down-cooldown window) and the
  10 s resync ticker that drives reconciles.
- vllm-project/aibrix pkg/controller/podautoscaler/autoscaler.go @ 015a2e5f3572ba83578ecdfeccb9d74c97159628:
  `applyPendingReplicaGuard` for KPA on a pod metric.
The algorithm file divides the window value by the target without the pod count (ceil(value / target)); with the
per-pod average that metrics/client.go now records, that would size every fleet to one or two pods. This model
multiplies by the ready pods, the per-pod-target reading the pending-replica guard itself uses
(ceil((value x ready + target x pending) / target)). The 70 % target is ENGINES.md's "typical target".
"""

from __future__ import annotations

import math
from collections import deque

from scaler.backtest.observe import History, Observation
from scaler.backtest.policies.base import Context, Policy

RESYNC_S = 10.0  # podautoscaler_controller.go @ 774f93f: resync ticker
STABLE_WINDOW_S = 180.0  # metrics/client.go @ 774f93f: DefaultStableWindowDuration
PANIC_WINDOW_S = 60.0  # metrics/client.go @ 774f93f: DefaultPanicWindowDuration
PANIC_THRESHOLD = 2.0  # context.go @ 2576b18: PanicThreshold
MAX_SCALE_UP_RATE = 2.0  # context.go @ 2576b18: MaxScaleUpRate
MAX_SCALE_DOWN_RATE = 2.0  # context.go @ 2576b18: MaxScaleDownRate
SCALE_UP_COOLDOWN_S = 0.0  # context.go @ 2576b18: ScaleUpCooldownWindow
SCALE_DOWN_COOLDOWN_S = 300.0  # context.go @ 2576b18: ScaleDownCooldownWindow
TARGET_KV_USAGE = 0.7  # ENGINES.md ("Peers' defaults"): typical target, KV usage 70 %


def _per_pod_kv(obs: Observation) -> float | None:
    """One reconcile's metric: the average over the pods that report (ready ones)."""
    ready = obs.ready
    return sum(r.kv_usage for r in ready) / len(ready) if ready else None


def target_replicas(
    stable: float, panic: float, ready: int, target: float = TARGET_KV_USAGE, in_panic: bool | None = None
) -> tuple[int, bool]:
    """(desired pods, in panic) from the window averages of the per-pod value; ``in_panic`` overrides the test."""
    pods = max(0.0, float(ready))
    max_up = max(1.0, math.ceil(MAX_SCALE_UP_RATE * pods))
    max_down = math.floor(pods / MAX_SCALE_DOWN_RATE)
    dspc = math.ceil(pods * stable / target - 1e-9)
    dppc = math.ceil(pods * panic / target - 1e-9)
    want_stable = int(min(max(dspc, max_down), max_up))
    want_panic = int(min(max(dppc, max_down), max_up))
    if in_panic is None:
        in_panic = stable <= 0 or panic / stable > PANIC_THRESHOLD
    # The base scaling context holds no max-panic-pods, so panic mode is "the larger of the two", nothing more.
    return (max(want_stable, want_panic) if in_panic else want_stable), in_panic


class Kpa(Policy):
    name = "kpa"
    interval_s = RESYNC_S

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._recs: deque[tuple[float, int]] = deque()

    def decide(self, history: History, now: float) -> int:
        obs = history.latest
        current = obs.current
        if not obs.ready:
            return self.ctx.clamp(current)
        stable = history.mean(STABLE_WINDOW_S, _per_pod_kv) or 0.0
        panic = history.mean(PANIC_WINDOW_S, _per_pod_kv) or 0.0
        ready = len(obs.ready)
        desired, _ = target_replicas(stable, panic, ready)
        pending = current - ready
        if pending > 0 and desired < current:  # applyPendingReplicaGuard: pending pods count at the target
            guarded = math.ceil((stable * ready + TARGET_KV_USAGE * pending) / TARGET_KV_USAGE - 1e-9)
            desired = min(max(desired, guarded), current)
        return self.ctx.clamp(self._stabilise(now, desired, current))

    def _stabilise(self, now: float, recommendation: int, current: int) -> int:
        """stabilizeRecommendation: max over the up-cooldown window, min over the down-cooldown window."""
        self._recs.append((now, recommendation))
        while self._recs and now - self._recs[0][0] > max(SCALE_UP_COOLDOWN_S, SCALE_DOWN_COOLDOWN_S):
            self._recs.popleft()
        if recommendation > current:
            return max(r for t, r in self._recs if now - t <= SCALE_UP_COOLDOWN_S)
        if recommendation < current:
            return min(r for t, r in self._recs if now - t <= SCALE_DOWN_COOLDOWN_S)
        return recommendation
