"""Sharded instances on one store: which live findings each may close (``ControlLoop._closes``). A finding names a
deployment, else a node, else a GPU whose node is unknown, else nothing; each is one instance's to close. Before,
one with neither deployment nor node was closed by every instance that read anything without a node, so one
instance closed what another had open, and that one opened it again the next tick as a new episode, its
acknowledgement gone (as 19dcc84 found for other shards' deployments)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from collector.samples import GpuSample, TargetInfo
from collector.scrape import CollectResult, ScrapeResult
from collector.state import FleetState
from detectors import target_down
from detectors.finding import Finding
from detectors.thresholds import DEFAULT
from kvpilot.runtime.loop import ControlLoop
from kvpilot.runtime.shards import Held, owned_targets, shard_of
from store import repo
from store.db import make_engine, session_factory, transaction
from tests.helpers.sqlite_store import migrated

SHARDS = 3
NOBODY = shard_of("", SHARDS)  # the shard whose holder closes a finding with no subject at all


def _keeper(page: TargetInfo) -> int:
    """The shard whose holder scrapes ``page`` (``owned_targets``: a GPU page on no node goes by its URL)."""
    return next(i for i in range(SHARDS) if owned_targets([page], Held(SHARDS, frozenset({i}))))


# a dcgm-exporter without NODE_NAME, kept by another instance than the holder of the empty name's shard
PAGE = next(
    page
    for page in (TargetInfo(url=f"http://10.0.0.{i}:9400/metrics", kind="gpu") for i in range(1, 100))
    if _keeper(page) != NOBODY
)


@pytest.fixture
def factory(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    """A store at head, this test's own (a SQLite file the instances share)."""
    engine = make_engine(migrated(tmp_path / "kvpilot.db"))
    yield session_factory(engine)
    engine.dispose()


def _gpu(node: str, uuid: str) -> Any:
    return SimpleNamespace(sample=SimpleNamespace(node=node, uuid=uuid, index="0"))


def _replica(node: str) -> Any:
    return SimpleNamespace(sample=SimpleNamespace(node=node))


def _closes(held: Held, gpus: list[Any], replicas: list[Any]) -> Any:
    state = SimpleNamespace(gpus=lambda: gpus, replicas=lambda: replicas)
    return ControlLoop._closes(SimpleNamespace(state=state), held.owns)  # type: ignore[arg-type]


def test_a_finding_without_deployment_or_node_is_one_instances_to_close() -> None:
    # Both instances read replicas and GPUs without a node (dcgm-exporter without NODE_NAME): a reads GPU-a, b GPU-b.
    a = _closes(Held(SHARDS, frozenset({NOBODY})), [_gpu("", "GPU-a")], [_replica("")])
    b = _closes(Held(SHARDS, frozenset(set(range(SHARDS)) - {NOBODY})), [_gpu("", "GPU-b")], [_replica("")])
    # a finding with no subject at all (a node-less GPU exporter down, stored before its page was named): the
    # holder of the empty name's shard alone
    assert (a("", "", "", ""), b("", "", "", "")) == (True, False)
    # a GPU whose node is unknown: the instance that reads that GPU alone
    assert (a("", "", "", "GPU-a"), b("", "", "", "GPU-a")) == (True, False)
    assert (a("", "", "", "GPU-b"), b("", "", "", "GPU-b")) == (False, True)
    assert (a("", "", "", "GPU-c"), b("", "", "", "GPU-c")) == (False, False)  # read by neither: not theirs


def test_deployments_and_nodes_are_closed_where_they_are_read() -> None:
    held = Held(SHARDS, frozenset({0}))
    mine = next(f"ns/d{i}" for i in range(100) if shard_of(f"ns/d{i}", SHARDS) == 0)
    theirs = next(f"ns/d{i}" for i in range(100) if shard_of(f"ns/d{i}", SHARDS) != 0)
    closes = _closes(held, [_gpu("n1", "GPU-1")], [_replica("n2"), _replica("")])
    assert (closes(mine, "", "", ""), closes(theirs, "", "n1", "GPU-1")) == (True, False)
    assert (closes("", "", "n1", "GPU-1"), closes("", "", "n2", ""), closes("", "", "n3", "")) == (True, True, False)


def _read(state: FleetState, t: float, *pages: tuple[TargetInfo, bool]) -> None:
    """One tick's scrape of node-less GPU pages (each answering with one GPU, or down), as the loop observes it."""
    results = tuple(
        ScrapeResult(page, ok=ok, timestamp=t, duration_s=0.0, gpus=(_sample(page, t),) if ok else ())
        for page, ok in pages
    )
    result = CollectResult(timestamp=t, results=results)
    state.observe(
        result.replicas,
        result.gpus,
        now=t,
        down_targets=result.down_targets,
        gpu_nodes_scraped=result.gpu_nodes_scraped,
    )


