"""A deployment an instance no longer decides leaves its /metrics decision counters: a shard handed over, a
deployment taken back later counts again from zero (issue 17: an instance that held every shard while the others
started rendered the whole fleet's frozen counters at every scrape, and two instances exported one deployment's)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.clock import VirtualClock
from collector.discovery.promql import PromQLSource
from kvpilot.runtime.sources import Sources
from kvpilot.runtime.targets import StaticTargets
from kvpilot.runtime.wiring import build_service
from tests.services.promapi import FakeFleet, serve
from tests.unit.kvpilot.fleet_double import settings_for
from tests.unit.kvpilot.runtime.test_shards_promql import NOW, _holding, _of


@pytest.fixture(scope="module")
def fleet() -> Iterator[str]:
    f = FakeFleet(300, per_deployment=10, sick_every=20, down_every=50)
    server = serve(f)
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _counted(service: object) -> dict[str, float]:
    """kvpilot_decisions_total by deployment, as /metrics renders it."""
    out: dict[str, float] = {}
    for family in service.loop.metrics.decisions.collect():  # type: ignore[attr-defined]
        for s in family.samples:
            if s.name.endswith("_total"):
                out[s.labels["deployment"]] = out.get(s.labels["deployment"], 0.0) + s.value
    return out


async def test_a_shard_handed_over_takes_its_decision_counters_off_metrics(fleet: str, tmp_path: Path) -> None:
    clock = VirtualClock(NOW)
    source = PromQLSource(fleet, mode="aggregates", reader="thread", clock=clock)
    shards = _holding(0, 1, 2)
    service, _ = build_service(
        settings_for(f"sqlite:///{tmp_path / 'kv.db'}"),
        Sources(discovery=source, static=StaticTargets(), collector=source),
        clock=clock,
        leadership=shards,
    )
    try:
        await service.loop.tick()
        assert set(_counted(service)) == _of(0, 1, 2)
        shards.owned = frozenset({1})  # two instances joined and took shards 0 and 2
        clock.advance(5.0)
        await service.loop.tick()
        assert set(_counted(service)) == _of(1)
        shards.owned = frozenset({0, 1})  # shard 0 back (its instance died): counted again, from zero
        clock.advance(5.0)
        await service.loop.tick()
        counted = _counted(service)
    finally:
        await source.aclose()
    assert set(counted) == _of(0, 1)
    assert {counted[d] for d in _of(0)} == {1.0}
