"""The replica counts kvpilot publishes (``kvpilot_deployment_replicas{state}`` on /metrics, the API's deployment
summary) for a fleet read through the PromQL source (tests/services/promapi.py): in ``aggregates`` mode the view's
``replicas`` holds only the replicas a detector must see, while ``ready_replicas`` is Prometheus' ``sum(up)``, so
counting ``len(replicas)`` as every replica gave `loading` -27 beside `ready` 29 and 2 replicas in the summary for a
deployment of 30 (-98 beside 99 in bench/shards.py's fleet). Each state now comes from the same reading: ready +
loading = the replicas the summary and the planner count, in both modes (the loop tells the planner
``known_replicas`` without a scale source; the two modes compared: test_replica_counts_modes.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Literal

import pytest

from api import convert
from api.exposition import render_snapshot
from collector.clock import VirtualClock
from collector.discovery.promql import PromQLSource
from collector.state import FleetState
from kvpilot.runtime.snapshot import Snapshot
from tests.services.promapi import T0, FakeFleet, serve


@pytest.fixture(scope="module")
def fleet() -> Iterator[tuple[FakeFleet, str]]:
    # 3 deployments of 30 replicas: 2 sick in each (read one by one in aggregates mode), 1 down (`up == 0`)
    f = FakeFleet(90, per_deployment=30, sick_every=15, down_every=30)
    server = serve(f)
    yield f, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


async def _read(url: str, mode: Literal["aggregates", "replicas"]) -> FleetState:
    clock = VirtualClock(T0 + 600.0)
    # timeout_s: a hang guard (the default 10 s timed out the replicas mode's reads once at load 13)
    source = PromQLSource(url, mode=mode, clock=clock, timeout_s=60.0)
    state = FleetState()
    try:
        for _ in range(3):
            result = await source.collect_once()
            state.observe(result.replicas, result.gpus, now=clock.now(), down_targets=result.down_targets)
            if mode == "aggregates":
                state.observe_deployments(source.last_aggregates, now=clock.now())
            clock.advance(5.0)
    finally:
        await source.aclose()
    return state


def _published(state: FleetState) -> dict[str, tuple[int, int, int, int]]:
    """Each deployment's (ready, loading) on /metrics, the API summary's replicas and the planner's current count."""
    page = render_snapshot(Snapshot(tick=3, t=T0 + 615.0, deployments=state.deployments())).decode()
    gauges = {
        (m.group(1), m.group(2)): float(m.group(3))
        for m in re.finditer(r'^kvpilot_deployment_replicas\{deployment="([^"]*)",state="(\w+)"\} (\S+)$', page, re.M)
    }
    out: dict[str, tuple[int, int, int, int]] = {}
    for key, view in state.deployments().items():
        ready, loading = gauges[key, "ready"], gauges[key, "loading"]
        assert ready.is_integer(), key
        assert loading.is_integer(), key
        # the planner's current count: what the loop hands it without a scale source (`ControlLoop._decide_seen`)
        out[key] = (int(ready), int(loading), convert.deployment(key, view, None, None).replicas, view.known_replicas)
    return out


async def test_aggregates_mode_publishes_every_replica_and_no_negative_loading(fleet: tuple[FakeFleet, str]) -> None:
    _, url = fleet
    state = await _read(url, "aggregates")
    d0 = state.deployments()["prod/llm-0"]
    assert (len(d0.replicas), d0.replica_count, d0.ready_replicas) == (2, 30, 29)  # the reading this test is about
    # 29 ready, the down one not ready; 30 in the summary, as the planner counts them (c126946: loading -27, 2)
    assert _published(state) == {f"prod/llm-{i}": (29, 1, 30, 30) for i in range(3)}


@pytest.mark.parametrize("mode", ["aggregates", "replicas"])
async def test_ready_and_loading_add_up_to_the_replicas_counted(
    fleet: tuple[FakeFleet, str], mode: Literal["aggregates", "replicas"]
) -> None:
    _, url = fleet
    published = _published(await _read(url, mode))
    assert sorted(published) == ["prod/llm-0", "prod/llm-1", "prod/llm-2"]
    for key, (ready, loading, summary, planner) in published.items():
        assert loading >= 0, key
        assert ready + loading == summary == planner, key
