"""The drain actuator through the official Kubernetes client against the fake API server: cordon and taint,
PDB-aware eviction with 429 backoff, resourceVersion conflicts, 404s, and dry-run."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from collector.clock import VirtualClock
from kvpilot.actuation.audit import Outcome
from kvpilot.actuation.drain import TAINT_KEY, Backoff, DrainResult, NodeDrainer
from tests.fakekube.eviction import install
from tests.fakekube.server import FakeKube
from tests.helpers.silent_api import api_answering


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
    kube: FakeKube, name: str, node: str = "gpu-1", *, app: str = "llm", owner: str | None = None, **meta: Any
) -> None:
    metadata: dict[str, Any] = {"name": name, "namespace": "ml", "labels": {"app": app}, **meta}
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": "x", "uid": "u"}]
    kube.create(
        "pods",
        {
            "metadata": metadata,
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
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
    assert [o for _, o in _outcomes(result.records, "evict")] == [Outcome.RETRY] * 3 + [Outcome.OK]


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
