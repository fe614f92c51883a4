"""What `kvpilot demo`'s control loop hands the planner as arrivals: by default nothing from the simulated gateway,
so that the planner reads the engines' estimate in FleetState as under `kvpilot run` on Kubernetes without a gateway
counter (`collector.arrivals`, off by default) and as `kvpilot backtest` does by default; `--arrivals gateway` passes
the simulated router's arrival rate, as a gateway's."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from kvpilot.demo.replay import DemoConfig, run_demo
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
    return passed


def test_the_default_demo_passes_the_planner_no_gateway_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    # before: SimulatorScale filled ScaleView.arrival_rates with the simulated router's rate at every tick, a
    # set-up matching neither `kvpilot run` on Kubernetes nor `kvpilot backtest`'s default
    passed = _rates_passed(monkeypatch, SHORT)
    assert len(passed) >= 15  # every tick of the 90 s replay decided
    assert [rates for rates in passed if rates is not None] == []


def test_arrivals_gateway_passes_the_simulated_routers_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    passed = _rates_passed(monkeypatch, dataclasses.replace(SHORT, arrivals="gateway"))
    rates = [r for r in passed if r is not None]
    assert len(rates) >= len(passed) - 1  # every tick after the first reading has a rate
    assert all(set(r) == {"inference/llama"} and r["inference/llama"] > 0 for r in rates)


def test_an_unknown_arrivals_source_is_refused() -> None:
    with pytest.raises(ValueError, match="arrivals must be one of engines, gateway"):
        DemoConfig(arrivals="router")
