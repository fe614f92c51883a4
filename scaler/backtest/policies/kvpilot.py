"""`kvpilot`: the real planner (`scaler.planner.Planner`) in the configuration `kvpilot run` uses, fed through the
live loop's input path: each tick every ready replica's snapshot is rendered as the vLLM `/metrics` page the
simulator serves, parsed and adapted by the collector into `ReplicaSample`s, observed by a real `FleetState`
(loading replicas serve no page yet, as their pods are not Ready), and the replica count comes from the "scale
subresource" (the simulator's count). Arrivals (`Context.arrivals`): "engines", the default, as `kvpilot run` reads
them by default (no `collector.arrivals` gateway source): the planner is called exactly as the control loop calls it
(`kvpilot.runtime.loop`), and reads FleetState's estimate (requests finished plus the change in requests waiting and
running) and the engines' counters for the burst floor; "gateway": the router's request counter stands in for a
gateway's and reaches the planner as `kvpilot run` with `collector.arrivals` hands one over: scraped every
`Context.gateway_scrape_s` (`scaler.backtest.gateway.ScrapedCounter`: an instant query answers the last scrape), read
each tick by the live loop's reader (`collector.counter_rates.CounterRates`: reset-aware rate over the rate window,
each scrape's step spread over the time it took to build, none until the readings span half the window) and handed
over as the loop hands it (`arrival_rates` where it has a rate, else the engines' estimate; `arrivals_totals`)."""

from __future__ import annotations

import math
from typing import Any

from collector.adapt import adapt_page
from collector.counter_rates import Arrivals, CounterRates
from collector.samples import ReplicaSample, TargetInfo
from collector.state import FleetState
from scaler.backtest import sim
from scaler.backtest.gateway import ScrapedCounter
from scaler.backtest.observe import History
from scaler.backtest.policies.base import Context, ForecastPoint, Policy
from scaler.own_raise import OwnRaise
from scaler.planner import Planner, PlannerConfig
from scaler.publish import scale_target

NAMESPACE, NAME = "backtest", "llm"
DEPLOYMENT = f"{NAMESPACE}/{NAME}"
RATE_WINDOW_S = 60.0  # collector.rate_window_s's default: FleetState's window and the gateway reader's
ROUTER_SERIES = (("deployment", NAME), ("namespace", NAMESPACE))  # the one router's series, as a gateway labels it


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
        self.state = FleetState(rate_window_s=RATE_WINDOW_S, stale_after_s=6 * ctx.tick_s)
        # "gateway": the router's counter as Prometheus scrapes it, and the reader `kvpilot run`'s loop uses
        self.gateway = ScrapedCounter(ctx.gateway_scrape_s)
        self.counts = CounterRates(RATE_WINDOW_S)
        self._told_s = -math.inf  # the last tick of the history told to the gateway
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
            arrivals = self._read_gateway(history, now)
            # as the control loop hands them over (kvpilot.runtime.loop): a deployment without a gateway rate yet
            # keeps the engines' estimate
            (d,) = self.planner.decide(
                self.state,
                now,
                current_replicas=current,
                arrival_rates=arrivals.rates or None,
                arrivals_totals=arrivals.totals or None,
            )
        else:  # the control loop's call without a gateway rate source
            (d,) = self.planner.decide(self.state, now, current_replicas=current)
        self.forecasts.append(
            ForecastPoint(now, d.forecast["horizon_s"], d.forecast["arrival_rate"], d.forecast["arrival_rate_upper"])
        )
        self.reasons.append(d.reason)
        return scale_target(d)  # what KEDA and the direct actuator are told

    @staticmethod
    def gateway_reading(ctx: Context) -> dict[str, Any]:
        """How "gateway" reads the router's counter, for the report."""
        return {
            "series": 1,  # the simulator's one router
            "scrape_interval_s": ctx.gateway_scrape_s,
            "rate_window_s": RATE_WINDOW_S,
            "reader": "collector.counter_rates.CounterRates (kvpilot run's collector.arrivals)",
        }

    def _read_gateway(self, history: History, now: float) -> Arrivals:
        """The router's counter as Prometheus has scraped it by ``now`` (every tick since the last decision told to
        the scrape), read as the control loop reads a gateway's each tick."""
        for obs in history:
            if obs.t > self._told_s:
                self.gateway.observe(obs.t, obs.arrivals_total)
                self._told_s = obs.t
        value = self.gateway.value
        return self.counts.observe(now, [] if value is None else [(DEPLOYMENT, ROUTER_SERIES, value)])

    def _departed(self, replicas: list[Any]) -> set[str]:
        seen = {f"{NAMESPACE}/{r.name}" for r in replicas}
        known = {r.key for r in self.state.replicas()}
        return known - seen


def _scrape(replica: Any, now: float) -> list[ReplicaSample]:
    target = TargetInfo(
        url=f"http://{replica.name}/metrics", engine="vllm", namespace=NAMESPACE, deployment=NAME, pod=replica.name
    )
    return adapt_page(sim.render_page(replica, "vllm"), target, now, engine="vllm").replicas
