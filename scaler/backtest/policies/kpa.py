"""`kpa`: AIBrix's KPA (Knative-style) on KV-cache usage.

Source: vllm-project/aibrix `pkg/controller/podautoscaler/algorithm/kpa.go` as summarised in ENGINES.md
("Peers' defaults"): stable window 180 s, panic window 60 s; panic when the panic-window value exceeds 2.0 × the
stable-window value; desired = ceil(total / target) per window, applied only outside target·(1 ± 0.1); at most
×2 up and ÷2 down per step; in panic never below the panic count; scale-down delay (cooldown) 300 s; target
KV usage 70 % per pod (`gpu_cache_usage_perc`). Evaluated on every 5 s metric refresh.
"""

from __future__ import annotations

import math
from collections import deque

from scaler.backtest.observe import History, Observation
from scaler.backtest.policies.base import Context, Policy, ceil_div

STABLE_WINDOW_S = 180.0
PANIC_WINDOW_S = 60.0
PANIC_THRESHOLD = 2.0
TOLERANCE = 0.1
MAX_SCALE_UP_RATE = 2.0
MAX_SCALE_DOWN_RATE = 2.0
SCALE_DOWN_DELAY_S = 300.0
TARGET_KV_USAGE = 0.7


def _total_kv(obs: Observation) -> float:
    return sum(r.kv_usage for r in obs.ready)


class Kpa(Policy):
    name = "kpa"
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
