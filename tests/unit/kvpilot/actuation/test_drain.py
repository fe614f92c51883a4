"""The drain actuator through the official Kubernetes client against the fake API server: cordon and taint,
PDB-aware eviction with 429 backoff, resourceVersion conflicts, 404s, and dry-run."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from collector.clock import VirtualClock
from kvpilot.actuation.audit import Outcome
from kvpilot.actuation.drain import TAINT_KEY, Backoff, DrainResult, NodeDrainer, budget_refusal
from tests.fakekube.eviction import PDB_VIOLATION, install
from tests.fakekube.server import FakeKube
from tests.fakekube.store import ApiError, throttled
from tests.helpers.clocks import SteppingClock
from tests.helpers.silent_api import api_answering, kvpilot_run_actuation

START = 1_700_000_000.0


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    fake = install(FakeKube()).start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def core(kube: FakeKube) -> Iterator[client.CoreV1Api]:
    api = kube.api_client()
    try:
        yield client.CoreV1Api(api)
    finally:
        api.close()


def _node(kube: FakeKube, name: str = "gpu-1") -> None:
    kube.create("nodes", {"metadata": {"name": name}, "spec": {}})


def _pod(
    kube: FakeKube,
    name: str,
    node: str = "gpu-1",
    *,
    app: str = "llm",
    owner: str | None = "ReplicaSet",
    controller: bool | None = True,
    phase: str = "Running",
    **meta: Any,
) -> None:
    metadata: dict[str, Any] = {"name": name, "namespace": "ml", "labels": {"app": app}, **meta}
    if owner:
        ref = {"apiVersion": "apps/v1", "kind": owner, "name": "x", "uid": "u", "controller": controller}
        metadata["ownerReferences"] = [{k: v for k, v in ref.items() if v is not None}]
    kube.create(
        "pods",
        {
            "metadata": metadata,
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]},
        },
        namespace="ml",
    )


def _pdb(kube: FakeKube, min_available: int, app: str = "llm") -> None:
    kube.create(
        "poddisruptionbudgets",
        {
            "metadata": {"name": f"{app}-pdb"},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}},
        },
        namespace="ml",
    )


def _drainer(core: client.CoreV1Api, clock: VirtualClock, sleeps: list[float], **kw: Any) -> NodeDrainer:
    def sleep(s: float) -> None:
        sleeps.append(s)
        clock.advance(s)

    return NodeDrainer(core, clock=clock, sleep=sleep, backoff=Backoff(**kw))


def _outcomes(records: list[Any], step: str) -> list[tuple[str, Outcome]]:
    return [(r.target, r.outcome) for r in records if r.step == step]


def test_drain_cordons_taints_and_evicts_what_a_drain_should_move(kube, core):
    # Cordon + taint, evict the workload pods, leave DaemonSet, mirror and finished pods alone.
    _node(kube)
    _pod(kube, "llm-0")
    _pod(kube, "dcgm", owner="DaemonSet")
    _pod(kube, "static", annotations={"kubernetes.io/config.mirror": "x"})
    _pod(kube, "other-node", node="gpu-2")
    result = _drainer(core, VirtualClock(), []).drain("gpu-1", dry_run=False, reason="XID 79")
    node = kube.get("nodes", "gpu-1")
    assert node["spec"]["unschedulable"] is True
    assert [t["key"] for t in node["spec"]["taints"]] == [TAINT_KEY]
    assert result.evicted == ["ml/llm-0"]
    assert result.complete
    remaining = {p["metadata"]["name"] for p in kube.store.list(kube.resource("pods"), "ml")[0]}
    assert remaining == {"dcgm", "static", "other-node"}
    assert ("ml/dcgm", Outcome.SKIPPED) in _outcomes(result.records, "evict")
    assert ("POST", "/api/v1/namespaces/ml/pods/llm-0/eviction") in kube.requests  # the Eviction API, not DELETE


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_pod_with_no_controller_blocks_the_drain_as_kubectl_does(kube, core, dry_run):
    # Nothing recreates a bare pod: evicting it deletes it for good. kubectl drain refuses the node unless --force;
    # so does kvpilot: the node stays cordoned, no pod is evicted, the drain ends blocked naming the pod and why.
    _node(kube)
    _pod(kube, "llm-0")
    _pod(kube, "bare", owner=None)
    _pod(kube, "orphaned", owner="ReplicaSet", controller=False)  # an owner that is no controller (GC only)
    _pod(kube, "done-job", owner=None, phase="Succeeded")  # finished: nothing left to lose
    result = _drainer(core, VirtualClock(), []).drain("gpu-1", dry_run=dry_run)
    assert result.blocked == ["ml/bare", "ml/orphaned"]
    assert not result.complete
    assert result.evicted == []
    assert not [path for method, path in kube.requests if method == "POST" and path.endswith("/eviction")]
    remaining = {p["metadata"]["name"] for p in kube.store.list(kube.resource("pods"), "ml")[0]}
    assert remaining == {"llm-0", "bare", "orphaned", "done-job"}
    blocked = [r for r in result.records if r.outcome is Outcome.BLOCKED]
    assert [r.target for r in blocked] == ["ml/bare", "ml/orphaned"]
    assert "ml/bare has no controller" in blocked[0].message
    assert "delete it for good" in blocked[0].message
    assert ("ml/done-job", Outcome.SKIPPED) in _outcomes(result.records, "evict")
    assert kube.get("nodes", "gpu-1")["spec"].get("unschedulable") is (None if dry_run else True)


def test_an_owner_reference_without_the_controller_field_counts_as_a_controller(kube, core):
    _node(kube)
    _pod(kube, "llm-0", controller=None)
    result = _drainer(core, VirtualClock(), []).drain("gpu-1", dry_run=False)
    assert result.complete
    assert result.evicted == ["ml/llm-0"]


def _deployment(kube: FakeKube, name: str, ready: int) -> None:
    # A Deployment, its ReplicaSet, and the status the deployment controller writes (the fake runs no controller).
    selector = {"matchLabels": {"app": "llm"}}
    template = {"metadata": {"labels": {"app": "llm"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    spec = {"selector": selector, "template": template}
    kube.create("deployments", {"metadata": {"name": name}, "spec": spec, "status": {"readyReplicas": ready}}, "ml")
    owner = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": "d", "controller": True}]
    kube.create("replicasets", {"metadata": {"name": f"{name}-7d4f", "ownerReferences": owner}, "spec": spec}, "ml")


def _replica(kube: FakeKube, name: str, deployment: str, node: str = "gpu-1", **kw: Any) -> None:
    ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{deployment}-7d4f", "uid": "r", "controller": True}
    _pod(kube, name, node, owner=None, ownerReferences=[ref], **kw)


@pytest.mark.parametrize("dry_run", [False, True])
def test_the_last_ready_replica_of_a_deployment_is_read_again_and_kept(kube, core, dry_run):
    # The drain rails decide on the instance's snapshot: with sharding it holds only the instance's own deployments,
    # and an approved drain may run hours later. Before evicting, the drainer reads Pod -> ReplicaSet -> Deployment
    # from the API server and keeps the pods whose eviction would leave their Deployment no ready replica.
    _node(kube)
    _deployment(kube, "chat", ready=2)  # both ready replicas on this node
    _replica(kube, "chat-0", "chat")
    _replica(kube, "chat-1", "chat")
    _deployment(kube, "code", ready=2)  # one here, one elsewhere: may go
    _replica(kube, "code-0", "code")
    _replica(kube, "code-1", "code", node="gpu-2")
    result = _drainer(core, VirtualClock(), []).drain("gpu-1", dry_run=dry_run)
    assert result.blocked == ["ml/chat-0", "ml/chat-1"]
    assert not result.complete
    blocked = [r for r in result.records if r.outcome is Outcome.BLOCKED]
    assert [r.target for r in blocked] == ["ml/chat-0", "ml/chat-1"]
    assert blocked[0].message.startswith("deployment ml/chat has 2 ready replica(s), 2 of them on gpu-1")
    if dry_run:
        assert ("ml/code-0", Outcome.DRY_RUN) in _outcomes(result.records, "evict")
    else:
        assert result.evicted == ["ml/code-0"]
    remaining = {p["metadata"]["name"] for p in kube.store.list(kube.resource("pods"), "ml")[0]}
    assert {"chat-0", "chat-1"} <= remaining


def _owned(kube: FakeKube, plural: str, name: str, ready: int) -> None:
    # A StatefulSet, or a ReplicaSet no Deployment owns, with the status its controller writes.
    selector = {"matchLabels": {"app": name}}
    template = {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    spec = {"selector": selector, "template": template, "serviceName": name}
    status = {"replicas": ready, "readyReplicas": ready}
    kube.create(plural, {"metadata": {"name": name}, "spec": spec, "status": status}, "ml")


def _member(kube: FakeKube, name: str, kind: str, owner: str, node: str = "gpu-1") -> None:
    ref = {"apiVersion": "apps/v1", "kind": kind, "name": owner, "uid": "o", "controller": True}
    _pod(kube, name, node, owner=None, app=owner, ownerReferences=[ref])


@pytest.mark.parametrize("dry_run", [False, True])
def test_the_last_ready_replica_of_a_statefulset_or_a_bare_replicaset_is_kept(kube, core, dry_run):
    # Review G (session 18): the execution-time check read Pod -> ReplicaSet -> Deployment only, so a node holding a
    # StatefulSet's last ready pod (or a ReplicaSet's no Deployment owns) was drained of it. Now each controller with a
    # ready count is read: db has its only ready replica here, kv both of its two; cache has one here, one elsewhere.
    _node(kube)
    _owned(kube, "statefulsets", "db", ready=1)
    _member(kube, "db-0", "StatefulSet", "db")
    _owned(kube, "replicasets", "kv", ready=2)
    _member(kube, "kv-a", "ReplicaSet", "kv")
    _member(kube, "kv-b", "ReplicaSet", "kv")
    _owned(kube, "statefulsets", "cache", ready=2)
    _member(kube, "cache-0", "StatefulSet", "cache")
    _member(kube, "cache-1", "StatefulSet", "cache", node="gpu-2")
    result = _drainer(core, VirtualClock(), []).drain("gpu-1", dry_run=dry_run)
    assert result.blocked == ["ml/db-0", "ml/kv-a", "ml/kv-b"]
    assert not result.complete
    words = {r.target: r.message for r in result.records if r.outcome is Outcome.BLOCKED}
    assert words["ml/db-0"].startswith("statefulset ml/db has 1 ready replica(s), 1 of them on gpu-1")
    assert words["ml/kv-a"].startswith("replicaset ml/kv has 2 ready replica(s), 2 of them on gpu-1")
    if dry_run:
        assert ("ml/cache-0", Outcome.DRY_RUN) in _outcomes(result.records, "evict")
    else:
        assert result.evicted == ["ml/cache-0"]
    remaining = {p["metadata"]["name"] for p in kube.store.list(kube.resource("pods"), "ml")[0]}
    assert {"db-0", "kv-a", "kv-b"} <= remaining
    reads = [p for m, p in kube.requests if m == "GET" and "/apis/apps/" in p]
    assert sorted(reads) == [
        "/apis/apps/v1/namespaces/ml/replicasets/kv",
        "/apis/apps/v1/namespaces/ml/statefulsets/cache",
        "/apis/apps/v1/namespaces/ml/statefulsets/db",
    ]  # each owner read once


def test_a_statefulset_gone_counts_for_nothing(kube, core):
    _node(kube)
    _member(kube, "db-0", "StatefulSet", "db")  # its StatefulSet was deleted (orphaned pods linger)
    result = _drainer(core, VirtualClock(), []).drain("gpu-1", dry_run=False)
    assert result.complete
    assert result.evicted == ["ml/db-0"]


def test_a_replica_that_is_not_ready_counts_for_nothing(kube, core):
    # chat's one ready replica is elsewhere; the one here is still starting: evicting it takes nothing ready away.
    # code's one ready replica is here next to a starting one: the ready one stays, the starting one goes.
    _node(kube)
    _deployment(kube, "chat", ready=1)
    _replica(kube, "chat-0", "chat", phase="Pending")
    _replica(kube, "chat-1", "chat", node="gpu-2")
    _deployment(kube, "code", ready=1)
    _replica(kube, "code-0", "code")
    _replica(kube, "code-1", "code", phase="Pending")
    result = _drainer(core, VirtualClock(), []).drain("gpu-1", dry_run=False)
    assert result.evicted == ["ml/chat-0", "ml/code-1"]
    assert result.blocked == ["ml/code-0"]


def test_owners_that_cannot_be_read_end_the_drain_before_any_eviction(kube, core, monkeypatch):
    # A ClusterRole without get on replicasets (manifests older than this check): failed, said, nothing evicted.
    def forbidden(*_: Any, **__: Any) -> None:
        raise ApiException(status=403, reason="Forbidden")

    monkeypatch.setattr(client.AppsV1Api, "read_namespaced_replica_set", forbidden)
    _node(kube)
    _deployment(kube, "chat", ready=3)
    _replica(kube, "chat-0", "chat")
    result = _drainer(core, VirtualClock(), []).drain("gpu-1", dry_run=False)
    assert result.failed
    assert result.evicted == []
    assert "HTTP 403" in result.records[-1].message


def test_dry_run_changes_nothing_and_says_what_it_would_do(kube, core):
    # Dry-run (the default) records what it would do; the cluster is untouched.
    _node(kube)
    _pod(kube, "llm-0")
    before = kube.get("nodes", "gpu-1")["metadata"]["resourceVersion"]
    result = _drainer(core, VirtualClock(), []).drain("gpu-1")
    assert kube.get("nodes", "gpu-1")["metadata"]["resourceVersion"] == before
    assert kube.get("pods", "llm-0", "ml")
    assert {r.outcome for r in result.records} == {Outcome.DRY_RUN}
    assert all(r.dry_run for r in result.records)


def test_a_dry_run_asks_the_api_server_whether_each_pods_budget_allows_its_eviction(kube, core):
    # A dry-run eviction (dryRun=All, what `kubectl drain --dry-run=server` sends) checks the pod's budget and evicts
    # nothing, so a dry run says which pods a budget holds now. Before, it said "would evict" of each, and the real
    # drain then waited 600 s on the held one and failed (session 31, the operator's path walked).
    _node(kube)
    _pod(kube, "held-0", app="held")
    _pdb(kube, 1, app="held")  # 1 of 1 must stay: no eviction allowed
    _pod(kube, "free-0", app="free")  # no budget
    result = _drainer(core, VirtualClock(), []).drain("gpu-1")
    evicts = {r.target: r.message for r in result.records if r.step == "evict"}
    assert evicts["ml/free-0"] == "would evict ml/free-0"
    assert evicts["ml/held-0"] == (
        "would wait to evict ml/held-0: its PodDisruptionBudget refuses it now (The disruption budget held-pdb needs 1 "
        "healthy pods and has 1 currently); a real drain retries it for up to 600 s, then leaves it"
    )
    assert {r.outcome for r in result.records} == {Outcome.DRY_RUN}
    assert {p["metadata"]["name"] for p in kube.store.list(kube.resource("pods"), "ml")[0]} == {"held-0", "free-0"}


def test_pdb_blocked_eviction_retries_with_backoff_until_the_budget_allows(kube, core):
    # 429 while the PDB allows no disruption; a replacement pod becomes ready during the backoff; then it succeeds.
    _node(kube)
    _pod(kube, "llm-0")
    _pod(kube, "llm-1", node="gpu-2")
    _pdb(kube, min_available=2)
    clock, sleeps = VirtualClock(), []

    def sleep(s: float) -> None:
        sleeps.append(s)
        clock.advance(s)
        if len(sleeps) == 3:  # the controller's replacement on another node turns ready
            _pod(kube, "llm-2", node="gpu-3")

    drainer = NodeDrainer(core, clock=clock, sleep=sleep, backoff=Backoff(initial_s=1, factor=2, max_s=30))
    result = drainer.drain("gpu-1", dry_run=False)
    assert sleeps == [1, 2, 4]
    assert result.evicted == ["ml/llm-0"]
    # one step for the refusals (session 19: was one per try), the outcome saying how many and how long
    assert [o for _, o in _outcomes(result.records, "evict")] == [Outcome.RETRY, Outcome.OK]
    retry = [r.message for r in result.records if r.outcome == Outcome.RETRY]
    assert retry == [  # the budget's own words, from the Status's DisruptionBudget cause
        "PDB refused ml/llm-0 (The disruption budget llm-pdb needs 2 healthy pods and has 2 currently); retry in 1 s, "
        "backing off to 30 s, for up to 600 s"
    ]
    assert result.records[-1].message == "evicted ml/llm-0 after 3 PDB refusal(s) over 7 s"


def _throttling(kube: FakeKube, times: int, retry_after_s: int) -> list[int]:
    """The API server sheds the first ``times`` evictions (API Priority and Fairness: a plain-text 429 with a
    Retry-After, no Status, no budget named); returns the list its refusals are counted in."""
    shed: list[int] = []

    def intercept(method: str, path: str) -> ApiError | None:
        if method == "POST" and path.endswith("/eviction") and len(shed) < times:
            shed.append(1)
            return throttled(retry_after_s)
        return None

    kube.intercept = intercept
    return shed


def test_a_throttled_eviction_waits_the_retry_after_and_is_not_called_a_pdb_refusal(kube, core):
    # An eviction's 429 from API Priority and Fairness (Retry-After, no disruption budget named) waits at least the
    # Retry-After, and the audit says the API server throttled it: before session 20 it read "PDB refused".
    _node(kube)
    _pod(kube, "llm-0")
    shed = _throttling(kube, 2, retry_after_s=7)
    clock, sleeps = VirtualClock(), list[float]()
    result = _drainer(core, clock, sleeps, initial_s=1, factor=2, max_s=30).drain("gpu-1", dry_run=False)
    assert len(shed) == 2
    assert result.evicted == ["ml/llm-0"]
    assert sleeps == [7, 7]  # not 1 and 2
    messages = [r.message for r in result.records if r.step == "evict"]
    assert not any("PDB" in m or "PodDisruptionBudget" in m for m in messages), messages
    assert messages[0].startswith(
        "the API server throttled the eviction of ml/llm-0 (HTTP 429 naming no disruption budget: API Priority and "
        "Fairness shedding load); retry in 7 s"
    )
    assert messages[-1] == (
        "evicted ml/llm-0 after 2 throttled answer(s) (HTTP 429, no disruption budget named) over 14 s"
    )


def test_throttling_then_a_pdb_says_each_once(kube, core):
    # Throttled first, then refused by the budget until a replacement is ready: one retry step for each kind.
    _node(kube)
    _pod(kube, "llm-0")
    _pod(kube, "llm-1", node="gpu-2")
    _pdb(kube, min_available=2)
    _throttling(kube, 1, retry_after_s=3)
    clock, sleeps = VirtualClock(), list[float]()

    def sleep(s: float) -> None:
        sleeps.append(s)
        clock.advance(s)
        if len(sleeps) == 3:
            _pod(kube, "llm-2", node="gpu-3")

    drainer = NodeDrainer(core, clock=clock, sleep=sleep, backoff=Backoff(initial_s=1, factor=2, max_s=30))
    result = drainer.drain("gpu-1", dry_run=False)
    assert result.evicted == ["ml/llm-0"]
    retry = [r.message for r in result.records if r.outcome == Outcome.RETRY]
    assert [m.split(";")[0] for m in retry] == [
        "the API server throttled the eviction of ml/llm-0 (HTTP 429 naming no disruption budget: API Priority and "
        "Fairness shedding load)",
        "PDB refused ml/llm-0 (The disruption budget llm-pdb needs 2 healthy pods and has 2 currently)",
    ]
    assert result.records[-1].message == (
        "evicted ml/llm-0 after 2 PDB refusal(s) and 1 throttled answer(s) (HTTP 429, no disruption budget named) "
        "over 9 s"
    )


def test_an_eviction_throttled_to_the_deadline_is_blocked_in_the_right_words(kube, core):
    _node(kube)
    _pod(kube, "llm-0")
    _throttling(kube, 10**6, retry_after_s=5)
    result = _drainer(core, VirtualClock(), [], initial_s=5, factor=2, max_s=20, deadline_s=60).drain(
        "gpu-1", dry_run=False
    )
    assert result.blocked == ["ml/llm-0"]
    assert result.records[-1].outcome == Outcome.BLOCKED
    assert result.records[-1].message.startswith("the API server throttled the eviction of ml/llm-0 for 60 s (")
    assert result.records[-1].message.endswith("); no PodDisruptionBudget refused it")


NEEDS = "The disruption budget chat needs 2 healthy pods and has 2 currently"


@pytest.mark.parametrize(
    ("body", "said"),
    [
        # pkg/registry/core/pod/storage/eviction.go: the budget allows no disruption now
        (
            {"kind": "Status", "code": 429, "reason": "TooManyRequests",
             "message": PDB_VIOLATION,
             "details": {"causes": [{"reason": "DisruptionBudget", "message": NEEDS}]}},
            NEEDS,
        ),
        # ... its status not yet observed by the disruption controller (Retry-After 10)
        (
            {"kind": "Status", "code": 429, "reason": "TooManyRequests",
             "message": PDB_VIOLATION,
             "details": {"retryAfterSeconds": 10, "causes": [{"reason": "DisruptionBudget",
                         "message": "The disruption budget chat is still being processed by the server."}]}},
            "The disruption budget chat is still being processed by the server.",
        ),
        # a server that names no cause
        (
            {"kind": "Status", "code": 429, "message": PDB_VIOLATION},
            PDB_VIOLATION,
        ),
        ("Too many requests, please try again later.\n", None),  # API Priority and Fairness, --max-requests-inflight
        ({"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "too many requests"}, None),
        ({"kind": "Status", "code": 429, "details": {"causes": "garbage"}}, None),
        ("[1, 2]", None),
        (None, None),
    ],
)  # fmt: skip
def test_a_429_is_a_budgets_refusal_only_when_its_status_names_one(body: Any, said: str | None) -> None:
    raw = json.dumps(body) if isinstance(body, dict) else body
    assert budget_refusal(ApiException(status=429, reason="Too Many Requests", body=raw)) == said


def test_pdb_that_never_allows_is_reported_blocked_after_the_deadline(kube, core):
    # The budget never allows: give up at the deadline, report the pod blocked, leave it running.
    _node(kube)
    _pod(kube, "llm-0")
    _pdb(kube, min_available=1)
    sleeps: list[float] = []
    result = _drainer(core, VirtualClock(), sleeps, initial_s=5, factor=2, max_s=20, deadline_s=60).drain(
        "gpu-1", dry_run=False
    )
    assert result.blocked == ["ml/llm-0"]
    assert not result.complete
    assert sum(sleeps) >= 60
    assert max(sleeps) == 20  # capped
    assert kube.get("pods", "llm-0", "ml")


@pytest.mark.parametrize("step_s", [-3600.0, 3600.0])
def test_a_clock_step_while_a_budget_refuses_does_not_move_the_deadline(kube, core, step_s: float):
    # NTP steps the wall clock during the first backoff. The deadline is 60 s of waiting, on the monotonic clock:
    # before, waited was wall time, so a step back kept the eviction retrying for another hour and a step ahead gave
    # it up after one try.
    _node(kube)
    _pod(kube, "llm-0")
    _pdb(kube, min_available=1)
    clock, sleeps = SteppingClock(START), []

    def sleep(s: float) -> None:
        sleeps.append(s)
        if len(sleeps) == 1:
            clock.step(step_s)
        clock.advance(s)

    backoff = Backoff(initial_s=5, factor=2, max_s=20, deadline_s=60)
    result = NodeDrainer(core, clock=clock, sleep=sleep, backoff=backoff).drain("gpu-1", dry_run=False)
    assert result.blocked == ["ml/llm-0"]
    assert 60 <= sum(sleeps) <= 80  # the 60 s deadline, and no more than the last backoff past it
    assert result.records[-1].outcome == Outcome.BLOCKED


def test_conflict_on_the_node_is_retried_on_a_fresh_read(kube, core):
    # Another writer changes the node between our read and our replace: 409, re-read, and keep its change.
    _node(kube)

    class Racy(client.CoreV1Api):
        raced = False

        def read_node(self, name: str, **kw: Any) -> Any:
            obj = super().read_node(name, **kw)
            if not Racy.raced:
                Racy.raced = True
                kube.patch("nodes", name, {"metadata": {"labels": {"other": "writer"}}}, namespace="")
            return obj

    result = NodeDrainer(Racy(core.api_client), clock=VirtualClock(), sleep=lambda s: None).drain(
        "gpu-1", dry_run=False
    )
    node = kube.get("nodes", "gpu-1", namespace="")
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["labels"] == {"other": "writer"}  # not overwritten
    assert [o for _, o in _outcomes(result.records, "cordon")] == [Outcome.RETRY, Outcome.OK]


def test_missing_node_is_reported_not_found(kube, core):
    # 404 on the node: nothing else is attempted.
    result = _drainer(core, VirtualClock(), []).drain("ghost", dry_run=False)
    assert result.failed
    assert [(r.step, r.outcome) for r in result.records] == [("cordon", Outcome.NOT_FOUND)]


def test_pod_gone_before_its_eviction_counts_as_done(kube, core):
    # A pod deleted between the listing and its eviction answers 404: recorded, not a failure.
    _node(kube)
    _pod(kube, "llm-0")

    class Vanishing(client.CoreV1Api):
        def list_pod_for_all_namespaces(self, **kw: Any) -> Any:
            listed = super().list_pod_for_all_namespaces(**kw)
            kube.delete("pods", "llm-0", "ml")
            return listed

    result = NodeDrainer(Vanishing(core.api_client), clock=VirtualClock(), sleep=lambda s: None).drain(
        "gpu-1", dry_run=False
    )
    assert _outcomes(result.records, "evict") == [("ml/llm-0", Outcome.NOT_FOUND)]
    assert result.complete


def _budget(kube: FakeKube, name: str, **spec: Any) -> None:
    kube.create(
        "poddisruptionbudgets",
        {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": "llm"}}, **spec}},
        namespace="ml",
    )


EVICTIONS = [
    # no budget: evicted
    ([], True, 201),
    # minAvailable 1 of 2 healthy: one may go
    ([{"minAvailable": 1}], True, 201),
    # minAvailable 2 of 2 healthy: blocked with 429
    ([{"minAvailable": 2}], True, 429),
    # maxUnavailable 0: blocked
    ([{"maxUnavailable": 0}], True, 429),
    # maxUnavailable 50 % of 2 = 1: allowed
    ([{"maxUnavailable": "50%"}], True, 201),
    # two budgets select the pod: the API server refuses with 500
    ([{"minAvailable": 0}, {"minAvailable": 0}], True, 500),
    # a pod that is not ready yet is evicted whatever its budget
    ([{"minAvailable": 2}], False, 201),
]


@pytest.mark.parametrize(("budgets", "ready", "code"), EVICTIONS)
def test_fake_eviction_keeps_pdb_semantics(kube, core, budgets, ready, code):
    _pod(kube, "llm-0")
    _pod(kube, "llm-1")
    if not ready:
        kube.patch("pods", "llm-0", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, "ml")
    for i, spec in enumerate(budgets):
        _budget(kube, f"pdb-{i}", **spec)
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name="llm-0", namespace="ml"))
    try:
        core.create_namespaced_pod_eviction("llm-0", "ml", body)
        got = 201
    except client.exceptions.ApiException as e:
        got = e.status
    assert got == code


def test_fake_eviction_of_a_missing_pod_is_404(kube, core):
    # The official client sees a 404 ApiException for a pod that does not exist.
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name="ghost", namespace="ml"))
    with pytest.raises(client.exceptions.ApiException) as info:
        core.create_namespaced_pod_eviction("ghost", "ml", body)
    assert info.value.status == 404


def test_cancel_stops_further_evictions(kube, core):
    # An operator's cancel after the first eviction leaves the rest running and the node cordoned.
    _node(kube)
    for i in range(3):
        _pod(kube, f"llm-{i}")
    drainer = _drainer(core, VirtualClock(), [])

    def one_evicted() -> bool:
        return any(m == "POST" and p.endswith("/eviction") for m, p in kube.requests)

    result = drainer.drain("gpu-1", dry_run=False, should_stop=one_evicted)
    assert result.evicted == ["ml/llm-0"]
    assert result.cancelled
    assert not result.complete
    assert kube.get("nodes", "gpu-1", namespace="")["spec"]["unschedulable"] is True
    assert len(kube.store.list(kube.resource("pods"), "ml")[0]) == 2


def test_each_eviction_request_is_told_to_on_evict_first(kube: FakeKube, core: client.CoreV1Api) -> None:
    # kvpilot's own removal is told before the request (the pod may leave discovery before it returns), and again
    # on every retry a PDB forces, so that the rollout stage's memory of it outlasts the backoff.
    _node(kube)
    _pod(kube, "llm-0")
    _pod(kube, "llm-1", node="gpu-2")
    _pdb(kube, min_available=2)
    clock, sleeps, told = VirtualClock(), list[float](), list[tuple[str, float, bool]]()

    def sleep(s: float) -> None:
        sleeps.append(s)
        clock.advance(s)
        if len(sleeps) == 2:
            _pod(kube, "llm-2", node="gpu-3")  # the replacement turns ready: the budget allows the eviction

    def on_evict(pod: str, now: float) -> None:
        told.append((pod, now, kube.get("pods", "llm-0", "ml") is not None))

    drainer = NodeDrainer(core, clock=clock, sleep=sleep, backoff=Backoff(initial_s=1, factor=2), on_evict=on_evict)
    result = drainer.drain("gpu-1", dry_run=False)
    assert result.evicted == ["ml/llm-0"]
    assert told == [("ml/llm-0", 0.0, True), ("ml/llm-0", 1.0, True), ("ml/llm-0", 3.0, True)]


def test_a_dry_run_tells_on_evict_nothing(kube: FakeKube, core: client.CoreV1Api) -> None:
    _node(kube)
    _pod(kube, "llm-0")
    told: list[tuple[str, float]] = []
    NodeDrainer(core, clock=VirtualClock(), on_evict=lambda pod, now: told.append((pod, now))).drain("gpu-1")
    assert told == []
    assert kube.get("pods", "llm-0", "ml")


def test_an_api_server_that_never_answers_ends_the_drain_in_time():
    # before: the client waited for ever; the drain, deaf to a cancel, held every approved drain after it
    ended: list[DrainResult] = []

    def drain() -> None:
        drainer = NodeDrainer(client.CoreV1Api(api), clock=VirtualClock(), request_timeout_s=0.5)
        ended.append(drainer.drain("gpu-1", dry_run=False))  # failed, with the call that timed out in its records

    with api_answering(None) as api:
        worker = threading.Thread(target=drain, daemon=True)
        worker.start()
        worker.join(20)  # urllib3 tries a read up to 4 times: 2 s
    assert ended, "still waiting for the API server after 20 s"
    assert ended[0].failed
    assert "timed out" in ended[0].records[-1].message


def test_a_call_that_times_out_mid_drain_keeps_the_steps_before_it(kube: FakeKube, core: client.CoreV1Api):
    # Review G (session 18): a timeout (or a refused connection, an answer that is no Node) raised out of drain(), and
    # the worker audited only "drain raised": the node it had cordoned and the pods it had evicted went unrecorded.
    _node(kube)
    _pod(kube, "llm-0", owner="ReplicaSet")
    _pod(kube, "llm-1", owner="ReplicaSet")
    evicted = threading.Event()
    real = kube.subresources[("pods", "eviction")]

    def evict_one_then_hang(fake: FakeKube, req: Any) -> Any:
        if evicted.is_set():
            threading.Event().wait(2.0)  # the second eviction: answered after the client gave up
        evicted.set()
        return real(fake, req)

    kube.subresources[("pods", "eviction")] = evict_one_then_hang
    result = NodeDrainer(core, clock=VirtualClock(), request_timeout_s=0.3).drain("gpu-1", dry_run=False)
    assert result.failed
    assert [(r.step, r.outcome) for r in result.records] == [
        ("cordon", Outcome.OK),
        ("evict", Outcome.OK),
        ("api", Outcome.ERROR),
    ]
    assert "timed out" in result.records[-1].message
    assert result.evicted == ["ml/llm-0"]


# -- an API server asking to wait (429/503 Retry-After) on the node read, the node update, the pod list --------------


def _answer(status: str, body: dict[str, Any] | None = None, headers: str = "") -> bytes:
    data = json.dumps(body or {}).encode()
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n{headers}"
    return head.encode() + b"Connection: close\r\n\r\n" + data


_NODE = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "gpu-1", "resourceVersion": "1"}, "spec": {}}
_NO_PODS = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []}


def _wait_please(seconds: str, status: str = "429 Too Many Requests") -> bytes:
    return _answer(status, {"kind": "Status", "code": int(status[:3])}, headers=f"Retry-After: {seconds}\r\n")


def _drain_in_a_thread(drain: Callable[[], DrainResult], within_s: float) -> DrainResult:
    ended: list[DrainResult] = []
    worker = threading.Thread(target=lambda: ended.append(drain()), daemon=True)
    worker.start()
    worker.join(within_s)
    assert ended, f"still draining after {within_s} s"
    return ended[0]


def test_kvpilot_run_drains_do_not_wait_out_a_long_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 429 asking to wait 30 s, past what one call may take (request_timeout_s, 10 s), ends the drain at once with
    a retry for the worker's next pass, naming the node and the wait. Before, kvpilot run's client (urllib3's default
    retries) obeyed it three times: 90 s on the node read alone, deaf to a cancel, every later drain held with it."""
    asked: list[bytes] = []

    def too_many(request: bytes) -> bytes:
        asked.append(request.split(b" ", 1)[0])
        return _wait_please("30")

    with api_answering(too_many) as api:
        actuation = kvpilot_run_actuation(api, monkeypatch, collector={"discovery": {"kind": "kubernetes"}})
        started = time.monotonic()
        drainer = actuation._drainer
        result = _drain_in_a_thread(lambda: drainer.drain("gpu-1", dry_run=False), within_s=20)
        took = time.monotonic() - started
    assert result.busy.startswith("read node gpu-1: the API server asks to wait 30 s (HTTP 429, Retry-After)")
    assert "tried again later" in result.busy
    assert not result.complete
    assert not result.failed
    assert [(r.step, r.outcome) for r in result.records] == [("cordon", Outcome.RETRY)]
    assert took < 5  # one request, no wait; was 90 s
    assert asked == [b"GET"]


