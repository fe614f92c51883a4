"""Sharded instances on one store: which live findings each may close (``ControlLoop._closes``). A finding names a
deployment, else a node, else a GPU whose node is unknown, else nothing; each is one instance's to close. Before,
one with neither deployment nor node was closed by every instance that read anything without a node, so one
instance closed what another had open, and that one opened it again the next tick as a new episode, its
acknowledgement gone (as 19dcc84 found for other shards' deployments). A node's findings were closed by every
instance that listed the node (its GPUs, or only its replicas there), and by none once it left the fleet."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from collector.samples import GpuSample, ReplicaSample, TargetInfo
from collector.scrape import CollectResult, ScrapeResult
from collector.state import FleetState
from detectors import stuck_gpu, target_down
from detectors.finding import Finding, Severity, Subject
from detectors.thresholds import DEFAULT
from kvpilot.runtime.loop import ControlLoop
from kvpilot.runtime.shards import Held, OwnedCollect, owned_targets, shard_of
from store import repo
from store.db import make_engine, session_factory, transaction
from store.repo.findings import Reporter
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


def _gpu(node: str, uuid: str, mig: str | None = None) -> Any:
    index = "0" if mig is None else f"0/{mig}"
    return SimpleNamespace(sample=SimpleNamespace(node=node, uuid=uuid, index=index, mig_instance=mig))


def _replica(node: str) -> Any:
    return SimpleNamespace(sample=SimpleNamespace(node=node))


def _closes(held: Held, gpus: list[Any], replicas: list[Any]) -> Any:
    state = SimpleNamespace(gpus=lambda: gpus, replicas=lambda: replicas, stale_after_s=30.0)
    return ControlLoop._closes(SimpleNamespace(state=state), held.owns)  # type: ignore[arg-type]


def _node_shard(node: str) -> int:
    return shard_of(f"node/{node}", SHARDS)


def test_a_finding_without_deployment_or_node_is_one_instances_to_close() -> None:
    # Both instances read replicas and GPUs without a node (dcgm-exporter without NODE_NAME): a reads GPU-a, b GPU-b.
    a = _closes(Held(SHARDS, frozenset({NOBODY})), [_gpu("", "GPU-a")], [_replica("")])
    b = _closes(Held(SHARDS, frozenset(set(range(SHARDS)) - {NOBODY})), [_gpu("", "GPU-b")], [_replica("")])
    # a finding with no subject at all (a node-less GPU exporter down, stored before its page was named): the
    # holder of the empty name's shard alone
    assert (a("", "", "", "", 0.0), b("", "", "", "", 0.0)) == (True, False)
    # a GPU whose node is unknown: the instance that reads that GPU alone, at once
    assert (a("", "", "", "GPU-a", 0.0), b("", "", "", "GPU-a", 0.0)) == (True, False)
    assert (a("", "", "", "GPU-b", 0.0), b("", "", "", "GPU-b", 0.0)) == (False, True)
    assert (a("", "", "", "GPU-c", 0.0), b("", "", "", "GPU-c", 0.0)) == (False, False)  # read by neither, reported
    # read by neither and reported by nobody for stale_after_s (its page is gone): the empty name's holder
    assert (a("", "", "", "GPU-c", 30.0), b("", "", "", "GPU-c", 30.0)) == (True, False)


def test_a_mig_gpu_without_a_node_is_its_readers_to_close_both_its_own_and_its_instances_findings() -> None:
    # stuck_gpu names a MIG GPU's XID by its UUID and an instance's hang by <UUID>/mig<instance>: the instance that
    # reads the instance closes both at once (before, only the UUID was known as read, and an instance's finding
    # waited stale_after_s for the empty name's holder).
    a = _closes(Held(SHARDS, frozenset(set(range(SHARDS)) - {NOBODY})), [_gpu("", "GPU-m", "3")], [_replica("")])
    assert (a("", "", "", "GPU-m", 0.0), a("", "", "", "GPU-m/mig3", 0.0), a("", "", "", "GPU-m/mig5", 0.0)) == (
        True,
        True,
        False,
    )


def test_deployments_by_their_shard_and_nodes_by_theirs_once_nobody_reports_them() -> None:
    held = Held(SHARDS, frozenset({0}))
    mine = next(f"ns/d{i}" for i in range(100) if shard_of(f"ns/d{i}", SHARDS) == 0)
    theirs = next(f"ns/d{i}" for i in range(100) if shard_of(f"ns/d{i}", SHARDS) != 0)
    closes = _closes(held, [_gpu("n1", "GPU-1")], [_replica("n2"), _replica("")])
    assert (closes(mine, "", "", "", 0.0), closes(theirs, "", "n1", "GPU-1", 99.0)) == (True, False)
    [my_node, their_node] = (next(f"n{i}" for i in range(100) if _node_shard(f"n{i}") in s) for s in ({0}, {1, 2}))
    # a node's, whoever reads it: the holder of node/<node>, once no instance has reported it for stale_after_s (30)
    assert [closes("", "", my_node, gpu, quiet) for gpu in ("GPU-1", "") for quiet in (0.0, 29.9, 30.0)] == [
        *(False, False, True),
        *(False, False, True),
    ]
    assert (closes("", "", their_node, "GPU-1", 30.0), closes("", "", their_node, "", 1e9)) == (False, False)


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


# -- a node's findings: reported by whoever reads the node, closed by the holder of node/<node> --------------------


class Instance:
    """One sharded kvpilot as far as its findings go: the shards it holds, its own FleetState, the real detectors of
    GPUs and targets, and its ``ControlLoop._closes`` on the shared store (each call it makes to close is noted)."""

    def __init__(self, name: str, owned: set[int]) -> None:
        self.name = name
        self.held = Held(SHARDS, frozenset(owned))
        self.state = FleetState(stale_after_s=30)

    def observe(self, t: float, *results: ScrapeResult) -> None:
        result = CollectResult(timestamp=t, results=results)
        self.state.observe(
            result.replicas,
            result.gpus,
            now=t,
            down_targets=result.down_targets,
            gpu_nodes_scraped=result.gpu_nodes_scraped,
        )

    def tick(self, factory: sessionmaker[Session], t: float, closed: list[tuple[str, str]]) -> None:
        """Its detectors' findings written, what is its to close closed (``closed``: (instance, the row's deployment,
        else its node) per close)."""
        found = stuck_gpu.detect(self.state, thresholds=DEFAULT, now=t) + _down(self.state, t)
        mine = ControlLoop._closes(SimpleNamespace(state=self.state), self.held.owns)  # type: ignore[arg-type]

        def closes(*row: Any) -> bool:
            if mine(*row):
                closed.append((self.name, row[0] or row[2]))
                return True
            return False

        with transaction(factory) as s:
            repo.upsert_findings(session=s, active=found, now=t, closes=closes, reporter=Reporter(self.name, 30.0))


def _pick(prefix: str, shard: int, key: Callable[[str], str] = lambda n: n) -> str:
    return next(f"{prefix}{i}" for i in range(1000) if shard_of(key(f"{prefix}{i}"), SHARDS) == shard)


def _engine(target: TargetInfo, t: float, *, running: float = 0.0, tokens: float = 0.0) -> ScrapeResult:
    """A replica of ``target``'s with ``running`` requests, its progress counters at ``tokens``."""
    pod = (target.namespace, target.deployment, target.pod, target.node)
    sample = ReplicaSample(*pod, "vllm", "m", t, requests_waiting=0.0, requests_running=running)
    sample = replace(sample, generation_tokens=tokens, prompt_tokens=tokens, requests_finished=tokens)
    return ScrapeResult(target, ok=True, timestamp=t, duration_s=0.0, replicas=(sample,))


