"""With sharding the drain circuit breaker counts the fleet's nodes (``kvpilot.actuation.FleetShare``): each instance
stores the node set of its snapshot (``instance_nodes``), the denominator is the union of the live instances' sets,
the numerator the nodes any instance's findings flag (``findings``). Before, each instance's share was of its own
nodes: small shards tripped at 2 flagged nodes each, and the fleet's limit was the sum of theirs. On SQLite and on a
real PostgreSQL; without sharding nothing changes and nothing is stored."""

from __future__ import annotations

import random
from collections.abc import Iterator
from unittest.mock import patch

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from collector.clock import VirtualClock
from detectors.drain_rails import DrainRails, Placement, decide
from detectors.finding import Finding, Severity, Subject
from kvpilot.actuation import Actuation, FleetShare, NoClusterDrainer
from kvpilot.runtime.snapshot import Snapshot
from kvpilot.runtime.sources import Sources
from kvpilot.runtime.targets import StaticTargets
from kvpilot.runtime.wiring import build_actuation
from kvpilot.settings import load_settings
from store import repo
from store.db import make_engine, session_factory, transaction
from store.models import InstanceNodesRow
from tests.reliability.conftest import Store

NOW = 1_700_000_000.0
LEASE_S = 15.0


@pytest.fixture
def sessions(store: Store) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(store.url)
    yield session_factory(engine)
    engine.dispose()


def _stuck(node: str) -> Finding:
    return Finding("stuck_gpu", Severity.CRITICAL, Subject(node=node, gpu="GPU-1"), NOW - 30, f"XID 79 on {node}",
                   action="drain_node")  # fmt: skip


def _actuation(sessions: sessionmaker[Session], fleet: FleetShare | None, refusals: list[tuple[str, str]]) -> Actuation:
    clock = VirtualClock(NOW)
    return Actuation(sessions=sessions, clock=clock, rails=DrainRails(dry_run=True), drainer=NoClusterDrainer(clock),
                     on_refusal=lambda node, rail: refusals.append((node, rail)), fleet=fleet)  # fmt: skip


def _other(sessions: sessionmaker[Session], who: str, nodes: list[str], flagged: list[str], at: float) -> None:
    """Another instance: its node set refreshed at ``at``, its findings written (it closes none of the others')."""
    with transaction(sessions) as s:
        repo.refresh_instance_nodes(session=s, instance=who, nodes=nodes, now=at)
        repo.upsert_findings(session=s, active=[_stuck(n) for n in flagged], now=at, closes=lambda *a: False)


def _request(act: Actuation, nodes: list[str], flagged: list[str]) -> None:
    """One pass of an instance whose snapshot holds a ready replica of one deployment on each of ``nodes`` (the
    placements its rails read) and the findings flagging ``flagged``."""
    placements = [Placement("team/llm", f"llm-{n}", n, True) for n in nodes]
    with patch("kvpilot.actuation.recheck.placements", return_value=placements):
        act._request_drains(Snapshot(tick=1, t=NOW, findings=[_stuck(n) for n in flagged]))


def _requested(sessions: sessionmaker[Session]) -> list[str]:
    with transaction(sessions, reads_only=True) as s:
        return sorted(r.node for r in repo.list_drains(session=s).items)


def _fleet(who: str) -> FleetShare:
    return FleetShare(who, stale_after_s=3 * LEASE_S, refresh_every_s=LEASE_S)


def _names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def test_three_instances_node_sets_and_one_gone_stale(store: Store, sessions: sessionmaker[Session]) -> None:
    _other(sessions, "kvpilot-b", _names("b", 3), [], NOW - 10)
    _other(sessions, "kvpilot-c", _names("c", 2), [], NOW - 3 * LEASE_S - 1)  # not refreshed for 3 lease periods
    with transaction(sessions) as s:
        repo.refresh_instance_nodes(session=s, instance="kvpilot-a", nodes=["a1", "a0", "a0"], now=NOW)
    with transaction(sessions) as s:
        live = repo.live_instance_nodes(session=s, now=NOW, stale_after_s=3 * LEASE_S)
    assert live == {"kvpilot-a": {"a0", "a1"}, "kvpilot-b": {"b0", "b1", "b2"}}
    with transaction(sessions, reads_only=True) as s:  # the read deletes nothing: a reader's wall clock ahead took
        # a live instance's row (rows go once watched unchanged: test_drain_orphans_clock_steps.py)
        assert sorted(s.scalars(select(InstanceNodesRow.instance))) == ["kvpilot-a", "kvpilot-b", "kvpilot-c"]
    with transaction(sessions) as s:  # a refresh replaces the set
        repo.refresh_instance_nodes(session=s, instance="kvpilot-b", nodes=["b9"], now=NOW + 1)
    with transaction(sessions) as s:
        assert repo.live_instance_nodes(session=s, now=NOW + 1, stale_after_s=3 * LEASE_S)["kvpilot-b"] == {"b9"}