def test_a_short_retry_after_is_waited_out_within_each_call() -> None:
    # an API server shedding load (API Priority and Fairness) asks for a second on each call: the drain goes on
    answers = iter(
        [
            *(_wait_please("1"), _answer("200 OK", _NODE)),  # read the node
            *(_wait_please("1", "503 Service Unavailable"), _answer("200 OK", _NODE)),  # cordon it
            *(_wait_please("1"), _answer("200 OK", _NO_PODS)),  # list its pods
        ]
    )
    with api_answering(lambda _: next(answers), retries=False) as api:
        drainer = NodeDrainer(client.CoreV1Api(api), clock=VirtualClock())
        started = time.monotonic()
        result = _drain_in_a_thread(
            lambda: drainer.drain("gpu-1", dry_run=False, interrupt=threading.Event()), within_s=15
        )
        took = time.monotonic() - started
    assert result.complete, result.records
    assert [(r.step, r.outcome) for r in result.records] == [("cordon", Outcome.OK)]
    assert 2.7 < took < 8


def test_a_cancel_is_heard_while_the_api_server_asks_to_wait() -> None:
    # Retry-After: 8 is within request_timeout_s (10 s), so it is waited out, on the drain's interrupt
    with api_answering(lambda _: _wait_please("8"), retries=False) as api:
        drainer = NodeDrainer(client.CoreV1Api(api), clock=VirtualClock())
        interrupt = threading.Event()
        threading.Timer(0.3, interrupt.set).start()
        started = time.monotonic()
        result = _drain_in_a_thread(lambda: drainer.drain("gpu-1", dry_run=False, interrupt=interrupt), within_s=15)
        took = time.monotonic() - started
    assert result.cancelled
    assert not result.failed
    assert [(r.step, r.outcome) for r in result.records] == [("cordon", Outcome.SKIPPED)]
    assert "cancelled while the API server asked to wait" in result.records[0].message
    assert took < 3  # was 24 s (urllib3, 3 x 8 s), deaf to the cancel


