"""The fake API server keeps the semantics kvpilot relies on, checked through the official client."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from tests.fakekube import FakeKube, Request
from tests.fakekube.store import field_selector_matches, label_selector_matches, merge_patch


def pod(name: str, *, ns: str = "prod", labels: dict[str, str] | None = None, node: str = "n1") -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, namespace=ns, labels=labels or {"app": "llama"}),
        spec=client.V1PodSpec(node_name=node, containers=[client.V1Container(name="engine", image="vllm")]),
    )


def test_create_get_list_delete(kube_api_client: Any) -> None:
    core = client.CoreV1Api(kube_api_client)
    created = core.create_namespaced_pod("prod", pod("a"))
    assert created.metadata.resource_version
    assert created.metadata.uid
    core.create_namespaced_pod("prod", pod("b", labels={"app": "other"}, node="n2"))
    core.create_namespaced_pod("dev", pod("c", ns="dev"))
    assert core.read_namespaced_pod("a", "prod").spec.node_name == "n1"
    assert [p.metadata.name for p in core.list_namespaced_pod("prod").items] == ["a", "b"]
    assert [p.metadata.name for p in core.list_pod_for_all_namespaces(label_selector="app=llama").items] == ["c", "a"]
    assert [p.metadata.name for p in core.list_namespaced_pod("prod", field_selector="spec.nodeName=n2").items] == ["b"]
    core.delete_namespaced_pod("a", "prod")
    with pytest.raises(ApiException) as e:
        core.read_namespaced_pod("a", "prod")
    assert e.value.status == 404


ERROR_CASES = [
    # reading what does not exist: 404 NotFound as a Status
    ("read", 404, "NotFound"),
    # creating a name twice: 409 AlreadyExists
    ("create-twice", 409, "AlreadyExists"),
    # replacing with a stale resourceVersion: 409 Conflict (optimistic concurrency)
    ("stale-put", 409, "Conflict"),
]


@pytest.mark.parametrize(("action", "code", "reason"), ERROR_CASES)
def test_errors_are_status_objects(kube_api_client: Any, action: str, code: int, reason: str) -> None:
    apps = client.AppsV1Api(kube_api_client)
    dep = client.V1Deployment(
        metadata=client.V1ObjectMeta(name="llama", namespace="prod"),
        spec=client.V1DeploymentSpec(
            replicas=2,
            selector=client.V1LabelSelector(match_labels={"app": "llama"}),
            template=client.V1PodTemplateSpec(spec=client.V1PodSpec(containers=[])),
        ),
    )

    def act() -> None:
        if action == "read":
            apps.read_namespaced_deployment("nope", "prod")
        elif action == "create-twice":
            apps.create_namespaced_deployment("prod", dep)
            apps.create_namespaced_deployment("prod", dep)
        else:
            first = apps.create_namespaced_deployment("prod", dep)
            apps.patch_namespaced_deployment("llama", "prod", {"spec": {"replicas": 3}})
            first.spec.replicas = 5
            apps.replace_namespaced_deployment("llama", "prod", first)  # carries the old resourceVersion

    with pytest.raises(ApiException) as e:
        act()
    assert e.value.status == code
    status = json.loads(e.value.body)
    assert status["kind"] == "Status"
    assert status["reason"] == reason
    assert status["code"] == code


def test_replace_with_current_version_and_patch(kube_api_client: Any) -> None:
    coord = client.CoordinationV1Api(kube_api_client)
    lease = client.V1Lease(metadata=client.V1ObjectMeta(name="kvpilot"), spec=client.V1LeaseSpec(holder_identity="a"))
    created = coord.create_namespaced_lease("prod", lease)
    created.spec.holder_identity = "b"
    replaced = coord.replace_namespaced_lease("kvpilot", "prod", created)
    assert replaced.spec.holder_identity == "b"
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    patched = coord.patch_namespaced_lease("kvpilot", "prod", {"spec": {"leaseDurationSeconds": 15}})
    assert patched.spec.lease_duration_seconds == 15
    assert patched.spec.holder_identity == "b"  # a merge patch keeps what it does not mention


def test_cluster_scoped_nodes_and_json_patch(kube_api_client: Any) -> None:
    core = client.CoreV1Api(kube_api_client)
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="n1", labels={"gpu": "h100"})))
    core.patch_node("n1", [{"op": "add", "path": "/spec", "value": {"unschedulable": True}}])  # a list: JSON patch
    node = core.read_node("n1")
    assert node.spec.unschedulable is True
    assert [n.metadata.name for n in core.list_node(label_selector="gpu in (h100,a100)").items] == ["n1"]


def test_pdb_round_trip(kube_api_client: Any) -> None:
    policy = client.PolicyV1Api(kube_api_client)
    pdb = client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name="llama"),
        spec=client.V1PodDisruptionBudgetSpec(
            min_available=1, selector=client.V1LabelSelector(match_labels={"a": "b"})
        ),
    )
    policy.create_namespaced_pod_disruption_budget("prod", pdb)
    assert policy.read_namespaced_pod_disruption_budget("llama", "prod").spec.min_available == 1


def test_watch_replays_from_resource_version_and_streams_changes(fake_kube: FakeKube, kube_api_client: Any) -> None:
    core = client.CoreV1Api(kube_api_client)
    core.create_namespaced_pod("prod", pod("a"))
    listed = core.list_namespaced_pod("prod")
    rv = listed.metadata.resource_version
    core.create_namespaced_pod("prod", pod("b"))  # after the list: the watch must replay it
    events: list[tuple[str, str]] = []
    done = threading.Event()

    def writer() -> None:
        done.wait(10)
        core.patch_namespaced_pod("b", "prod", {"metadata": {"labels": {"app": "llama", "x": "y"}}})
        core.delete_namespaced_pod("a", "prod")

    t = threading.Thread(target=writer)
    t.start()
    w = watch.Watch()
    for event in w.stream(core.list_namespaced_pod, "prod", resource_version=rv, timeout_seconds=10):
        events.append((event["type"], event["object"].metadata.name))
        done.set()
        if len(events) == 3:
            w.stop()
    t.join()
    assert events == [("ADDED", "b"), ("MODIFIED", "b"), ("DELETED", "a")]


def test_watch_from_compacted_version_is_gone(fake_kube: FakeKube, kube_api_client: Any) -> None:
    core = client.CoreV1Api(kube_api_client)
    core.create_namespaced_pod("prod", pod("a"))
    rv = core.list_namespaced_pod("prod").metadata.resource_version
    core.create_namespaced_pod("prod", pod("b"))
    fake_kube.store.compact()
    with pytest.raises(ApiException) as e:
        for _ in watch.Watch().stream(core.list_namespaced_pod, "prod", resource_version=rv, timeout_seconds=5):
            pass
    assert e.value.status == 410


def test_watch_ends_at_timeout_seconds(kube_api_client: Any) -> None:
    # nothing happens; the stream must end by itself once timeoutSeconds pass
    core = client.CoreV1Api(kube_api_client)
    rv = core.list_namespaced_pod("prod").metadata.resource_version
    events = list(watch.Watch().stream(core.list_namespaced_pod, "prod", resource_version=rv, timeout_seconds=1))
    assert events == []


def test_pluggable_subresource(fake_kube: FakeKube, kube_api_client: Any) -> None:
    # the extension hook engineers use for pods/eviction and deployments/scale
    def eviction(kube: FakeKube, req: Request) -> tuple[int, dict[str, Any]]:
        kube.store.delete(req.resource, req.namespace, req.name)
        return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}

    fake_kube.subresources[("pods", "eviction")] = eviction
    core = client.CoreV1Api(kube_api_client)
    core.create_namespaced_pod("prod", pod("a"))
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name="a", namespace="prod"))
    core.create_namespaced_pod_eviction("a", "prod", body)
    assert core.list_namespaced_pod("prod").items == []
    with pytest.raises(ApiException) as e:
        client.AppsV1Api(kube_api_client).read_namespaced_deployment_scale("x", "prod")
    assert e.value.status == 404  # not registered: the fake says so rather than inventing an answer


def test_a_client_that_hung_up_leaves_nothing_on_stderr(fake_kube: FakeKube, kube_api_client: Any, capfd: Any) -> None:
    # A drain test's client gave up after 0.3 s; the handler answered at 2 s into a closed socket and socketserver
    # printed the BrokenPipe traceback to stderr, inside the next test's CliRunner output (its JSON then unreadable).
    answered = threading.Event()

    def slow(kube: FakeKube, req: Request) -> tuple[int, dict[str, Any]]:
        threading.Event().wait(0.5)
        answered.set()
        return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "message": "x" * 1_000_000}

    fake_kube.subresources[("pods", "eviction")] = slow
    core = client.CoreV1Api(kube_api_client)
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name="a", namespace="prod"))
    with pytest.raises(Exception, match=r"(?i)timed? ?out"):
        core.create_namespaced_pod_eviction("a", "prod", body, _request_timeout=0.1)
    assert answered.wait(5)
    threading.Event().wait(0.3)  # the handler's write into the closed connection
    assert "Traceback" not in capfd.readouterr().err


SELECTOR_CASES = [
    ("app=llama", {"app": "llama"}, True),  # equality
    ("app==llama", {"app": "other"}, False),  # double-equals form
    ("app!=llama", {}, True),  # != holds when the key is absent
    ("tier in (a, b),app", {"tier": "b", "app": "x"}, True),  # set-based plus existence
    ("tier notin (a)", {"tier": "a"}, False),  # notin
    ("!canary", {"canary": "1"}, False),  # non-existence
]


@pytest.mark.parametrize(("selector", "labels", "expected"), SELECTOR_CASES)
def test_label_selectors(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert label_selector_matches(selector, labels) is expected


def test_field_selector_and_merge_patch() -> None:
    obj = {"metadata": {"name": "a"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}
    assert field_selector_matches("spec.nodeName=n1,status.phase!=Failed", obj)
    assert not field_selector_matches("metadata.name=b", obj)
    # null deletes a key; nested maps merge; lists are replaced
    assert merge_patch({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"b": None, "d": 3}, "l": [2]}) == {
        "a": {"c": 2, "d": 3},
        "l": [2],
    }
