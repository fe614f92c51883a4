"""`reactive`: vLLM production-stack's KEDA trigger, scaled by the HPA with its default behaviour.

Source (ENGINES.md "Peers' defaults"; vllm-project/production-stack KEDA tutorial): Prometheus trigger on
`vllm:num_requests_waiting`, threshold 5 (AverageValue per replica), pollingInterval 15 s, cooldownPeriod 360 s.
The cooldown only governs the 1 → 0 step, which min replicas 1 never takes. The HPA then applies its defaults
(`scaler.backtest.hpa`): 10 % tolerance, 300 s scale-down stabilisation, +max(100 %, 4 pods)/15 s up.
"""

from __future__ import annotations

from scaler.backtest.hpa import SYNC_PERIOD_S, HpaBehaviour, average_value_replicas
from scaler.backtest.observe import History
from scaler.backtest.policies.base import Context, Policy

THRESHOLD_WAITING = 5.0
POLLING_INTERVAL_S = 15.0


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