def _gpu_page(target: TargetInfo, t: float, gpu: GpuSample) -> ScrapeResult:
    return ScrapeResult(target, ok=True, timestamp=t, duration_s=0.0, gpus=(replace(gpu, timestamp=t),))


def _live(factory: sessionmaker[Session], node: str) -> list[tuple[str, str, float, str | None]]:
    with transaction(factory) as s:
        rows = [r for state in ("open", "acknowledged") for r in repo.list_findings(session=s, state=state).items]
        return sorted((r.kind, r.state, r.since, r.acknowledged_by) for r in rows if r.node == node)


def test_a_gpu_finding_is_not_closed_by_an_instance_with_replicas_on_its_node_that_keeps_no_page(
    factory: sessionmaker[Session],
) -> None:
    # A dcgm-exporter listed with no node (a static target) whose GPUs name their node (NODE_NAME, the Hostname
    # label): a keeps it (its URL's shard). b holds every other shard, node/<node>'s too, and runs a replica there.
    a, b = Instance("a", {_keeper(PAGE)}), Instance("b", set(range(SHARDS)) - {_keeper(PAGE)})
    node = _pick("static-", next(iter(b.held.owned)), lambda n: f"node/{n}")
    deployment = _pick("d", next(iter(b.held.owned)), lambda d: f"llm/{d}")
    engine = TargetInfo(
        url="http://10.0.1.1:8000/metrics", namespace="llm", deployment=deployment, pod="r-0", node=node
    )
    assert (owned_targets([PAGE, engine], a.held), owned_targets([PAGE, engine], b.held)) == ([PAGE], [engine])
    sick = GpuSample(node=node, index="0", uuid="GPU-7", model_name="H100", timestamp=0.0, last_xid=79)
    closed: list[tuple[str, str]] = []
    for t in range(0, 20, 5):
        a.observe(t, _gpu_page(PAGE, t, sick))
        b.observe(t, _engine(engine, t))
        a.tick(factory, t, closed)
        b.tick(factory, t, closed)
    with transaction(factory) as s:
        [row] = repo.list_findings(session=s, node=node).items
        repo.acknowledge_finding(session=s, finding_id=row.id, by="ops", note="on it", now=16.0)
    for t in range(20, 100, 5):  # before, b closed it each tick (it listed the node for its replica) and a reopened it
        a.observe(t, _gpu_page(PAGE, t, sick))
        b.observe(t, _engine(engine, t))
        b.tick(factory, t, closed)
        a.tick(factory, t, closed)
    assert _live(factory, node) == [("stuck_gpu", "acknowledged", 0.0, "ops")]
    assert closed == []
    healed = replace(sick, last_xid=0)  # the GPU is reset: a reports it no more; b, node/<node>'s holder, closes it
    for t in range(100, 140, 5):
        a.observe(t, _gpu_page(PAGE, t, healed))
        b.observe(t, _engine(engine, t))
        a.tick(factory, t, closed)
        b.tick(factory, t, closed)
        assert len(_live(factory, node)) == (1 if t < 95 + 30 else 0), t
    assert closed == [("b", node)]


