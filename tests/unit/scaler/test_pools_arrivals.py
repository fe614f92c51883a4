"""`PooledPlanner` hands the gateway's counts (``arrivals_totals``) to the planner of its co-located deployments, as
the control loop passes them from `collector.arrivals`: before, it took no such argument, so the loop could not hand
a gateway's counts to `kvpilot run`'s planner where `scaler.pools` is set."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from collector.state import FleetState
from scaler.planner import Planner
from scaler.pools import PooledPlanner
from tests.unit.scaler.test_pools import CONFIG


class _Recording(Planner):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any]] = []

    def decide(self, state: FleetState, now: float, **kw: Any) -> list[Any]:  # type: ignore[override]
        self.calls.append(kw)
        return super().decide(state, now, **kw)


def test_the_gateway_counts_reach_the_co_located_planner() -> None:
    inner = _Recording()
    planner = PooledPlanner(inner, CONFIG)
    totals: Mapping[str, float] = {"llm/chat": 1200.0}
    planner.decide(
        FleetState(rate_window_s=30),
        100.0,
        current_replicas={"llm/chat": 0},
        arrival_rates={"llm/chat": 4.0},
        arrivals_totals=totals,
    )
    assert inner.calls[-1]["arrival_rates"] == {"llm/chat": 4.0}
    assert inner.calls[-1]["arrivals_totals"] == totals
