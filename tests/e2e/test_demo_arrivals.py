"""What `kvpilot demo`'s control loop hands the planner as arrivals: by default nothing from the simulated gateway,
so that the planner reads the engines' estimate in FleetState as under `kvpilot run` on Kubernetes without a gateway
counter (`collector.arrivals`, off by default) and as `kvpilot backtest` does by default; `--arrivals gateway` reads
the simulated router's request counter as `kvpilot run` reads a gateway's: as Prometheus scrapes it, through the loop's
arrivals stage (`GatewayArrivals`)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import pytest

from kvpilot.demo.replay import DemoConfig, run_demo
from kvpilot.runtime.arrivals import GatewayArrivals, LabelMapping
from scaler.backtest.gateway import ScrapedCounter
from scaler.planner import Planner

pytestmark = pytest.mark.e2e

SHORT = DemoConfig(speed=0, duration_s=90, drain_s=30, faults=(), rate_scale=4.0)  # no faults: seconds


def _rates_passed(monkeypatch: pytest.MonkeyPatch, cfg: DemoConfig) -> list[Mapping[str, float] | None]:
    """The `arrival_rates` of every planner call of a short demo."""
    passed: list[Mapping[str, float] | None] = []
    decide = Planner.decide

    def spy(self: Planner, *args: Any, arrival_rates: Mapping[str, float] | None = None, **kw: Any) -> Any:
        passed.append(None if arrival_rates is None else dict(arrival_rates))
        return decide(self, *args, arrival_rates=arrival_rates, **kw)

    monkeypatch.setattr(Planner, "decide", spy)
    summary = asyncio.run(run_demo(cfg, on_update=lambda *_: None))
    assert summary.requests > 0
    # the --json summary says what the planner read (before: nothing said which)
    assert summary.to_json()["arrivals"] == cfg.arrivals
    assert "gateway" not in summary.to_json()
    return passed


def test_the_default_demo_passes_the_planner_no_gateway_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    # before: SimulatorScale filled ScaleView.arrival_rates with the simulated router's rate at every tick, a
    # set-up matching neither `kvpilot run` on Kubernetes nor `kvpilot backtest`'s default
    passed = _rates_passed(monkeypatch, SHORT)
    assert len(passed) >= 15  # every tick of the 90 s replay decided
    assert [rates for rates in passed if rates is not None] == []


def test_arrivals_gateway_hands_the_planner_what_kvpilot_run_reads_from_the_scraped_counter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # before: the scale source passed the simulated router's 30 s rate every tick, and no count: a path `kvpilot run`
    # with a gateway's counter (collector.arrivals) never takes
    calls: list[tuple[float, Any, Any]] = []
    router: list[tuple[float, float]] = []
    decide, observe = Planner.decide, ScrapedCounter.observe

    def spy_decide(self: Planner, state: Any, now: float, **kw: Any) -> Any:
        calls.append((now, kw.get("arrival_rates"), kw.get("arrivals_totals")))
        return decide(self, state, now, **kw)

    def spy_observe(self: ScrapedCounter, t: float, total: float) -> None:
        router.append((t, total))
        observe(self, t, total)

    monkeypatch.setattr(Planner, "decide", spy_decide)
    monkeypatch.setattr(ScrapedCounter, "observe", spy_observe)
    summary = asyncio.run(run_demo(dataclasses.replace(SHORT, arrivals="gateway"), on_update=lambda *_: None))
    assert summary.requests > 0
    said = summary.to_json()  # before: the --json summary did not say which arrivals, nor the scrape interval
    assert (said["arrivals"], said["gateway"]["scrape_interval_s"], said["gateway"]["rate_window_s"]) == (
        "gateway",
        10.0,
        60.0,
    )
    assert len(calls) == len(router) >= 15  # one reading and one decision a tick

    # what `kvpilot run`'s reader makes of the counter Prometheus scraped every 10 s, read on the planner's times
    scraped = dict(router)
    samples = [scraped[math.floor(t / 10.0) * 10.0] for t, _ in router]
    answers = iter(samples)
    labels = {"__name__": "router_requests_total", "namespace": "inference", "deployment": "llama"}

    async def prometheus(query: str, now: float) -> list[dict[str, Any]]:
        return [{"metric": labels, "value": [now, str(next(answers))]}]

    async def read_all() -> list[tuple[float, Any, Any]]:
        gateway = GatewayArrivals(prometheus, "q", LabelMapping(), window_s=60.0)
        out = []
        for now, _, _ in calls:
            a = await gateway.read(now, now)
            out.append((now, a.rates or None, a.totals or None))
        return out

    assert calls == asyncio.run(read_all())
    assert [c for c in calls if c[1]], "no gateway rate reached the planner"


def test_an_unknown_arrivals_source_is_refused() -> None:
    with pytest.raises(ValueError, match="arrivals must be one of engines, gateway"):
        DemoConfig(arrivals="router")
