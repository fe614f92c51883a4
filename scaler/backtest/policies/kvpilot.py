"""`kvpilot`: the real planner (`scaler.planner.Planner`) fed through the real `FleetState`, exactly as the
control loop feeds it: each tick the ready replicas' snapshots become `ReplicaSample`s (loading replicas serve
no /metrics yet), and the replica count comes from the "scale subresource" (the simulator's count)."""

from __future__ import annotations

import math
from typing import Any

from collector.samples import Histogram, ReplicaSample
from collector.state import FleetState
from scaler.backtest.observe import History
from scaler.backtest.policies.base import Context, ForecastPoint, Policy
from scaler.capacity import CapacityConfig, TokenMix
from scaler.planner import Planner, PlannerConfig
from scaler.policy import PolicyConfig

DEPLOYMENT = "backtest/llm"
TICK_S = 15.0


def planner_config(ctx: Context) -> PlannerConfig:
    """kvpilot's one configuration for every trace: only the facts of the deployment come from the context."""
    mix = TokenMix(ctx.mean_prompt_tokens, ctx.mean_output_tokens)
    return PlannerConfig(
        forecaster="auto",
        cold_start_s=ctx.cold_start_s,
        scaling_delay_s=TICK_S,
        capacity=CapacityConfig(requests_per_s=ctx.capacity_rps, reference_mix=mix),
        slo_ttft_s=ctx.slo_ttft_s,
        policy=PolicyConfig(
            min_replicas=ctx.min_replicas,
            max_replicas=ctx.max_replicas,
            # A replica ordered now serves from the horizon on: plan to clear today's queue by then, not within
            # the SLO (which would order a replica per queued request that no new replica can reach in time).
            queue_drain_s=ctx.cold_start_s + TICK_S,
            # The profiled capacity already holds the SLO's margin, and the forecast's upper quantile the
            # demand's: a further utilisation discount would pay twice for the same risk.
            target_utilisation=1.0,
        ),
    )


class Kvpilot(Policy):
    name = "kvpilot"
    interval_s = TICK_S

    def __init__(self, ctx: Context, config: PlannerConfig | None = None) -> None:
        super().__init__(ctx)
        self.state = FleetState(rate_window_s=60.0, stale_after_s=3 * TICK_S)
        self.planner = Planner(config or planner_config(ctx))
        self.snapshot: Any = None  # set by the runner before each decide: the raw simulator snapshot

    def decide(self, history: History, now: float) -> int:
        samples = [_sample(r, now) for r in getattr(self.snapshot, "replicas", ()) if r.state != "loading"]
        self.state.observe(samples, [], now=now)
        current = {DEPLOYMENT: history.latest.current}
        # The router's request counter, as a gateway exports it (Dynamo's planner and the oracle read it too).
        rates = {DEPLOYMENT: history.arrival_rate(60.0)} if len(history) > 1 else None
        decisions = self.planner.decide(self.state, now, current_replicas=current, arrival_rates=rates)
        if not decisions:
            return self.ctx.clamp(history.latest.current)
        d = decisions[0]
        self.forecasts.append(
            ForecastPoint(now, d.forecast["horizon_s"], d.forecast["arrival_rate"], d.forecast["arrival_rate_upper"])
        )
        return d.desired_replicas


def _sample(r: Any, now: float) -> ReplicaSample:
    ns, name = DEPLOYMENT.split("/")
    return ReplicaSample(
        namespace=ns,
        deployment=name,
        replica=str(r.name),
        node=str(getattr(r, "node", "")),
        engine="vllm",
        model=None,
        timestamp=now,
        requests_waiting=float(r.requests_waiting),
        requests_running=float(r.requests_running),
        kv_usage=float(r.kv_usage),
        prompt_tokens=float(r.prompt_tokens_total),
        generation_tokens=float(r.generation_tokens_total),
        requests_finished=float(r.requests_finished_total),
        ttft=_histogram(getattr(r, "ttft", None)),
        queue_time=_histogram(getattr(r, "queue_time", None)),
    )


def _histogram(h: Any) -> Histogram | None:
    """The simulator's per-bucket histogram as the collector's cumulative one (what /metrics would show)."""
    if h is None:
        return None
    return Histogram(
        bounds=(*h.bounds, math.inf), counts=tuple(float(c) for c in h.cumulative()), sum=h.total, count=float(h.count)
    )