def test_the_breaker_trips_on_the_fleets_share_where_no_shard_alone_would(
    store: Store, sessions: sessionmaker[Session]
) -> None:
    # 3 instances of 5 nodes each; 2 flagged on a, 2 on b, 1 on c: each alone is within max(2, 0.2 x 5) = 2, the
    # fleet's 5 of 15 is above max(2, 0.2 x 15) = 3. Before, each instance drained on its own.
    _other(sessions, "kvpilot-b", _names("b", 5), ["b0", "b1"], NOW - 5)
    _other(sessions, "kvpilot-c", _names("c", 5), ["c0"], NOW - 5)
    refusals: list[tuple[str, str]] = []
    a = _actuation(sessions, _fleet("kvpilot-a"), refusals)
    _request(a, _names("a", 5), ["a0", "a1"])
    assert sorted(refusals) == [("a0", "refused_circuit_breaker"), ("a1", "refused_circuit_breaker")]
    assert _requested(sessions) == []
    alone: list[tuple[str, str]] = []  # the same instance without sharding: its own 2 of 5, drained one at a time
    _request(_actuation(sessions, None, alone), _names("a", 5), ["a0", "a1"])
    assert alone == [("a1", "refused_max_concurrent")]
    assert _requested(sessions) == ["a0"]


def test_one_shards_three_flagged_nodes_do_not_trip_the_fleets_breaker(
    store: Store, sessions: sessionmaker[Session]
) -> None:
    # a holds 6 nodes, 3 flagged: alone above max(2, 1); the fleet's 3 of 30 is within max(2, 6).
    _other(sessions, "kvpilot-b", _names("b", 12), [], NOW - 5)
    _other(sessions, "kvpilot-c", _names("c", 12), [], NOW - 5)
    alone: list[tuple[str, str]] = []
    _request(_actuation(sessions, None, alone), _names("a", 6), ["a0", "a1", "a2"])
    assert {rail for _, rail in alone} == {"refused_circuit_breaker"}
    refusals: list[tuple[str, str]] = []
    _request(_actuation(sessions, _fleet("kvpilot-a"), refusals), _names("a", 6), ["a0", "a1", "a2"])
    assert sorted(refusals) == [("a1", "refused_max_concurrent"), ("a2", "refused_max_concurrent")]
    assert _requested(sessions) == ["a0"]


def test_a_stale_instances_nodes_and_flags_are_not_counted(store: Store, sessions: sessionmaker[Session]) -> None:
    # as above, but b and c stopped refreshing 3 lease periods ago: the fleet is a's 6 nodes, 3 flagged: trips.
    # A finding b left open on a node no live instance holds is not counted either.
    _other(sessions, "kvpilot-b", _names("b", 12), ["b0"], NOW - 3 * LEASE_S - 1)
    _other(sessions, "kvpilot-c", _names("c", 12), [], NOW - 3 * LEASE_S - 1)
    refusals: list[tuple[str, str]] = []
    a = _actuation(sessions, _fleet("kvpilot-a"), refusals)
    _request(a, _names("a", 6), ["a0", "a1"])  # 2 of 6 (b0 not counted): within max(2, 1)
    assert ("a0", "refused_circuit_breaker") not in refusals
    refusals.clear()
    _request(a, _names("a", 6), ["a0", "a1", "a2"])
    assert {rail for _, rail in refusals} == {"refused_circuit_breaker"}
    clock = a._clock
    assert isinstance(clock, VirtualClock)
    clock.advance(3 * LEASE_S)  # b's and c's rows watched unchanged for stale_after_s here: deleted
    _request(a, _names("a", 6), ["a0"])
    with transaction(sessions, reads_only=True) as s:
        assert sorted(s.scalars(select(InstanceNodesRow.instance))) == ["kvpilot-a"]