def test_a_node_that_leaves_the_fleet_has_its_findings_closed_by_one_instance(
    factory: sessionmaker[Session],
) -> None:
    # Three instances, one shard each. A node found by Kubernetes (its dcgm-exporter pod on it) runs a replica of a's;
    # c holds node/<node>. The node is drained and deleted at 60 s: its pods leave discovery, nobody reads it again.
    a, b, c = (Instance(name, {i}) for i, name in enumerate("abc"))
    node = _pick("gpu-node-", 2, lambda n: f"node/{n}")
    deployment = _pick("d", 0, lambda d: f"llm/{d}")
    engine = TargetInfo(
        url="http://10.0.2.1:8000/metrics", namespace="llm", deployment=deployment, pod="r-0", node=node
    )
    page = TargetInfo(url="http://10.0.2.9:9400/metrics", kind="gpu", namespace="gpu-operator", pod="dcgm-1", node=node)
    assert [owned_targets([engine, page], i.held) for i in (a, b, c)] == [[engine, page], [], []]
    sick = GpuSample(node=node, index="0", uuid="GPU-9", model_name="H100", timestamp=0.0, last_xid=48)
    closed: list[tuple[str, str]] = []
    for t in range(0, 600, 5):
        if t < 60:
            a.observe(t, _engine(engine, t), _gpu_page(page, t, sick))
        else:
            a.observe(t)
        for i in (a, b, c):
            i.tick(factory, t, closed)
        if t == 55:
            assert [k for k, *_ in _live(factory, node)] == ["stuck_gpu"]
    # a reported its GPU, then its exporter down, until its FleetState forgot the node; then c closed them, alone
    assert _live(factory, node) == []
    assert {who for who, n in closed if n == node} == {"c"}
    with transaction(factory) as s:
        kinds = {r.kind for r in repo.list_findings(session=s, node=node, state="closed").items}
    assert kinds == {"stuck_gpu", "target_down"}


