"""Sharded instances reading Prometheus: each one's queries carry matchers of its own deployments, so Prometheus
(here the loopback Prometheus API, tests/services/promapi.py) selects and sends only those; together the instances
read every deployment exactly once, and a shard taken over widens the next tick's queries."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.clock import VirtualClock
from collector.discovery.promql import PromQLSource
from collector.promql import expressions as ex
from collector.scrape import CollectResult
from kvpilot.runtime.shards import OwnedCollect, ShardCoordinator, shard_of
from kvpilot.runtime.sources import Sources
from kvpilot.runtime.targets import StaticTargets
from kvpilot.runtime.wiring import build_service
from scaler.publish import DecisionBoard
from tests.services.promapi import T0, FakeFleet, Matchers, _label_matchers, _matches, serve
from tests.unit.kvpilot.fleet_double import settings_for

NOW = T0 + 600.0
SHARDS = 3
DEPLOYMENTS = [f"prod/llm-{d}" for d in range(30)]  # 300 replicas, 10 per deployment
NARROWED = ("rules", "adhoc", "sick", "down")  # the queries that select replicas' or deployments' series


@pytest.fixture(scope="module")
def fleet() -> Iterator[tuple[FakeFleet, str]]:
    f = FakeFleet(300, per_deployment=10, sick_every=20, down_every=50)
    server = serve(f)
    yield f, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def small_fleet() -> Iterator[tuple[FakeFleet, str]]:
    """The same 30 deployments with one replica each: every raw series is read in ``replicas`` mode."""
    f = FakeFleet(30, per_deployment=1, sick_every=20, down_every=1000)  # replica 13 down
    server = serve(f)
    yield f, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _holding(*shards: int) -> ShardCoordinator:
    c = ShardCoordinator(
        None, lease_name="k", namespace="kv", identity="me", address="", shards=SHARDS, clock=VirtualClock()
    )
    c.owned = frozenset(shards)
    return c


def _of(*shards: int) -> set[str]:
    return {d for d in DEPLOYMENTS if shard_of(d, SHARDS) in shards}


def _asked(query: str) -> set[str]:
    """The deployments a query's matchers select, among the fleet's (as the loopback server reads them)."""
    matchers = _label_matchers(query)
    return {
        d for d in DEPLOYMENTS if _matches(dict(zip(("namespace", "deployment"), d.split("/"), strict=True)), matchers)
    }


async def _tick(f: FakeFleet, collect: OwnedCollect | PromQLSource) -> tuple[set[str], set[str], dict[str, int]]:
    """One tick: (deployments aggregated, deployments of the replicas read, series sent per query kind)."""
    f.log.clear()
    result = await collect.collect_once([])
    sent: dict[str, int] = {}
    for kind, _, series in f.log:
        sent[kind] = sent.get(kind, 0) + series
    aggregated = {f"{a.namespace}/{a.deployment}" for a in collect.last_aggregates}
    return aggregated, {s.deployment_key for s in result.replicas}, sent


async def test_each_instance_asks_only_for_its_deployments_and_together_they_read_each_once(
    fleet: tuple[FakeFleet, str],
) -> None:
    f, url = fleet
    whole_source = PromQLSource(url, mode="aggregates", reader="thread", clock=VirtualClock(NOW))
    try:
        whole, _, whole_sent = await _tick(f, whole_source)
    finally:
        await whole_source.aclose()
    assert whole == set(DEPLOYMENTS)
    seen: list[set[str]] = []
    for shard in range(SHARDS):
        source = PromQLSource(url, mode="aggregates", reader="thread", clock=VirtualClock(NOW))
        try:
            aggregated, replicas, sent = await _tick(f, OwnedCollect(source, _holding(shard)))
            queries = [(kind, q) for kind, q, _ in f.log]
        finally:
            await source.aclose()
        mine = _of(shard)
        assert aggregated == mine
        assert replicas <= mine
        # every query that selects replicas or deployments asks for exactly ours; naming them and the faulty GPUs
        # (no deployment label) are the fleet's
        assert {kind for kind, _ in queries} == {"deployments", "rules", "sick", "down", "gpus", "amd_gpus", "vanished"}
        assert all(_asked(q) == mine for kind, q in queries if kind in NARROWED)
        # Prometheus sends our share of the deployments' series, not the fleet's
        assert sent["rules"] == whole_sent["rules"] * len(mine) // len(DEPLOYMENTS)
        assert sent["sick"] < whole_sent["sick"]
        assert source.deployments_read == len(mine)
        seen.append(aggregated)
    assert set().union(*seen) == set(DEPLOYMENTS)
    assert sum(map(len, seen)) == len(DEPLOYMENTS)  # none read twice


async def test_a_shard_taken_over_widens_the_next_ticks_queries(fleet: tuple[FakeFleet, str]) -> None:
    f, url = fleet
    shards = _holding(0)
    source = PromQLSource(url, mode="aggregates", reader="thread", clock=VirtualClock(NOW))
    collect = OwnedCollect(source, shards)
    try:
        before, _, _ = await _tick(f, collect)
        shards.owned = frozenset({0, 2})  # the holder of shard 2 died; its Lease is ours
        after, _, _ = await _tick(f, collect)
        asked = [q for kind, q, _ in f.log if kind in NARROWED]
        shards.owned = frozenset({2})  # shard 0 handed over to a newcomer
        handed, _, _ = await _tick(f, collect)
    finally:
        await source.aclose()
    assert before == _of(0)
    assert after == _of(0, 2)
    assert all(_asked(q) == _of(0, 2) for q in asked)
    assert handed == _of(2)


async def test_an_instance_holding_no_shard_asks_for_no_deployment(fleet: tuple[FakeFleet, str]) -> None:
    f, url = fleet
    source = PromQLSource(url, mode="aggregates", reader="thread", clock=VirtualClock(NOW))
    try:
        aggregated, replicas, sent = await _tick(f, OwnedCollect(source, _holding()))
    finally:
        await source.aclose()
    assert aggregated == set()
    assert replicas == set()
    assert set(sent) == {"deployments", "gpus", "amd_gpus", "vanished"}


async def test_many_deployments_are_asked_in_several_bounded_queries(fleet: tuple[FakeFleet, str]) -> None:
    f, url = fleet
    source = PromQLSource(url, mode="aggregates", reader="thread", clock=VirtualClock(NOW))
    source.max_matcher_bytes = 24  # ~3 names a query
    try:
        aggregated, _, _ = await _tick(f, OwnedCollect(source, _holding(0, 1)))
        rules = [q for kind, q, _ in f.log if kind == "rules"]
    finally:
        await source.aclose()
    assert aggregated == _of(0, 1)
    assert len(rules) > 3
    assert all(len(_asked(q)) <= 3 for q in rules)
    assert set().union(*map(_asked, rules)) == _of(0, 1)


async def test_replicas_mode_narrows_the_raw_series_and_still_reads_every_gpu(
    small_fleet: tuple[FakeFleet, str],
) -> None:
    f, url = small_fleet

    def gpus(result: CollectResult) -> set[str]:
        return {r.target.url for r in result.results if r.target.kind == "gpu"}

    whole_source = PromQLSource(url, mode="replicas", reader="thread", clock=VirtualClock(NOW))
    try:
        f.log.clear()
        whole = await whole_source.collect_once()
        whole_sent = sum(n for kind, _, n in f.log if kind == "raw")
    finally:
        await whole_source.aclose()
    up = {s.deployment_key for s in whole.replicas}
    assert up == set(DEPLOYMENTS) - {"prod/llm-13"}
    assert gpus(whole)
    replicas: list[set[str]] = []
    gpus_kept: set[str] = set()
    for shard in range(SHARDS):
        source = PromQLSource(url, mode="replicas", reader="thread", clock=VirtualClock(NOW))
        try:
            f.log.clear()
            result = await OwnedCollect(source, _holding(shard)).collect_once([])
            raw = [(q, n) for kind, q, n in f.log if kind == "raw"]
        finally:
            await source.aclose()
        replicas.append({s.deployment_key for s in result.replicas})
        gpus_kept |= gpus(result)
        # one query for our deployments, one for what carries no deployment label (GPUs): far less than the fleet
        ((narrowed, ours),) = [(q, n) for q, n in raw if 'deployment=~"' in q]
        ((_, unlabelled),) = [(q, n) for q, n in raw if 'deployment=""' in q]
        assert _asked(narrowed) == _of(shard)
        assert ours <= whole_sent * len(_of(shard)) / len(DEPLOYMENTS)
        assert unlabelled < whole_sent / 5
        assert replicas[-1] == _of(shard) & up
    assert sum(map(len, replicas)) == len(up)
    assert gpus_kept == gpus(whole)  # every GPU read by some instance


# (namespace, deployment) pairs -> what the matchers must select and leave out
MATCHER_CASES = [
    # a name that prefixes another: anchored, llm-1 does not select llm-10
    ([("prod", "llm-1")], [("prod", "llm-1")], [("prod", "llm-10"), ("prod", "xllm-1"), ("dev", "llm-1")]),
    # regex characters in a name are literals ('.' is not "any")
    ([("prod", "a.b")], [("prod", "a.b")], [("prod", "axb")]),
    # two namespaces: each pair selected (the cross product may be too: the caller cuts exactly)
    ([("a", "x"), ("b", "y")], [("a", "x"), ("b", "y")], [("c", "x")]),
    # a target without a namespace label
    ([("", "x")], [("", "x")], [("prod", "x")]),
]


@pytest.mark.parametrize(("pairs", "selected", "left_out"), MATCHER_CASES)
def test_deployment_matchers_select_exactly_as_prometheus_reads_them(
    pairs: list[tuple[str, str]], selected: list[tuple[str, str]], left_out: list[tuple[str, str]]
) -> None:
    (matcher,) = ex.deployment_matchers(pairs)
    matchers = _label_matchers("{" + matcher + "}")

    def labels(ns: str, name: str) -> dict[str, str]:
        return {"deployment": name, **({"namespace": ns} if ns else {})}

    assert all(_matches(labels(*p), matchers) for p in selected)
    assert not any(_matches(labels(*p), matchers) for p in left_out)


def test_deployment_matchers_are_split_under_the_byte_bound_and_cover_every_deployment() -> None:
    pairs = [("prod", f"model-{i:04d}") for i in range(2000)]
    chunks = ex.deployment_matchers(pairs, max_bytes=1024)
    names = [json.loads(re.search(r'deployment=~("(?:[^"\\]|\\.)*")', c).group(1)).split("|") for c in chunks]  # type: ignore[union-attr]
    assert all(len("|".join(n)) <= 1024 for n in names)
    assert sorted(n.replace("\\", "") for chunk in names for n in chunk) == sorted(name for _, name in pairs)
    assert ex.deployment_matchers([]) == []


def test_no_two_matchers_select_the_same_series_when_names_repeat_across_namespaces() -> None:
    # split by namespace, (a, y) + (b, a0) would select (b, y) too, and (b, y)'s own matcher again: read twice.
    # Each name keeps all its namespaces in one matcher, so what one selects beyond its pairs is no other's pair.
    pairs = [("a", "y"), ("b", "a0"), ("b", "y"), ("c", "z")]
    for max_bytes in (2, 6, 1024):
        matchers = [_label_matchers("{" + m + "}") for m in ex.deployment_matchers(pairs, max_bytes=max_bytes)]

        def times_selected(ns: str, name: str, matchers: list[Matchers] = matchers) -> int:
            return sum(_matches({"namespace": ns, "deployment": name}, m) for m in matchers)

        assert [times_selected(*p) for p in pairs] == [1, 1, 1, 1]
        assert all(times_selected(ns, name) <= 1 for ns in "abcd" for name in ("y", "a0", "z"))


# label matchers the loopback server honours, as Prometheus does: (matcher, labels, selected?)
PROMETHEUS_MATCHERS = [
    ('deployment="a"', {"deployment": "a"}, True),
    ('deployment="a"', {"deployment": "ab"}, False),
    ('deployment!="a"', {}, True),  # a missing label is ""
    ('deployment!=""', {}, False),
    ('deployment=~"a|b"', {"deployment": "b"}, True),
    ('deployment=~"a|b"', {"deployment": "ab"}, False),  # anchored at both ends
    ('deployment!~"a.*"', {"deployment": "abc"}, False),
    ('deployment!~"a.*"', {"deployment": "ba"}, True),
    ('deployment=~"a\\\\.b"', {"deployment": "a.b"}, True),  # PromQL string escapes, then RE2's
    ('deployment=~"a\\\\.b"', {"deployment": "axb"}, False),
]


@pytest.mark.parametrize(("matcher", "labels", "selected"), PROMETHEUS_MATCHERS)
def test_the_loopback_prometheus_selects_by_label_as_prometheus_does(
    matcher: str, labels: dict[str, str], selected: bool
) -> None:
    assert _matches(labels, _label_matchers("up{" + matcher + "}")) is selected


async def test_a_shard_handed_over_leaves_fleetstate_and_is_decided_no_more(
    fleet: tuple[FakeFleet, str], tmp_path: Path
) -> None:
    # the loop's discovery is the narrowed source's last round: a replica read in the only tick its shard was held
    # never was a target, so it cannot "depart"; the loop drops the replicas of deployments it no longer owns
    _, url = fleet
    clock = VirtualClock(NOW)
    source = PromQLSource(url, mode="aggregates", reader="thread", clock=clock)
    shards = _holding(0, 1)
    service, _ = build_service(
        settings_for(f"sqlite:///{tmp_path / 'kv.db'}"),
        Sources(discovery=source, static=StaticTargets(), collector=source),
        clock=clock,
        leadership=shards,
    )
    try:
        await service.loop.tick()
        assert set(service.loop.state.deployments()) == _of(0, 1)
        shards.owned = frozenset({1})  # shard 0 handed over to an instance that joined
        clock.advance(5.0)
        await service.loop.tick()
    finally:
        await source.aclose()
    assert set(service.loop.state.deployments()) == _of(1)
    board = service.loop.board
    assert isinstance(board, DecisionBoard)
    assert set(board.deployments()) <= _of(1)


async def test_a_gpu_the_selection_drops_has_not_vanished_sharded_or_not(fleet: tuple[FakeFleet, str]) -> None:
    # aggregates mode reads only the GPUs a selection names (a DCGM fault; an AMD GPU serving a stuck replica): one
    # it no longer names is healthy again, not fallen off the bus. Before, the other GPUs of a node still selected
    # counted that node's exporter as answered, and the dropped GPU turned "vanished" (critical, drain the node).
    from collector.state import FleetState

    _, url = fleet
    source = PromQLSource(url, mode="aggregates", reader="thread", clock=VirtualClock(NOW))
    try:
        for collect in (source, OwnedCollect(source, _holding(0, 1, 2))):
            result = await collect.collect_once([])
            assert result.gpus
            assert result.gpu_nodes_scraped == frozenset()
            state = FleetState()
            first, *rest = result.gpus
            state.observe([], result.gpus, now=NOW, gpu_nodes_scraped=result.gpu_nodes_scraped)
            # the next tick's selection without the first GPU (its node's exporter still up in Prometheus)
            state.observe([], rest, now=NOW + 5, gpu_nodes_scraped=result.gpu_nodes_scraped)
            assert [g.present for g in state.gpus() if g.sample.key == first.key] == [True]
    finally:
        await source.aclose()
