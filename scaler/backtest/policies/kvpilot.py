"""`kvpilot`: the real planner (`scaler.planner.Planner`) in the configuration `kvpilot run` uses, fed through the
live loop's input path: each tick every ready replica's snapshot is rendered as the vLLM `/metrics` page the
simulator serves, parsed and adapted by the collector into `ReplicaSample`s, observed by a real `FleetState`
(loading replicas serve no page yet, as their pods are not Ready), and the replica count comes from the "scale
subresource" (the simulator's count). Arrivals (`Context.arrivals`): "engines", the default, as `kvpilot run` reads
them by default (no `collector.arrivals` gateway source): the planner is called exactly as the control loop calls it
(`kvpilot.runtime.loop`), and reads FleetState's estimate (requests finished plus the change in requests waiting and
running) and the engines' counters for the burst floor; "gateway": the router's request counter stands in for a
gateway's, as `kvpilot run` with `collector.arrivals` passes one: its rate, and its count for the burst floor's short
window."""

from __future__ import annotations

from typing import Any

from collector.adapt import adapt_page
from collector.samples import ReplicaSample, TargetInfo
from collector.state import FleetState
from scaler.backtest import sim
from scaler.backtest.observe import History
from scaler.backtest.policies.base import Context, ForecastPoint, Policy
from scaler.own_raise import OwnRaise
from scaler.planner import Planner, PlannerConfig
from scaler.publish import scale_target

NAMESPACE, NAME = "backtest", "llm"
DEPLOYMENT = f"{NAMESPACE}/{NAME}"


class Kvpilot(Policy):
    name = "kvpilot"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        if ctx.planner is None:
            raise ValueError("kvpilot: the backtest context carries no planner configuration")
        config: PlannerConfig = ctx.planner
        self.config = config
        self.interval_s = ctx.tick_s
        self.arrivals = ctx.arrivals
        self.state = FleetState(rate_window_s=60.0, stale_after_s=6 * ctx.tick_s)
        self.planner = Planner(config)
        self.snapshot: Any = None  # set by the runner before each decide: the raw simulator snapshot
        self.own_raise = OwnRaise()  # noted by the runner's rollout stage (scaler.backtest.run._surge)

    def decide(self, history: History, now: float) -> int:
        replicas = [r for r in getattr(self.snapshot, "replicas", ()) if r.state != "loading"]
        samples = [s for r in replicas for s in _scrape(r, now)]
        self.state.observe(samples, [], now=now, departed=self._departed(replicas))
        # the simulator's count less what the rollout stage added to the planner's (scaler.own_raise), as `kvpilot run`
        current = {DEPLOYMENT: self.own_raise.planner_count(DEPLOYMENT, history.latest.current, now)}
        if self.arrivals == "gateway":
            rates = {DEPLOYMENT: history.arrival_rate(60.0)} if len(history) > 1 else None
            totals = {DEPLOYMENT: history.latest.arrivals_total}
            (d,) = self.planner.decide(
                self.state, now, current_replicas=current, arrival_rates=rates, arrivals_totals=totals
            )
        else:  # the control loop's call without a gateway rate source
            (d,) = self.planner.decide(self.state, now, current_replicas=current)
        self.forecasts.append(
            ForecastPoint(now, d.forecast["horizon_s"], d.forecast["arrival_rate"], d.forecast["arrival_rate_upper"])
        )
        self.reasons.append(d.reason)
        return scale_target(d)  # what KEDA and the direct actuator are told

    def _departed(self, replicas: list[Any]) -> set[str]:
        seen = {f"{NAMESPACE}/{r.name}" for r in replicas}
        known = {r.key for r in self.state.replicas()}
        return known - seen


def _scrape(replica: Any, now: float) -> list[ReplicaSample]:
    target = TargetInfo(
        url=f"http://{replica.name}/metrics", engine="vllm", namespace=NAMESPACE, deployment=NAME, pod=replica.name
    )
    return adapt_page(sim.render_page(replica, "vllm"), target, now, engine="vllm").replicas
