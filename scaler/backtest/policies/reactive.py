"""`reactive`: vLLM production-stack's KEDA trigger, scaled by the HPA with its default behaviour.

Sources (repository, path, commit):
- vllm-project/production-stack tutorials/assets/values-20-keda.yaml @ 9d296458fb083324db5b9467d4dfb194d6c00c29:
  Prometheus trigger on `vllm:num_requests_waiting`, threshold '5' (KEDA's AverageValue per replica),
  pollingInterval 15 s, cooldownPeriod 360 s (it only governs the 1 → 0 step, which min replicas 1 never takes),
  minReplicaCount 1. Its `maxReplicaCount: 2` is the tutorial's toy ceiling; the backtest gives every policy the
  same ceiling instead (`Context.max_replicas`; KEDA's own default is 100, kedacore/keda
  apis/keda/v1alpha1/scaledobject_types.go @ ca8dd42efb6b53f8041aec6b54d4e3c7e5bc9368 `defaultHPAMaxReplicas`).
  The tutorial's query has no `sum()`; the fleet total is what an AverageValue target divides, so it is summed here.
- The HPA behind KEDA applies its defaults (`scaler.backtest.hpa`, cited there): 10 % tolerance, 300 s scale-down
  stabilisation, up by max(100 %, 4 pods) per 15 s.
"""

from __future__ import annotations

from scaler.backtest.hpa import SYNC_PERIOD_S, HpaBehaviour, average_value_replicas
from scaler.backtest.observe import History
from scaler.backtest.policies.base import Context, Policy

THRESHOLD_WAITING = 5.0  # values-20-keda.yaml @ 9d29645: threshold '5'
POLLING_INTERVAL_S = 15.0  # values-20-keda.yaml @ 9d29645: pollingInterval


class Reactive(Policy):
    name = "reactive"
    interval_s = max(POLLING_INTERVAL_S, SYNC_PERIOD_S)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.hpa = HpaBehaviour(min_replicas=ctx.min_replicas, max_replicas=ctx.max_replicas)

    def start(self, replicas: int, now: float) -> None:
        self.hpa.seed(now, replicas)

    def decide(self, history: History, now: float) -> int:
        obs = history.latest
        # sum(vllm:num_requests_waiting) over the deployment's pods, as the trigger's query returns it.
        recommended = average_value_replicas(obs.waiting, THRESHOLD_WAITING, obs.current)
        return self.hpa.apply(now, obs.current, recommended)