@pytest.mark.parametrize(
    ("retry_after", "words"),
    [
        ("0", "list the pods of node gpu-1: the API server still asks to wait after 4 tries"),
        ("30", "list the pods of node gpu-1: the API server asks to wait 30 s (HTTP 503, Retry-After)"),
    ],
)
def test_a_pod_list_asked_to_wait_is_bounded(retry_after: str, words: str) -> None:
    asked: list[bytes] = []

    def answer(request: bytes) -> bytes:
        asked.append(request.split(b" ", 1)[0])
        if b"/pods" in request.split(b"\r\n", 1)[0]:
            return _wait_please(retry_after, "503 Service Unavailable")
        return _answer("200 OK", _NODE)

    with api_answering(answer, retries=False) as api:
        drainer = NodeDrainer(client.CoreV1Api(api), clock=VirtualClock(), request_timeout_s=2.0)
        result = _drain_in_a_thread(lambda: drainer.drain("gpu-1", dry_run=False), within_s=10)
    assert words in result.busy
    assert [(r.step, r.outcome) for r in result.records] == [("cordon", Outcome.OK), ("list_pods", Outcome.RETRY)]
    assert len(asked) <= 2 + 4


async def test_the_worker_puts_a_drain_the_api_server_asks_to_wait_back_to_approved(tmp_path: Path) -> None:
    from detectors.drain_rails import DrainRails
    from kvpilot.actuation import Actuation
    from store import repo
    from store.db import make_engine, session_factory, transaction
    from tests.helpers.drains import admin_approved
    from tests.helpers.sqlite_store import migrated

    sessions = session_factory(make_engine(migrated(tmp_path / "k.db")))
    clock = VirtualClock(1000.0)
    with api_answering(lambda _: _wait_please("30"), retries=False) as api:
        drainer = NodeDrainer(client.CoreV1Api(api), clock=clock)
        act = Actuation(sessions=sessions, clock=clock, rails=DrainRails(dry_run=False), drainer=drainer, poll_s=0.05)
        action_id = admin_approved(sessions, "gpu-1", clock.now())
        await asyncio.wait_for(act.execute_approved(asyncio.Event()), 10)
    with transaction(sessions) as s:
        state = repo.get_drain(session=s, action_id=action_id).state
        events = [e.message for e in repo.list_drain_events(session=s, action_id=action_id)]
    assert state == "approved"  # tried again on the next pass, as a scaling call is
    assert any("asks to wait 30 s" in m and m.startswith("cordon gpu-1: retry") for m in events), events


