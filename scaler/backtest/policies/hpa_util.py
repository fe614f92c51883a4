"""`hpa-util`: the plain Kubernetes HPA on GPU utilisation (dcgm-exporter's `DCGM_FI_DEV_GPU_UTIL` through the
Prometheus adapter as a Pods metric), target 80 % average, with the HPA's default behaviour.

The 80 % target is not any project's default (the HPA has none for a custom metric): it is the round value GPU
HPA examples commonly use, kept as a plain utilisation baseline. The ready/unready pod handling and the behaviour
are the HPA's own defaults (`scaler.backtest.hpa`, cited there).
"""

from __future__ import annotations

from scaler.backtest.hpa import SYNC_PERIOD_S, HpaBehaviour, utilisation_replicas
from scaler.backtest.observe import History
from scaler.backtest.policies.base import Context, Policy

TARGET_UTILISATION = 0.8  # an example value, not a peer's default (see the module docstring)


class HpaUtil(Policy):
    name = "hpa-util"
    interval_s = SYNC_PERIOD_S

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.hpa = HpaBehaviour(min_replicas=ctx.min_replicas, max_replicas=ctx.max_replicas)

    def start(self, replicas: int, now: float) -> None:
        self.hpa.seed(now, replicas)

    def decide(self, history: History, now: float) -> int:
        obs = history.latest
        ready = [r.gpu_utilisation for r in obs.ready if r.gpu_utilisation is not None]
        unready = sum(1 for r in obs.replicas if r.state == "loading")
        recommended = utilisation_replicas(ready, unready, TARGET_UTILISATION, obs.current)
        return self.hpa.apply(now, obs.current, recommended)