def test_an_instance_refreshes_its_set_when_it_changes_or_a_lease_period_passed(
    store: Store, sessions: sessionmaker[Session]
) -> None:
    a = _actuation(sessions, _fleet("kvpilot-a"), [])
    clock = a._clock
    assert isinstance(clock, VirtualClock)

    def stored() -> tuple[list[str], float]:
        with transaction(sessions, reads_only=True) as s:
            row = s.get(InstanceNodesRow, "kvpilot-a")
            assert row is not None
            return row.nodes, row.refreshed_at

    _request(a, ["a0"], ["a0"])
    assert stored() == (["a0"], NOW)
    clock.advance(5.0)
    _request(a, ["a0"], ["a0"])
    assert stored() == (["a0"], NOW)  # the same set within a lease period: not written again
    _request(a, ["a0", "a1"], ["a0"])
    assert stored() == (["a0", "a1"], NOW + 5)
    clock.advance(LEASE_S)
    _request(a, ["a0", "a1"], ["a0"])
    assert stored() == (["a0", "a1"], NOW + 5 + LEASE_S)
    clock.advance(LEASE_S)  # nothing flagged here: the breaker reads nothing, but the set is kept fresh for the others
    _request(a, ["a0", "a1"], [])
    assert stored() == (["a0", "a1"], NOW + 5 + 2 * LEASE_S)


def test_without_sharding_nothing_is_stored(store: Store, sessions: sessionmaker[Session]) -> None:
    refusals: list[tuple[str, str]] = []
    _request(_actuation(sessions, None, refusals), _names("a", 5), ["a0", "a1", "a2"])
    assert {rail for _, rail in refusals} == {"refused_circuit_breaker"}
    with transaction(sessions, reads_only=True) as s:
        assert list(s.scalars(select(InstanceNodesRow))) == []


def test_a_single_instances_decisions_are_unchanged() -> None:
    """``decide`` without a fleet is the single instance's rule; a fleet of this instance alone decides the same (the
    breaker's sentence alone says whose nodes it counted)."""
    rng = random.Random(20)
    for _ in range(300):
        nodes = _names("n", rng.randint(1, 20))
        flagged = rng.sample(nodes, rng.randint(1, len(nodes)))
        placements = [Placement(f"d/{rng.randint(0, 3)}", f"p{i}", rng.choice(nodes), rng.random() < 0.8)
                      for i in range(rng.randint(0, 30))]  # fmt: skip
        draining = set(rng.sample(nodes, rng.randint(0, 2))) if len(nodes) > 1 else set()
        rails = DrainRails(dry_run=rng.random() < 0.5, max_concurrent_nodes=rng.randint(0, 3), budget=rng.randint(0, 4))
        findings = [_stuck(n) for n in flagged]
        kw = {"nodes": nodes, "placements": placements, "draining": draining, "rails": rails, "budget_spent": 1}
        plain = decide(findings, **kw)  # type: ignore[arg-type]
        fleet = decide(findings, fleet_nodes=set(nodes), fleet_flagged=set(flagged), **kw)  # type: ignore[arg-type]
        assert [(d.node, d.verdict, d.finding_ids, d.evidence) for d in fleet] == [
            (d.node, d.verdict, d.finding_ids, d.evidence) for d in plain
        ]
        assert [d.reason for d in fleet if d.verdict != "refused_circuit_breaker"] == [
            d.reason for d in plain if d.verdict != "refused_circuit_breaker"
        ]


def test_wiring_gives_a_sharded_instance_its_fleet_share() -> None:
    sources = Sources(None, StaticTargets([]))
    fleet = build_actuation(load_settings(), sources, None, VirtualClock(0), identity="kvpilot-a")._fleet
    assert fleet == FleetShare("kvpilot-a", stale_after_s=45.0, refresh_every_s=15.0)  # 3 and 1 x ha.lease_duration_s
    assert build_actuation(load_settings(), sources, None, VirtualClock(0))._fleet is None