def test_unsharded_a_node_that_leaves_has_its_findings_closed_at_once(factory: sessionmaker[Session]) -> None:
    state = FleetState(stale_after_s=30)
    page = TargetInfo(url="http://10.0.3.9:9400/metrics", kind="gpu", node="n-gone")
    sick = GpuSample(node="n-gone", index="0", uuid="GPU-3", model_name="H100", timestamp=0.0, last_xid=48)
    for t in range(0, 400, 5):
        results = (_gpu_page(page, t, sick),) if t < 30 else ()
        result = CollectResult(timestamp=t, results=results)
        state.observe(result.replicas, result.gpus, now=t, gpu_nodes_scraped=result.gpu_nodes_scraped)
        found = stuck_gpu.detect(state, thresholds=DEFAULT, now=t) + _down(state, t)
        with transaction(factory) as s:
            repo.upsert_findings(session=s, active=found, now=t)  # no closes: every live row missing closes
        if not found:
            break
    with transaction(factory) as s:
        rows = repo.list_findings(session=s, node="n-gone").items
    # closed the tick the node's GPUs were forgotten, as before sharding had a say
    assert {(r.kind, r.state, r.closed_at) for r in rows} == {("stuck_gpu", "closed", t), ("target_down", "closed", t)}


class Prometheus:
    """A PromQL source narrowed to a shard's deployments (``collect_owned``), whose GPU series carry no deployment and
    come whole to every instance, as ``PromQLSource``'s do."""

    def __init__(self) -> None:
        self.results: tuple[ScrapeResult, ...] = ()

    async def collect_owned(self, owns: Callable[[str], bool], targets: Sequence[TargetInfo] = ()) -> CollectResult:
        mine = [r for r in self.results if r.target.kind == "gpu" or owns(r.target.deployment_key)]
        return CollectResult(timestamp=self.results[0].timestamp, results=tuple(mine))


class PromqlFleet:
    """Three instances, one shard each, reading one narrowed PromQL source: a's replica runs on GPU-4 of a node whose
    shard c holds. Both keep that GPU (a for its replica, c as node/<node>'s holder, which no replica of its own
    places there); only a sees the replica, so only a can see it hang."""

    def __init__(self, **gpu: Any) -> None:
        self.a, self.b, self.c = (Instance(name, {i}) for i, name in enumerate("abc"))
        self.node = node = _pick("pq-node-", 2, lambda n: f"node/{n}")
        deployment = _pick("d", 0, lambda d: f"llm/{d}")
        self.engine = TargetInfo(
            url="promql://vllm/10.0.4.1:8000", namespace="llm", deployment=deployment, pod="r-0", node=node
        )
        self.page = TargetInfo(
            url="promql://dcgm/10.0.4.9:9400", kind="gpu", namespace="gpu-operator", pod="dcgm-4", node=node
        )
        busy = GpuSample(node=node, index="0", uuid="GPU-4", model_name="H100", timestamp=0.0, utilisation=0.99)
        self.gpu = replace(busy, pod="r-0", namespace="llm", **gpu)
        self.source = Prometheus()
        self.collects = {
            i.name: OwnedCollect(self.source, SimpleNamespace(held=lambda i=i: i.held))  # type: ignore[arg-type]
            for i in (self.a, self.b, self.c)
        }

    def read(self, t: float, tokens: float, alive: Sequence[Instance]) -> None:
        """Prometheus at ``t``: the replica runs 4 requests, its counters at ``tokens``; ``alive`` read it."""
        self.source.results = (_engine(self.engine, t, running=4.0, tokens=tokens), _gpu_page(self.page, t, self.gpu))
        for i in alive:
            i.observe(t, *asyncio.run(self.collects[i.name].collect_once([])).results)


def test_promql_a_gpu_read_by_two_instances_stays_open_while_either_reports_it(factory: sessionmaker[Session]) -> None:
    # PromQL, narrowed per shard: a's replica hangs on a GPU both a and c read; only a sees the hang.
    fleet = PromqlFleet()
    a, b, c, node = fleet.a, fleet.b, fleet.c, fleet.node
    closed: list[tuple[str, str]] = []
    tokens = 100.0
    for t in range(0, 120, 5):
        tokens += 50.0 if t >= 60 else 0.0  # stuck until 60 s: requests running, no token made
        fleet.read(t, tokens, (a, b, c))
        if t == 5:
            assert [len(i.state.gpus()) for i in (a, b, c)] == [1, 0, 1]
        for i in (a, c) if t % 10 else (c, a):
            i.tick(factory, t, closed)
        b.tick(factory, t, closed)
        if t == 10:
            with transaction(factory) as s:
                [row] = repo.list_findings(session=s, node=node).items
                repo.acknowledge_finding(session=s, finding_id=row.id, by="ops", note="on it", now=11.0)
        # before, c closed a's hang each tick (it reads the GPU, sees no hang) and a reopened it; a reports it last
        # at 55 s, and c, node/<node>'s holder, closes it stale_after_s later
        live = [("stuck_gpu", "acknowledged", 5.0, "ops")] if 10 <= t < 55 + 30 else [] if t >= 85 else None
        assert live is None or _live(factory, node) == live, t
    assert (_live(factory, node), closed) == ([], [("c", node)])


