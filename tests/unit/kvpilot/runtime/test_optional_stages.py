"""What only some stages offer (a PromQL source's per-deployment sums, its own gauges, its abort on shutdown, its
reads narrowed to a shard's deployments; a lease to keep up) is recognised by protocol, not looked up by name: the
PromQL source is all four, the scraping collector only the abort (its page reader), and the service and loop act on
exactly what they recognise.
(mypy checks the classes against the protocols in kvpilot/runtime/wiring.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from collector.clock import VirtualClock
from collector.discovery.promql import PromQLSource
from kvpilot.runtime.lease import LeaseElector
from kvpilot.runtime.loop import Aggregates
from kvpilot.runtime.service import Abortable, AlwaysLeader, Campaigns, HasOwnMetrics
from kvpilot.runtime.shards import CollectsOwned, OwnedCollect
from kvpilot.runtime.sources import build
from kvpilot.runtime.wiring import build_service
from kvpilot.settings import load_settings


def _service(tmp_path: Path, discovery: dict[str, object]):  # type: ignore[no-untyped-def]
    settings = load_settings(
        store={"database_url": f"sqlite:///{tmp_path / 'k.db'}"}, collector={"discovery": discovery}
    )
    with build(settings) as sources:
        service, _restored = build_service(settings, sources)
    service.engine.dispose()
    return service


def test_a_promql_source_offers_its_sums_gauges_and_abort(tmp_path: Path) -> None:
    service = _service(tmp_path, {"kind": "promql", "promql_url": "http://127.0.0.1:9"})
    source = service.loop.collector
    assert all(isinstance(source, offers) for offers in (Aggregates, HasOwnMetrics, Abortable, CollectsOwned))
    assert service.loop._aggregates is source  # the loop reads its sums every tick
    assert any(m.name.startswith("kvpilot_promql") for m in service.metrics.registry.collect())  # its own gauges


def test_the_scraping_collector_offers_only_its_abort(tmp_path: Path) -> None:
    service = _service(tmp_path, {"kind": "static"})
    collector = service.loop.collector
    assert isinstance(collector, Abortable)  # SIGTERM ends its page reader process with the page it reads
    assert not isinstance(collector, Aggregates | HasOwnMetrics | CollectsOwned)
    assert service.loop._aggregates is None
    assert not any(m.name.startswith("kvpilot_promql") for m in service.metrics.registry.collect())


def test_only_a_lease_is_campaigned_for() -> None:
    assert not isinstance(AlwaysLeader(), Campaigns)
    assert isinstance(LeaseElector.__new__(LeaseElector), Campaigns)


class _NoShards:
    def held(self) -> None:
        return None


async def test_a_sharded_collect_stage_passes_the_abort_to_its_source() -> None:
    # With sharding on, the loop's collect stage is OwnedCollect around the source: SIGTERM's abort must reach it.
    source = PromQLSource("http://127.0.0.1:9", clock=VirtualClock(1_700_000_000.0))
    try:
        owned = OwnedCollect(source, cast(Any, _NoShards()))
        assert isinstance(owned, Abortable)
        owned.abort()
        assert source._stop.is_set()
        assert not isinstance(OwnedCollect(object(), cast(Any, _NoShards())), Abortable)  # nothing to pass it to
    finally:
        await source.aclose()
