"""A shard taken over mid-run resumes what a restart restores (session 20 helper E, after G1 and G2): the new holder
read only the stored decisions, so a GPU its old holder saw vanish was unknown to it (never seen present: the
finding closed, its drain withdrawn) and its deployments' learned capacity was learned again (``no_capacity`` holds
meanwhile). Two instances' ShardCoordinators on the fake API server and one SQLite store; the one that takes the shard
is built by ``build_service`` (real wiring) before the other stores what it saw, so its own start restored nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

import migrations
from collector.clock import VirtualClock
from kvpilot.runtime.restore import restore_taken
from kvpilot.runtime.shards import WAKE_AFTER_EXPIRY_S
from kvpilot.runtime.sources import Sources
from kvpilot.runtime.targets import StaticTargets
from kvpilot.runtime.wiring import build_service
from store import repo
from store.db import make_engine, session_factory, transaction
from tests.fakekube import FakeKube
from tests.unit.detectors.detector_fleet import gpu
from tests.unit.kvpilot.fleet_double import ENGINE, GPU, START, ScriptedFleet, settings_for
from tests.unit.kvpilot.runtime.test_restart_vanished_gpu import _before_restart
from tests.unit.kvpilot.runtime.test_shards_takeover import _coordinator

LEASE_S = 15.0


async def test_the_instance_that_takes_a_shard_resumes_its_vanished_gpus_and_learned_capacity(
    kube: FakeKube, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'kvpilot.db'}"
    clock = VirtualClock(START)
    a, b = _coordinator(kube, clock, "a", LEASE_S), _coordinator(kube, clock, "b", LEASE_S)
    for _ in range(10):  # a joins, then takes every shard
        a.round()
        if len(a.owned) == 3:
            break
        clock.advance(1)
    assert a.owned == {0, 1, 2}
    static = StaticTargets([ENGINE, GPU])
    service, restored = build_service(
        settings_for(url), Sources(static, static), clock=clock, collector=ScriptedFleet(clock), leadership=b
    )
    assert (restored.findings, restored.capacities) == ([], {})
    loop = service.loop
    try:
        found = _before_restart([gpu(index="1", uuid="GPU-gone")], [gpu(index="0", uuid="GPU-stays")])
        with transaction(service.sessions) as s:  # what a, holding the shard, stored
            repo.upsert_findings(session=s, active=found, now=clock.now())
            repo.upsert_capacity(
                session=s, deployment="llm/chat", requests_per_s=4.0, tokens_per_s=None, source="observed",
                now=clock.now(),
            )  # fmt: skip
        b.round()
        assert b.owned == frozenset()
        assert loop.takes_over is not None
        assert await loop.takes_over() == []  # holds nothing: nothing read, nothing seeded
        assert loop.state.gpus() == []
        assert loop.planner.capacity("llm/chat") is None

        clock.advance(LEASE_S + WAKE_AFTER_EXPIRY_S + 1)  # a crashed: its Leases expire, b takes the shards
        b.round()
        assert b.owned == {0, 1, 2}
        await loop.takes_over()
        # its node's exporter answers without it: known gone, its finding stays open (on the parent: never seen there,
        # so unknown, and the finding closed)
        loop.state.observe([], [gpu(t=clock.now(), index="0", uuid="GPU-stays")], now=clock.now())
        assert sorted((g.sample.uuid, g.present) for g in loop.state.gpus()) == [
            ("GPU-gone", False),
            ("GPU-stays", True),
        ]
        # the capacity a learned sizes b's first decision (on the parent: None, no_capacity until relearned)
        assert loop.planner.capacity("llm/chat") == (pytest.approx(4.0), "learned")
    finally:
        service.engine.dispose()


def test_only_the_shards_taken_resume_their_capacity(tmp_path: Path) -> None:
    """The learned capacity of the deployments of the shards taken alone (``ours``); the open findings whole."""
    url = f"sqlite:///{tmp_path / 'kvpilot.db'}"
    migrations.upgrade(url)
    sessions = session_factory(make_engine(url))
    with transaction(sessions) as s:
        for key in ("llm/chat", "llm/other"):
            repo.upsert_capacity(
                session=s, deployment=key, requests_per_s=4.0, tokens_per_s=None, source="observed", now=START
            )
    taken = restore_taken(sessions, now=START + 60, history_s=86400, ours=lambda key: key == "llm/other")
    assert taken.capacities == {"llm/other": pytest.approx(4.0)}
    assert restore_taken(sessions, now=START + 60, history_s=30, ours=lambda key: True).capacities == {}