# -- list reads with one object the client's models refuse (what a real API server refuses to store; a proxy or another
# server may send it): that object alone is left out, audited, and the rest is used. Before, the pod list failed the
# whole drain and the cordoned-node list fell back on the store's count alone.


def _listed_pod(kube: FakeKube, name: str, *, ports: list[dict[str, Any]] | None = None) -> None:
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": "u", "controller": True}
    container: dict[str, Any] = {"name": "c", "image": "i", **({"ports": ports} if ports else {})}
    kube.create(
        "pods",
        {
            "metadata": {"name": name, "namespace": "ml", "labels": {"app": "llm"}, "ownerReferences": [owner]},
            "spec": {"nodeName": "gpu-1", "containers": [container]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]},  # no workload read
        },
        namespace="ml",
    )


def test_a_pod_the_client_refuses_is_left_out_audited_and_the_others_evicted(
    kube: FakeKube, core: client.CoreV1Api
) -> None:
    _node(kube)
    _listed_pod(kube, "a")
    _listed_pod(kube, "odd", ports=[{"name": "http"}])  # a port named but not numbered: V1ContainerPort refuses it
    _listed_pod(kube, "b")
    result = NodeDrainer(core, clock=VirtualClock(), sleep=lambda s: None).drain("gpu-1", dry_run=False)
    assert not result.failed
    evicts = {r.target: r for r in result.records if r.step == "evict"}
    assert evicts["ml/odd"].outcome == Outcome.SKIPPED
    assert "cannot read pod ml/odd" in evicts["ml/odd"].message
    assert "ValidationError" in evicts["ml/odd"].message
    remaining = {p["metadata"]["name"] for p in kube.store.list(kube.resource("pods"), "ml")[0]}
    assert remaining == {"odd"}  # a and b evicted


def test_the_cordoned_nodes_are_counted_with_one_node_the_client_refuses(
    kube: FakeKube, core: client.CoreV1Api
) -> None:
    taint = {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}
    kube.create("nodes", {"metadata": {"name": "n0"}, "spec": {"unschedulable": True, "taints": [taint]}})
    # cordoned by kvpilot, with a condition that has no status: V1NodeCondition refuses it; still counted
    odd = {"unschedulable": True, "taints": [taint]}
    kube.create("nodes", {"metadata": {"name": "n1"}, "spec": odd, "status": {"conditions": [{"type": "Ready"}]}})
    kube.create("nodes", {"metadata": {"name": "n2"}, "spec": {"unschedulable": True}})  # an operator's cordon
    kube.create("nodes", {"metadata": {"name": "n3"}, "spec": {"taints": [taint]}})  # uncordoned, taint left
    kube.create("nodes", {"metadata": {"name": "n4"}, "spec": {"unschedulable": True, "taints": "nonsense"}})
    assert NodeDrainer(core, clock=VirtualClock()).cordoned() == {"n0", "n1"}
