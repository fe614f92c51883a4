"""Kubernetes pod discovery: which pods become which targets, and list+watch against the fake API server."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from collector.discovery.kubernetes import KubernetesDiscovery, from_settings, pod_target
from collector.samples import TargetInfo
from tests.fakekube import FakeKube
from tests.helpers.poll import wait_for
from tests.helpers.silent_api import api_answering


def pod_dict(
    name: str = "llama-7d9f-abcde",
    *,
    ns: str = "prod",
    ip: str | None = "10.1.2.3",
    phase: str = "Running",
    ready: str = "True",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    owners: list[dict[str, Any]] | None = None,
    ports: list[int] | None = None,
    terminating: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": ns,
        "labels": {"kvpilot.io/scrape": "true", "app": "llama", **(labels or {})},
        "annotations": annotations or {},
        "ownerReferences": owners or [],
    }
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    container: dict[str, Any] = {"name": "engine", "image": "vllm"}
    if ports is not None:
        container["ports"] = [{"containerPort": p} for p in ports]
    return {
        "metadata": meta,
        "spec": {"nodeName": "gpu-node-1", "containers": [container]},
        "status": {"phase": phase, "podIP": ip, "conditions": [{"type": "Ready", "status": ready}]},
    }


def as_pod(d: dict[str, Any]) -> Any:
    """The V1Pod the client would hand us for this JSON."""
    return client.ApiClient().deserialize(json.dumps(d), "V1Pod", "application/json")


RS_OWNER = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llama-7d9f", "uid": "u", "controller": True}]

POD_CASES = [
    # the default: first container port, /metrics, deployment from the app label
    (
        pod_dict(ports=[8000]),
        TargetInfo("http://10.1.2.3:8000/metrics", "engine", None, "prod", "llama", "llama-7d9f-abcde", "gpu-node-1"),
    ),
    # annotations choose port, path, engine and kind; a path without "/" still makes a valid URL
    (
        pod_dict(
            annotations={
                "kvpilot.io/port": "9400",
                "kvpilot.io/path": "gpu",
                "kvpilot.io/kind": "gpu",
                "kvpilot.io/engine": "dcgm",
            }
        ),
        TargetInfo("http://10.1.2.3:9400/gpu", "gpu", "dcgm", "prod", "llama", "llama-7d9f-abcde", "gpu-node-1"),
    ),
    # owned by a Deployment's ReplicaSet: the Deployment's name, without the template hash
    (
        pod_dict(ports=[8000], owners=RS_OWNER, labels={"pod-template-hash": "7d9f", "app": "x"}),
        TargetInfo("http://10.1.2.3:8000/metrics", "engine", None, "prod", "llama", "llama-7d9f-abcde", "gpu-node-1"),
    ),
    # the deployment annotation wins over owners and labels
    (
        pod_dict(ports=[8000], owners=RS_OWNER, annotations={"kvpilot.io/deployment": "chat"}),
        TargetInfo("http://10.1.2.3:8000/metrics", "engine", None, "prod", "chat", "llama-7d9f-abcde", "gpu-node-1"),
    ),
    # a Ray Serve LLM pod names the prefix before vLLM's names; "" would turn the search for one off
    (
        pod_dict(ports=[8080], annotations={"kvpilot.io/prefix": "ray_"}),
        TargetInfo(
            "http://10.1.2.3:8080/metrics", "engine", None, "prod", "llama", "llama-7d9f-abcde", "gpu-node-1", "ray_"
        ),
    ),
    # IPv6 pod IPs are bracketed in the URL
    (
        pod_dict(ip="fd00::5", ports=[8000]),
        TargetInfo("http://[fd00::5]:8000/metrics", "engine", None, "prod", "llama", "llama-7d9f-abcde", "gpu-node-1"),
    ),
    # not Ready: not scraped (it would fail or report a warming replica)
    (pod_dict(ports=[8000], ready="False"), None),
    # Pending, no IP yet
    (pod_dict(ports=[8000], phase="Pending", ip=None), None),
    # terminating: about to disappear
    (pod_dict(ports=[8000], terminating=True), None),
    # no port anywhere: cannot build a URL
    (pod_dict(), None),
    # a port annotation that is not a port
    (pod_dict(annotations={"kvpilot.io/port": "http"}), None),
    # an unknown kind is refused, not guessed
    (pod_dict(ports=[8000], annotations={"kvpilot.io/kind": "dcgm"}), None),
    # an engine is matched without regard to case, as in the targets file and the API
    (
        pod_dict(ports=[8000], annotations={"kvpilot.io/engine": "vLLM"}),
        TargetInfo("http://10.1.2.3:8000/metrics", "engine", "vllm", "prod", "llama", "llama-7d9f-abcde", "gpu-node-1"),
    ),
    # an engine no adapter reads is refused (logged), not scraped into a target that is only ever down
    (pod_dict(ports=[8000], annotations={"kvpilot.io/engine": "vlm"}), None),
]


@pytest.mark.parametrize(("pod", "expected"), POD_CASES)
def test_pod_target(pod: dict[str, Any], expected: TargetInfo | None) -> None:
    assert pod_target(as_pod(pod)) == expected


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as k:
        yield k


def _expired(kube: FakeKube) -> bool:
    kube.store.expire_watches()
    return True


def pod_requests(kube: FakeKube) -> int:
    """GETs of the pod collection: lists and watches."""
    return sum(1 for method, path in kube.requests if method == "GET" and path.endswith("/pods"))


def pods_of(disc: KubernetesDiscovery) -> list[str]:
    return [t.pod for t in disc.snapshot()]


async def test_list_then_watch_follows_pods(kube: FakeKube) -> None:
    kube.create("pods", pod_dict("a", ports=[8000]))
    kube.create("pods", pod_dict("b", ports=[8000], ready="False"))
    kube.create("pods", pod_dict("c", ports=[8000], labels={"kvpilot.io/scrape": "false"}))  # not selected
    disc = KubernetesDiscovery(kube.api_client(), namespace="prod", watch_timeout_s=30)
    try:
        assert [t.pod for t in await disc.targets()] == ["a"]
        ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
        kube.patch("pods", "b", ready, "prod")  # b turns Ready
        kube.create("pods", pod_dict("d", ports=[8000]))
        kube.delete("pods", "a", "prod")
        wait_for(lambda: pods_of(disc) == ["b", "d"], what="pods b and d")
        assert disc.lists == 1  # all of it through the watch
    finally:
        disc.stop()


async def test_watch_gone_relists(kube: FakeKube) -> None:
    kube.create("pods", pod_dict("a", ports=[8000]))
    disc = KubernetesDiscovery(kube.api_client(), namespace="prod", watch_timeout_s=30)
    try:
        await disc.targets()
        wait_for(lambda: pod_requests(kube) >= 2, what="the list, then the watch")  # the list, then the watch
        # The open watch ends with 410 Gone. The watch's GET is logged before its handler reads the store's epoch,
        # so one expiry can land before the watch is open (seen in CI): expire until the 410 makes it list again.
        wait_for(lambda: _expired(kube) and disc.lists >= 2, what="a relist after the watch expired")
        kube.create("pods", pod_dict("e", ports=[8000]))
        wait_for(lambda: pods_of(disc) == ["a", "e"], what="pods a and e")
    finally:
        disc.stop()


async def test_watch_timeout_resumes_without_relisting(kube: FakeKube) -> None:
    disc = KubernetesDiscovery(kube.api_client(), namespace="prod", watch_timeout_s=1)
    try:
        assert await disc.targets() == []
        # one list; the first watch ended after 1 s, a second began
        wait_for(lambda: pod_requests(kube) >= 3, what="a second watch")
        kube.create("pods", pod_dict("f", ports=[8000]))
        wait_for(lambda: pods_of(disc) == ["f"], what="pod f")
        assert disc.lists == 1
    finally:
        disc.stop()


async def test_api_outage_keeps_known_targets(kube: FakeKube) -> None:
    kube.create("pods", pod_dict("a", ports=[8000]))
    disc = KubernetesDiscovery(kube.api_client(), watch_timeout_s=30, retry_delay_s=0.05)
    try:
        assert [t.pod for t in await disc.targets()] == ["a"]
        kube.stop()  # the API server goes away
        wait_for(lambda: disc.last_error is not None, what="the error recorded")
        assert [t.pod for t in await disc.targets()] == ["a"]
    finally:
        disc.stop()


def test_all_namespaces(kube: FakeKube) -> None:
    kube.create("pods", pod_dict("a", ports=[8000]))
    other = copy.deepcopy(pod_dict("b", ports=[8000]))
    other["metadata"]["namespace"] = "dev"
    kube.create("pods", other)
    disc = KubernetesDiscovery(kube.api_client())
    try:
        disc.start()
        wait_for(
            lambda: [(t.namespace, t.pod) for t in disc.snapshot()] == [("dev", "b"), ("prod", "a")],
            what="dev/b and prod/a",
        )
    finally:
        disc.stop()


@pytest.mark.parametrize("kubeconfig", ["", "apiVersion: v1\nclusters: []\n"])
def test_no_cluster_and_no_usable_kubeconfig_is_a_value_error(
    kubeconfig: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `kvpilot run` with `kind: kubernetes` off a cluster: a ConfigException traceback, exit 1; now the settings
    # error kvpilot run prints in one line ("collector.discovery (kubernetes): ...", exit 2)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    path = tmp_path / "kubeconfig"
    if kubeconfig:
        path.write_text(kubeconfig)
    monkeypatch.setenv("KUBECONFIG", str(path))
    with pytest.raises(ValueError, match=r"^not in a cluster and no usable kubeconfig: Invalid kube-config file"):
        from_settings(object())


def _no_spec(name: str) -> dict[str, Any]:
    pod = pod_dict(name, ports=[8000])
    del pod["spec"]  # what a proxy or a broken API server may hand over; the official client reads it as None
    return pod


# Annotations are anyone's to write who may edit a pod: `'²'.isdigit()` is True and int('²') a ValueError
HOSTILE_PODS = [
    pod_dict("h", ports=[8000], annotations={"kvpilot.io/port": "²"}),
    pod_dict("h", ports=[8000], annotations={"kvpilot.io/port": "８０００"}),  # fullwidth digits: int() reads them
    _no_spec("h"),
]


@pytest.mark.parametrize("hostile", HOSTILE_PODS)
def test_a_hostile_pod_is_not_a_target_and_not_an_error(hostile: dict[str, Any]) -> None:
    assert pod_target(as_pod(hostile)) is None


@pytest.mark.parametrize("where", ["list", "watch"])
async def test_one_hostile_pod_does_not_blind_discovery_to_the_others(kube: FakeKube, where: str) -> None:
    # before: the ValueError ended the list (no targets at all, after 30 s) or the watch; each relist then failed
    # on the same pod, for good: pods created or deleted later were never seen
    kube.create("pods", pod_dict("a", ports=[8000]))
    if where == "list":
        kube.create("pods", HOSTILE_PODS[0])
    disc = KubernetesDiscovery(kube.api_client(), namespace="prod", watch_timeout_s=30, retry_delay_s=0.05)
    try:
        assert [t.pod for t in await disc.targets()] == ["a"]
        if where == "watch":
            kube.create("pods", HOSTILE_PODS[0])
        kube.create("pods", pod_dict("c", ports=[8000]))
        wait_for(lambda: pods_of(disc) == ["a", "c"], what="pod c", timeout_s=10)
        assert disc.last_error is None
    finally:
        disc.stop()


def _http_json(body: object) -> bytes:
    data = json.dumps(body).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data)


def test_a_watch_the_server_ends_at_once_is_not_opened_again_at_once() -> None:
    # before: a server or proxy that answered each watch with an empty 200 was watched again at once, some 20 times
    # a second (client-go's reflector backs off after a "very short watch")
    pods = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "10"}, "items": []}
    watches: list[bytes] = []

    def answer(request: bytes) -> bytes:
        if b"watch=true" in request.split(b"\r\n", 1)[0]:
            watches.append(request)
            return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n"
        return _http_json(pods)

    with api_answering(answer) as api:
        disc = KubernetesDiscovery(api, namespace="prod", watch_timeout_s=30, retry_delay_s=1.0)
        disc.start()
        try:
            wait_for(lambda: watches, what="a watch", timeout_s=10)
            time.sleep(2.5)  # 1 s apart: 3 or 4 watches (before: dozens)
            assert len(watches) <= 4
            assert disc.lists == 1
        finally:
            disc.stop()


def _odd(change: Any) -> dict[str, Any]:
    pod = pod_dict("odd", ports=[8000])
    change(pod)
    return pod


# Objects the client's models refuse to read (fields a real API server requires, so only a proxy, a broken or a
# non-Kubernetes server sends them; tests/fakekube stores what it is given)
UNREADABLE_PODS = {
    "a port named, not numbered": _odd(lambda p: p["spec"]["containers"][0].update(ports=[{"name": "http"}])),
    "a container with no name": _odd(lambda p: p["spec"]["containers"][0].pop("name")),
    "a condition with no status": _odd(lambda p: p["status"]["conditions"][0].pop("status")),
    "an owner with no uid": _odd(lambda p: p["metadata"].update(ownerReferences=[{"kind": "ReplicaSet", "name": "x"}])),
    "an annotation that is a number": _odd(lambda p: p["metadata"].update(annotations={"kvpilot.io/port": 8000})),
    "containers null": _odd(lambda p: p["spec"].update(containers=None)),
}


@pytest.mark.parametrize("where", ["list", "watch"])
@pytest.mark.parametrize("odd", UNREADABLE_PODS.values(), ids=UNREADABLE_PODS.keys())
async def test_a_pod_the_client_cannot_read_is_left_out_and_the_others_are_seen(
    kube: FakeKube, where: str, odd: dict[str, Any]
) -> None:
    # before: the client read the whole list (or event) into its models, which refused it: no list at all, every
    # relist failing on it for good ("no pod list yet (ValidationError: ... V1ContainerPort ...)"); in a watch, the
    # pods created after it were never seen
    kube.create("pods", pod_dict("a", ports=[8000]))
    if where == "list":
        kube.create("pods", odd)
    disc = KubernetesDiscovery(kube.api_client(), namespace="prod", watch_timeout_s=30, retry_delay_s=0.05)
    try:
        assert [t.pod for t in await disc.targets()] == ["a"]
        if where == "watch":
            wait_for(lambda: pod_requests(kube) >= 2, what="the list, then the watch")
            kube.create("pods", odd)
        kube.create("pods", pod_dict("c", ports=[8000]))
        wait_for(lambda: pods_of(disc) == ["a", "c"], what="pod c", timeout_s=10)
        kube.delete("pods", "odd", "prod")
        kube.delete("pods", "a", "prod")
        wait_for(lambda: pods_of(disc) == ["c"], what="pod a gone", timeout_s=10)
        assert disc.last_error is None
        assert disc.lists == 1
    finally:
        disc.stop()


def test_a_pod_ip_that_is_not_an_ip_is_not_a_target() -> None:
    # in the URL, "/" or ":" would have picked another host, port or path than the pod's
    for ip in ("10.0.0.9:9999/x#", "evil.example/a", "fe80::1%eth0/x"):
        assert pod_target(as_pod(pod_dict(ip=ip, ports=[8000]))) is None
    assert pod_target(as_pod(pod_dict(ip="fd00::1", ports=[8000]))).url == "http://[fd00::1]:8000/metrics"


NOT_POD_LISTS = [{"kind": "Status", "apiVersion": "v1", "status": "Success"}, {"kind": "PodList", "items": None}, [1]]


@pytest.mark.parametrize("body", NOT_POD_LISTS)
def test_a_200_answer_that_is_not_a_pod_list_keeps_the_known_targets(body: Any) -> None:
    # each pod is read on its own since 6965846; an answer with no list of items read as an empty list there, so a
    # proxy's 200 forgot every target (the client's PodList model had refused it, keeping them)
    known = {("prod", "a"): pod_target(as_pod(pod_dict("a", ports=[8000])))}
    with api_answering(_http_json(body)) as api:
        disc = KubernetesDiscovery(api, namespace="prod")
        disc._pods = dict(known)
        with pytest.raises(ValueError, match="not a PodList"):
            disc._relist()
        assert disc._pods == known