def _sample(page: TargetInfo, t: float) -> GpuSample:
    return GpuSample(node="", index="0", uuid=f"GPU-{page.url}", model_name="H100", timestamp=t, utilisation=0.5)


def _down(state: FleetState, now: float) -> list[Finding]:
    return target_down.detect(state, thresholds=DEFAULT, now=now)


def test_a_down_gpu_page_without_a_node_is_closed_by_the_instance_that_keeps_it(
    factory: sessionmaker[Session],
) -> None:
    # a keeps PAGE (its URL's shard); b holds every other shard, the empty name's too, and reads things without a node
    keeper = Held(SHARDS, frozenset({_keeper(PAGE)}))
    state = FleetState(stale_after_s=30)
    _read(state, 0.0, (PAGE, True))
    for t in range(5, 50, 5):
        _read(state, float(t), (PAGE, False))
    a = ControlLoop._closes(SimpleNamespace(state=state), keeper.owns)  # type: ignore[arg-type]
    b = _closes(Held(SHARDS, frozenset(set(range(SHARDS)) - keeper.owned)), [_gpu("", "GPU-b")], [_replica("")])
    [down] = _down(state, 45.0)
    # the finding names the page, and so does its alert (kvpilot_finding_active's replica label)
    assert (down.subject.replica, down.alert_labels()["replica"]) == (PAGE.url, PAGE.url)
    with transaction(factory) as s:
        repo.upsert_findings(session=s, active=[down], now=45.0, closes=a)
    with transaction(factory) as s:
        repo.acknowledge_finding(session=s, finding_id=down.id, by="ops", note="on it", now=46.0)
    for t in (47.0, 52.0):  # b's tick, then a's: before, b closed it and a opened it again as a new episode
        with transaction(factory) as s:
            repo.upsert_findings(session=s, active=[], now=t, closes=b)
        with transaction(factory) as s:
            repo.upsert_findings(session=s, active=_down(state, t), now=t, closes=a)
    with transaction(factory) as s:
        row = repo.get_finding(session=s, finding_id=down.id)
        assert (row.state, row.since, row.acknowledged_by) == ("acknowledged", 45.0, "ops")
    _read(state, 55.0, (PAGE, True))  # the exporter is back: a closes it
    with transaction(factory) as s:
        repo.upsert_findings(session=s, active=_down(state, 55.0), now=55.0, closes=a)
    with transaction(factory) as s:
        assert repo.get_finding(session=s, finding_id=down.id).state == "closed"


def test_one_instance_keeps_one_episode_per_down_gpu_page_without_a_node(factory: sessionmaker[Session]) -> None:
    # one instance, unsharded, two node-less exporters: PAGE goes down, then OTHER too, then PAGE comes back
    other = TargetInfo(url="http://10.0.0.200:9400/metrics", kind="gpu")
    state = FleetState(stale_after_s=30)

    def tick(t: float, page_ok: bool, other_ok: bool) -> list[Finding]:
        _read(state, t, (PAGE, page_ok), (other, other_ok))
        found = _down(state, t)
        with transaction(factory) as s:
            repo.upsert_findings(session=s, active=found, now=t)
        return found

    tick(0.0, True, True)
    for t in range(5, 50, 5):  # PAGE down while OTHER answers: its exporter down, not its GPU fallen off the bus
        found = tick(float(t), False, True)
    [down] = found
    assert (down.subject.replica, down.subject.node) == (PAGE.url, "")
    assert down.summary.startswith(f"GPU exporter at {PAGE.url} (node unknown) unavailable")
    with transaction(factory) as s:
        repo.acknowledge_finding(session=s, finding_id=down.id, by="ops", note="on it", now=46.0)
    for t in range(50, 100, 5):  # OTHER down too: a finding of its own, PAGE's episode unchanged
        found = tick(float(t), False, False)
    assert sorted(f.subject.replica for f in found) == sorted([PAGE.url, other.url])
    found = tick(100.0, True, False)  # PAGE is back: its finding closes, OTHER's stays open
    assert [f.subject.replica for f in found] == [other.url]
    with transaction(factory) as s:
        row = repo.get_finding(session=s, finding_id=down.id)
        assert (row.state, row.since, row.acknowledged_by) == ("closed", 35.0, "ops")
        assert [r.replica for r in repo.list_findings(session=s, state="open").items] == [other.url]
