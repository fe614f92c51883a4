"""`wva`: llm-d's workload-variant-autoscaler, saturation analyzer.

Source: llm-d-incubation/workload-variant-autoscaler as summarised in ENGINES.md ("Peers' defaults"): a replica
is saturated at KV ≥ 0.80 or queue ≥ 5; scale up by one when the average spare KV (0.80 − kv) < 0.10 or the
average spare queue (5 − queue) < 3 over non-saturated replicas; scale down by one only if the load spread over
N − 1 replicas keeps spare capacity above those triggers; no scale-up while replicas are pending; signals are
`max_over_time(...[1m])` per pod; decided every 60 s.
"""

from __future__ import annotations

from scaler.backtest.observe import History
from scaler.backtest.policies.base import Context, Policy

KV_SATURATED = 0.80
QUEUE_SATURATED = 5.0
KV_SPARE_TRIGGER = 0.10
QUEUE_SPARE_TRIGGER = 3.0
SIGNAL_WINDOW_S = 60.0


class Wva(Policy):
    name = "wva"
    interval_s = 60.0

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)

    def decide(self, history: History, now: float) -> int:
        obs = history.latest
        current = obs.current
        if not obs.ready:
            return self.ctx.clamp(current)
        n = len(obs.ready)
        # max_over_time over 1 m per replica slot (replicas are matched by position among the ready ones).
        window = history.window(SIGNAL_WINDOW_S)
        kv = [max((o.ready[i].kv_usage for o in window if len(o.ready) > i), default=0.0) for i in range(n)]
        queue = [max((o.ready[i].requests_waiting for o in window if len(o.ready) > i), default=0.0) for i in range(n)]
        pending = any(r.state == "loading" for r in obs.replicas)

        spare = [(KV_SATURATED - k, QUEUE_SATURATED - q) for k, q in zip(kv, queue, strict=True)]
        unsaturated = [(sk, sq) for sk, sq in spare if sk > 0 and sq > 0]
        if unsaturated:
            spare_kv = sum(s[0] for s in unsaturated) / len(unsaturated)
            spare_queue = sum(s[1] for s in unsaturated) / len(unsaturated)
            need_up = spare_kv < KV_SPARE_TRIGGER or spare_queue < QUEUE_SPARE_TRIGGER
        else:
            need_up = True
        if need_up:
            return self.ctx.clamp(current if pending else current + 1)
        if n > 1:
            kv_after = sum(kv) / (n - 1)
            queue_after = sum(queue) / (n - 1)
            if KV_SATURATED - kv_after >= KV_SPARE_TRIGGER and QUEUE_SATURATED - queue_after >= QUEUE_SPARE_TRIGGER:
                return self.ctx.clamp(current - 1)
        return self.ctx.clamp(current)
