"""The two PromQL modes count the same fleet alike (tests/services/promapi.py, `kvpilot run`'s loop without a scale
source, as PromQL users often run it): a target Prometheus knows but that has been down (`up == 0`, no engine
series) since before kvpilot first read it is a replica not ready in both. `aggregates` counts it from `count(up)`;
`replicas` read its `up` in the same answer but dropped the target (it served no wanted family), so that mode counted
one replica fewer: known 19 against 20, loading 0 against 1, the decision's `current_replicas` 19 against 20 per such
target. A target that goes down later was counted by `replicas` mode until FleetState forgot it (`forget_after_s`),
then no more. Neither counts as ready (capacity) in either mode once stale."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import httpx
import pytest

from api.auth import TokenAuth
from api.main import create_app
from collector.clock import VirtualClock
from collector.discovery.promql import PromQLSource
from kvpilot.runtime.service import Service
from kvpilot.runtime.sources import Sources
from kvpilot.runtime.targets import StaticTargets
from kvpilot.runtime.wiring import build_service
from tests.services.promapi import T0, FakeFleet, serve
from tests.unit.kvpilot.fleet_double import settings_for

Mode = Literal["aggregates", "replicas"]
MODES: tuple[Mode, ...] = ("aggregates", "replicas")
KEYS = ("prod/llm-0", "prod/llm-1", "prod/llm-2")
READER = "r" * 24
LATER = 5  # llm-0-5 goes down after the first ticks; llm-N-13 are down from the start (down_every)


@pytest.fixture
def fleet() -> Iterator[tuple[FakeFleet, str]]:
    # 3 deployments of 20 replicas: llm-N-7 sick (read one by one in aggregates mode), llm-N-13 down from the start
    f = FakeFleet(60, per_deployment=20, sick_every=20, down_every=20)
    server = serve(f)
    yield f, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


Counts = dict[str, tuple[int, int, int, int, int, int, int]]


async def _published(service: Service) -> Counts:
    """Per deployment: the view's known, ready and loading replicas; /metrics' ready and loading gauges;
    `/v1/deployments`' replicas; the decision's current replicas."""
    app = create_app(service, TokenAuth([READER], ["a" * 24], anonymous_read=False))
    headers = {"Authorization": f"Bearer {READER}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://kvpilot") as client:
        page = (await client.get("/metrics", headers=headers)).text
        listed = (await client.get("/v1/deployments", headers=headers)).json()
    gauges = {
        (m.group(1), m.group(2)): float(m.group(3))
        for m in re.finditer(r'^kvpilot_deployment_replicas\{deployment="([^"]*)",state="(\w+)"\} (\S+)$', page, re.M)
    }
    summary = {item["key"]: item["replicas"] for item in listed["items"]}
    snap = service.loop.latest
    assert snap is not None
    out: Counts = {}
    for key in KEYS:
        view, decision = snap.deployments[key], snap.decisions[key]
        ready, loading = gauges[key, "ready"], gauges[key, "loading"]
        assert ready.is_integer(), key
        assert loading.is_integer(), key
        out[key] = (
            view.known_replicas,
            view.ready_replicas,
            view.loading_replicas,
            int(ready),
            int(loading),
            summary[key],
            decision.current_replicas,
        )
    return out


async def test_both_modes_count_a_target_down_since_before_it_was_read_and_one_down_later(
    fleet: tuple[FakeFleet, str], tmp_path: Path
) -> None:
    f, url = fleet
    clock = VirtualClock(T0 + 600.0)
    services: dict[Mode, Service] = {}
    sources: list[PromQLSource] = []
    for mode in MODES:
        # timeout_s: a hang guard
        source = PromQLSource(url, mode=mode, reader="thread", clock=clock, timeout_s=60.0)
        sources.append(source)
        services[mode], _ = build_service(
            settings_for(f"sqlite:///{tmp_path / f'{mode}.db'}"),
            Sources(discovery=source, static=StaticTargets(), collector=source),
            clock=clock,
        )
    seen: dict[str, dict[Mode, Counts]] = {}

    async def ticks(n: int, step_s: float, name: str) -> None:
        for _ in range(n):
            clock.advance(step_s)
            for mode in MODES:
                await services[mode].loop.tick()
        seen[name] = {mode: await _published(services[mode]) for mode in MODES}

    try:
        await ticks(3, 5.0, "first")
        # llm-N-13 down since before the first read: 20 replicas, 19 ready, 1 loading, in both modes
        assert seen["first"]["replicas"] == seen["first"]["aggregates"] == {k: (20, 19, 1, 19, 1, 20, 20) for k in KEYS}
        f.take_down(LATER)
        # past collector.stale_after_s (30 s), when a replica read before and down since stops counting as ready
        await ticks(8, 5.0, "later")
        assert seen["later"]["replicas"] == seen["later"]["aggregates"]
        assert seen["later"]["replicas"]["prod/llm-0"] == (20, 18, 2, 18, 2, 20, 20)
        # past forget_after_s (300 s): FleetState forgets llm-0-5's track, and counts its target, still down, as one
        # never read
        await ticks(2, 200.0, "forgotten")
        assert seen["forgotten"]["replicas"] == seen["forgotten"]["aggregates"]
        assert seen["forgotten"]["replicas"]["prod/llm-0"] == (20, 18, 2, 18, 2, 20, 20)
        assert seen["forgotten"]["replicas"]["prod/llm-1"] == (20, 19, 1, 19, 1, 20, 20)
    finally:
        for source in sources:
            await source.aclose()
