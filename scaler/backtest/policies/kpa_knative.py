"""`kpa-knative`: a Knative-style KPA on KV-cache usage. NOT what AIBrix runs today (that is `kpa`, kpa.py).

Knative's semantics as AIBrix's earlier KPA carried them (vllm-project/aibrix
pkg/controller/podautoscaler/scaler/kpa.go @ ccdda04353b05bd0b43f51c78427a6687623f4a3, "based on both the Knative
KpaAutoscaler code and its documentation"): the metric is the fleet's TOTAL, desired = ceil(total / target) per
window, at most x2 up and /2 down per step, panic when the panic-window count is 2x the ready pods, never below the
panic count while panicking, and the scale-down delay keeps the MAXIMUM recommendation of its window. Window
lengths, delay and target as ENGINES.md ("Peers' defaults") summarises AIBrix's: stable 180 s, panic 60 s, delay
300 s, KV usage 70 % per pod, within target x (1 +- 0.1) hold; evaluated on every 5 s metric refresh.
"""

from __future__ import annotations

import math
from collections import deque

from scaler.backtest.observe import History, Observation
from scaler.backtest.policies.base import Context, Policy, ceil_div

STABLE_WINDOW_S = 180.0  # ENGINES.md: AIBrix stable window
PANIC_WINDOW_S = 60.0  # ENGINES.md: AIBrix panic window
PANIC_THRESHOLD = 2.0  # scaler/kpa.go @ ccdda04: PanicThreshold
TOLERANCE = 0.1  # ENGINES.md: applied outside target x (1 +- 0.1)
MAX_SCALE_UP_RATE = 2.0  # ENGINES.md: at most x2 up per step
MAX_SCALE_DOWN_RATE = 2.0  # scaler/kpa.go @ ccdda04: MaxScaleDownRate
SCALE_DOWN_DELAY_S = 300.0  # ENGINES.md: scale-down cooldown
TARGET_KV_USAGE = 0.7  # ENGINES.md: typical target, KV usage 70 %


def _total_kv(obs: Observation) -> float:
    return sum(r.kv_usage for r in obs.ready)


class KpaKnative(Policy):
    name = "kpa-knative"
    interval_s = 5.0

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._panic_since: float | None = None
        self._max_panic = 0
        self._recent: deque[tuple[float, int]] = deque()

    def start(self, replicas: int, now: float) -> None:
        self._recent.append((now, replicas))

    def decide(self, history: History, now: float) -> int:
        obs = history.latest
        ready = max(1, len(obs.ready))
        stable = history.mean(STABLE_WINDOW_S, _total_kv) or 0.0
        panic = history.mean(PANIC_WINDOW_S, _total_kv) or 0.0
        lo, hi = math.floor(ready / MAX_SCALE_DOWN_RATE), math.ceil(ready * MAX_SCALE_UP_RATE)
        want_stable = min(max(ceil_div(stable, TARGET_KV_USAGE), lo), hi)
        want_panic = min(max(ceil_div(panic, TARGET_KV_USAGE), lo), hi)

        over = stable > 0 and panic / stable > PANIC_THRESHOLD
        if over and self._panic_since is None:
            self._panic_since = now
        elif not over and self._panic_since is not None and now - self._panic_since >= STABLE_WINDOW_S:
            self._panic_since, self._max_panic = None, 0

        if self._panic_since is not None:
            desired = max(want_panic, self._max_panic, obs.current)
            self._max_panic = desired
        else:
            desired = want_stable
            per_pod = stable / ready
            if abs(per_pod / TARGET_KV_USAGE - 1.0) <= TOLERANCE:
                desired = obs.current

        self._recent.append((now, desired))
        while self._recent and now - self._recent[0][0] > SCALE_DOWN_DELAY_S:
            self._recent.popleft()
        if desired < obs.current:
            desired = min(obs.current, max(r for _, r in self._recent))
        return self.ctx.clamp(desired)
