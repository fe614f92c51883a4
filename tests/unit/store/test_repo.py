"""Repository functions against a SQLite store built by the real migrations."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session, sessionmaker

from detectors.finding import Finding, Severity, Subject
from scaler.decision import Decision
from store import repo
from store.db import transaction
from store.drain_states import DrainState
from store.errors import InvalidTransition, NotFound
from store.repo.deployments import SeenDeployment


def _decision(dep: str, t: float, desired: int) -> Decision:
    return Decision(
        dep,
        t,
        2,
        2,
        desired,
        1,
        "predictive",
        f"forecast says {desired}",
        predictive_replicas=desired,
        reactive_replicas=2,
        forecast={"arrival_rate": 3.5},
    )


def _finding(kind: str, node: str, since: float = 10.0, sev: Severity = Severity.CRITICAL) -> Finding:
    return Finding(kind, sev, Subject(node=node, gpu="0"), since, f"{kind} on {node}", {"xid": 79.0}, "drain_node")


def test_decisions_round_trip_and_latest_per_deployment(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as s:
        for t, dep, desired in [(1, "a/x", 3), (2, "a/x", 4), (1, "b/y", 1)]:
            repo.record_decision(session=s, decision=_decision(dep, t, desired))
    with transaction(factory) as s:
        latest = repo.latest_decisions(session=s)
        page = repo.list_decisions(session=s, deployment="a/x", limit=1)
    assert latest["a/x"] == _decision("a/x", 2, 4)  # every field survives the round trip
    assert latest["b/y"].desired_replicas == 1
    assert [d.timestamp for d in page.items] == [2]
    assert page.next_after is not None  # one more of a/x follows


def test_findings_open_refresh_close_and_reopen(factory: sessionmaker[Session]) -> None:
    f1, f2 = _finding("stuck_gpu", "n1"), _finding("stuck_gpu", "n2")
    with transaction(factory) as s:
        repo.upsert_findings(session=s, active=[f1, f2], now=20)
    with transaction(factory) as s:
        repo.acknowledge_finding(session=s, finding_id=f1.id, by="alice", note="on it", now=21)
        repo.upsert_findings(session=s, active=[f1], now=25)  # f2 cleared
    with transaction(factory) as s:
        assert repo.get_finding(session=s, finding_id=f1.id).state == "acknowledged"  # ack survives a refresh
        assert repo.get_finding(session=s, finding_id=f2.id).state == "closed"
        assert [f.id for f in repo.open_findings(session=s)] == [f1.id]
        repo.upsert_findings(session=s, active=[f1, f2], now=30)  # f2 recurs: new episode
        assert repo.get_finding(session=s, finding_id=f2.id).state == "open"
        repo.upsert_findings(session=s, active=[], now=40)
        assert repo.open_findings(session=s) == []
        assert repo.get_finding(session=s, finding_id=f1.id).acknowledged_by == "alice"  # the ack record stays


def test_a_tick_of_findings_reads_the_store_once(factory: sessionmaker[Session]) -> None:
    # the rows to refresh and the live rows to close come from one SELECT (the writer runs this every tick)
    from sqlalchemy import event

    f1, f2, f3 = (_finding("stuck_gpu", n) for n in ("n1", "n2", "n3"))
    with transaction(factory) as s:
        repo.upsert_findings(session=s, active=[f1, f2], now=20)
        repo.upsert_findings(session=s, active=[], now=21)  # both closed
        repo.upsert_findings(session=s, active=[f1, f3], now=22)  # f1 reopens, f3 opens
    selects: list[str] = []
    with transaction(factory) as s:
        engine = s.get_bind()
        listen = (engine, "before_cursor_execute")

        def count(conn: object, cursor: object, statement: str, *args: object) -> None:
            selects.extend([statement] if statement.lstrip().upper().startswith("SELECT") else [])

        event.listen(*listen, count)
        try:
            repo.upsert_findings(session=s, active=[f2, f3], now=30)  # f1 closes, f2 reopens, f3 refreshes
            s.flush()
        finally:
            event.remove(*listen, count)
        assert len(selects) == 1, selects
        states = {f.id: repo.get_finding(session=s, finding_id=f.id).state for f in (f1, f2, f3)}
    assert states == {f1.id: "closed", f2.id: "open", f3.id: "open"}


def test_acknowledge_errors(factory: sessionmaker[Session]) -> None:
    f = _finding("stuck_gpu", "n1")
    with transaction(factory) as s:
        repo.upsert_findings(session=s, active=[f], now=1)
        repo.upsert_findings(session=s, active=[], now=2)
    with transaction(factory) as s, pytest.raises(InvalidTransition):
        repo.acknowledge_finding(session=s, finding_id=f.id, by="a", note="", now=3)  # closed cannot be acked
    with transaction(factory) as s, pytest.raises(NotFound):
        repo.acknowledge_finding(session=s, finding_id="0" * 16, by="a", note="", now=3)


def test_list_findings_filters(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as s:
        repo.upsert_findings(
            session=s,
            active=[_finding("stuck_gpu", "n1"), _finding("kv_exhaustion", "n2", sev=Severity.WARNING)],
            now=1,
        )
        assert repo.list_findings(session=s, kind="kv_exhaustion").total == 1
        assert repo.list_findings(session=s, severity="critical", node="n1").total == 1
        assert repo.list_findings(session=s, state="closed").total == 0


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        # the happy path through to done
        ([DrainState.APPROVED, DrainState.EXECUTING, DrainState.DONE], True),
        # a request can be cancelled before approval
        ([DrainState.CANCELLED], True),
        # execution cannot start without approval
        ([DrainState.EXECUTING], False),
        # a finished drain is final
        ([DrainState.APPROVED, DrainState.EXECUTING, DrainState.FAILED, DrainState.APPROVED], False),
    ],
)
def test_drain_state_machine(factory: sessionmaker[Session], path: list[DrainState], ok: bool) -> None:
    with transaction(factory) as s:
        action = repo.request_drain(session=s, node="gpu-3", requested_by="op", now=1, dry_run=True, reason="xid 79")
        action_id = action.id
    try:
        for i, to in enumerate(path):
            with transaction(factory) as s:
                repo.transition_drain(session=s, action_id=action_id, to=to, actor="op", now=2 + i)
    except InvalidTransition:
        assert not ok
    else:
        assert ok
    with transaction(factory) as s:
        events = repo.list_drain_events(session=s, action_id=action_id)
    assert events[0].to_state == "requested"  # every transition, starting with the request, is audited
    assert len(events) == 1 + (len(path) if ok else len(path) - 1)


def test_drain_request_is_idempotent_per_node(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as s:
        a = repo.request_drain(session=s, node="n", requested_by="x", now=1, dry_run=True)
        b = repo.request_drain(session=s, node="n", requested_by="y", now=2, dry_run=True)
        assert a.id == b.id
        with pytest.raises(NotFound):
            repo.get_drain(session=s, action_id=999)


def test_rollups_fold_by_minute(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as s:
        for t, rate, kv in [(60, 1.0, 0.5), (70, 3.0, 0.9), (80, None, 0.7), (125, 10.0, 0.1)]:
            repo.record_rollup(session=s, deployment="a/x", t=t, signals={"arrival_rate": rate, "kv_usage_max": kv})
    with transaction(factory) as s:
        points = repo.load_rollups(session=s, deployment="a/x")
    assert [p.t for p in points] == [60.0, 120.0]
    assert points[0].values["arrival_rate"] == pytest.approx(2.0)  # mean of the known values, None skipped
    assert points[0].values["kv_usage_max"] == pytest.approx(0.9)  # the max, not the mean
    assert points[0].samples == 3
    with transaction(factory) as s, pytest.raises(ValueError, match="unknown roll-up signals"):
        repo.record_rollup(session=s, deployment="a/x", t=1, signals={"bogus": 1.0})


def test_retention_keeps_live_state(factory: sessionmaker[Session]) -> None:
    old, live = _finding("stuck_gpu", "old"), _finding("stuck_gpu", "live")
    with transaction(factory) as s:
        repo.record_decision(session=s, decision=_decision("a/x", 10, 1))
        repo.record_decision(session=s, decision=_decision("a/x", 1000, 1))
        repo.upsert_findings(session=s, active=[old, live], now=10)
        repo.upsert_findings(session=s, active=[live], now=20)  # old closes at 20
        repo.record_rollup(session=s, deployment="a/x", t=0, signals={"arrival_rate": 1.0})
        repo.request_drain(session=s, node="n", requested_by="x", now=0, dry_run=True)  # still requested
    with transaction(factory) as s:
        counts = repo.prune(session=s, now=1000, horizon_s=500)
    assert counts == {"decisions": 1, "findings": 1, "rollups": 1, "drain_actions": 0}
    with transaction(factory) as s:
        assert [f.id for f in repo.open_findings(session=s)] == [live.id]
        assert repo.list_drains(session=s).total == 1


def test_deployments_and_capacity(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as s:
        repo.upsert_deployments(session=s, seen=[SeenDeployment("ns/a", "vllm", "llama")], now=1)
        repo.upsert_deployments(session=s, seen=[SeenDeployment("ns/a")], now=5)
        repo.upsert_capacity(
            session=s, deployment="ns/a", requests_per_s=4.0, tokens_per_s=None, source="observed", now=5
        )
    with transaction(factory) as s:
        (row,) = repo.list_deployments(session=s).items
        assert (row.name, row.engine, row.first_seen, row.last_seen) == ("a", "vllm", 1, 5)
        cap = repo.get_capacity(session=s, deployment="ns/a")
        assert cap is not None
        assert cap.requests_per_s == 4.0
        with pytest.raises(ValueError, match="capacity source"):
            repo.upsert_capacity(session=s, deployment="x/y", requests_per_s=1, tokens_per_s=1, source="guess", now=1)


@pytest.mark.parametrize(
    ("limit", "offset"),
    [
        (0, 0),  # an empty page is a client bug, not a valid request
        (1001, 0),  # beyond the maximum page size
        (10, -1),  # negative offsets are refused
    ],
)
def test_pagination_window_is_validated(factory: sessionmaker[Session], limit: int, offset: int) -> None:
    with transaction(factory) as s, pytest.raises(ValueError, match=r"limit|offset"):
        repo.list_findings(session=s, limit=limit, offset=offset)


@pytest.mark.parametrize("limit", [0, 1001])  # empty pages and pages beyond the maximum
def test_decision_page_size_is_validated(factory: sessionmaker[Session], limit: int) -> None:
    with transaction(factory) as s, pytest.raises(ValueError, match="limit"):
        repo.list_decisions(session=s, limit=limit)


def test_a_shard_closes_only_its_own_findings(factory: sessionmaker[Session]) -> None:
    # Two sharded instances on one store, each writing its findings a tick: before, each closed the other's (every
    # live row missing from its own list), and the other opened them again as new episodes, acknowledgement gone.
    mine = Finding("target_down", Severity.WARNING, Subject(deployment="a/x", replica="x-0"), 10.0, "x-0 down")
    gpu = _finding("xid", "n1")
    owns_a = {"a/x"}.__contains__

    def shard_a(deployment: str, replica: str, node: str, *_: object) -> bool:  # owns a/x and reads node n1's GPUs only
        return owns_a(deployment) if deployment else node == "n1"

    def shard_b(deployment: str, replica: str, node: str, *_: object) -> bool:  # owns b/y and reads node n2's GPUs only
        return deployment == "b/y" if deployment else node == "n2"

    with transaction(factory) as s:
        repo.upsert_findings(session=s, active=[mine, gpu], now=20, closes=shard_a)
    with transaction(factory) as s:
        repo.acknowledge_finding(session=s, finding_id=mine.id, by="ops", note="on it", now=21)
    with transaction(factory) as s:
        repo.upsert_findings(session=s, active=[], now=22, closes=shard_b)  # shard B's tick
    with transaction(factory) as s:
        row, node_row = (repo.get_finding(session=s, finding_id=f.id) for f in (mine, gpu))
        assert (row.state, row.acknowledged_by, node_row.state) == ("acknowledged", "ops", "open")
    with transaction(factory) as s:  # shard A's tick without them: its own to close
        repo.upsert_findings(session=s, active=[], now=23, closes=shard_a)
    with transaction(factory) as s:
        assert {repo.get_finding(session=s, finding_id=f.id).state for f in (mine, gpu)} == {"closed"}