def test_two_instances_that_see_one_gpu_differently_show_the_most_severe_view_not_each_in_turn(
    factory: sessionmaker[Session],
) -> None:
    # PromQL, narrowed per shard, as above: a and c read the GPU of a's replica, which logs XID 119 (GSP). a sees its
    # replica hang on it: the XID with the GPU wedged, critical, drain. c sees the XID alone: isolated, warning,
    # reset. Before, each wrote its view over the other's: the row's severity, action and summary changed with every
    # write, the same episode flapping critical/warning for the operator.
    fleet = PromqlFleet(last_xid=119)
    a, b, c, node = fleet.a, fleet.b, fleet.c, fleet.node
    closed: list[tuple[str, str]] = []
    shown: list[tuple[int, str, str, str, str]] = []  # (t, instance that wrote, severity, action, whose view)
    tokens = 100.0
    for t in range(0, 150, 5):
        tokens += 50.0 if t >= 60 else 0.0  # hung until 60 s; a dies at 90 s (c's view is shown from 85 + 30 s)
        alive = (a, b, c) if t < 90 else (b, c)
        fleet.read(t, tokens, alive)
        for i in (a, c) if t % 10 else (c, a):
            if i in alive:
                i.tick(factory, t, closed)
                with transaction(factory) as s:
                    [row] = repo.list_findings(session=s, node=node).items
                    shown.append((t, i.name, row.severity, row.action, str(row.evidence.get("reported_by"))))
        b.tick(factory, t, closed)
        if t == 10:
            with transaction(factory) as s:
                repo.acknowledge_finding(session=s, finding_id=row.id, by="ops", note="on it", now=11.0)
    # at 0 s both see the XID alone (a has no progress reading yet): c wrote first, a's view as severe leaves it
    assert shown[:2] == [(0, "c", "warning", "reset_gpu", "c"), (0, "a", "warning", "reset_gpu", "c")]
    # a's replica makes progress from 60 s: c writes first that tick (a's view of 55 s stands), then a
    lowered = [t for t, *_ in shown].index(60) + 1
    hung = {tuple(view) for _, _, *view in shown[2:lowered]}
    recovered = {tuple(view) for t, _, *view in shown[lowered:] if t < 115}
    alone = {tuple(view) for t, _, *view in shown[lowered:] if t >= 115}
    # while a sees the hang: a's critical drain, whoever wrote last; once a's replica makes progress a's own view is
    # the XID alone (lowered at once, its own); once a is gone for stale_after_s, c's
    assert (hung, recovered, alone) == (
        {("critical", "drain_node", "a")},
        {("warning", "reset_gpu", "a")},
        {("warning", "reset_gpu", "c")},
    )
    # one episode throughout, acknowledged, closed by nobody (c still reports it)
    assert (_live(factory, node), closed) == ([("stuck_gpu", "acknowledged", 0.0, "ops")], [])


def test_a_new_episode_shows_the_view_of_whoever_reports_it_not_the_last_episodes(
    factory: sessionmaker[Session],
) -> None:
    # a reported a GPU critical, then the finding closed; 2 s later c reports it again, a warning: a new episode, c's
    # view, though a's critical of the last episode is younger than stale_after_s
    hung = Finding("stuck_gpu", Severity.CRITICAL, Subject(node="n-1", gpu="GPU-1"), 0.0, "hang", action="drain_node")
    xid = replace(hung, severity=Severity.WARNING, since=2.0, summary="XID 119 (GSP), isolated", action="reset_gpu")
    steps = [(0.0, [hung], "a"), (1.0, [], "c"), (2.0, [xid], "c")]
    for t, found, who in steps:
        with transaction(factory) as s:
            repo.upsert_findings(session=s, active=found, now=t, closes=lambda *_: True, reporter=Reporter(who, 30.0))
    with transaction(factory) as s:
        row = repo.get_finding(session=s, finding_id=hung.id)
        assert (row.state, row.since, row.severity, row.action, row.evidence["reported_by"]) == (
            "open",
            2.0,
            "warning",
            "reset_gpu",
            "c",
        )
