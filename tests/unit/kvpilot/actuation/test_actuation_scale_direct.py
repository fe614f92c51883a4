"""Direct actuation through deployments/scale, with the official kubernetes client against the fake API server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from kvpilot.actuation.scale import ActuationError, make_actuator
from tests.fakekube.scale import ScaleSubresource, deployment, install_scale
from tests.fakekube.server import FakeKube
from tests.helpers.silent_api import api_answering, kvpilot_run_actuation
from tests.unit.scaler.keda.harness import decision


@dataclass
class Cluster:
    kube: FakeKube
    scale: ScaleSubresource
    apps: Any

    def replicas(self, name: str = "chat") -> int:
        return int(self.kube.get("deployments", name, "llm")["spec"]["replicas"])

    def writes(self) -> int:
        return sum(1 for method, path in self.kube.requests if method in ("PUT", "PATCH") and path.endswith("/scale"))


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    kube = FakeKube().start()
    api = kube.api_client()
    try:
        scale = install_scale(kube)
        kube.create("deployments", deployment("chat", "llm", replicas=2), namespace="llm")
        yield Cluster(kube, scale, client.AppsV1Api(api))
    finally:
        api.close()
        kube.stop()


SCALE_CASES = [
    # up to desired + warm pool, in one read and one write
    (5, 2, True, 7, True),
    # warm pool left out on request
    (5, 2, False, 5, True),
    # down
    (1, 0, True, 1, True),
    # already there: read only, no write
    (2, 0, True, 2, False),
]


@pytest.mark.parametrize(("desired", "warm", "include_warm", "expected", "writes"), SCALE_CASES)
def test_direct_scales_through_the_scale_subresource(
    cluster: Cluster, desired: int, warm: int, include_warm: bool, expected: int, writes: bool
) -> None:
    actuator = make_actuator("direct", apps=cluster.apps, include_warm_pool=include_warm)
    result = actuator.apply(decision("llm/chat", desired=desired, warm=warm))
    assert cluster.replicas() == expected
    outcome = (result.previous_replicas, result.target_replicas, result.applied, result.attempts)
    assert outcome == (2, expected, writes, 1)
    assert cluster.writes() == int(writes)


def test_conflict_rereads_and_retries_keeping_the_other_writers_change(cluster: Cluster) -> None:
    # another writer (kubectl label, the HPA) lands between our read and our write
    cluster.scale.before_next_write(
        lambda: cluster.kube.patch("deployments", "chat", {"metadata": {"labels": {"touched": "yes"}}}, "llm")
    )
    result = make_actuator("direct", apps=cluster.apps).apply(decision("llm/chat", desired=6))
    assert (result.applied, result.attempts, cluster.replicas()) == (True, 2, 6)
    assert cluster.kube.get("deployments", "chat", "llm")["metadata"]["labels"]["touched"] == "yes"
    assert cluster.writes() == 2  # the first write was refused with 409


def test_conflict_by_someone_scaling_is_resolved_against_the_fresh_read(cluster: Cluster) -> None:
    # someone else scales to 9 in between: the retry re-reads 9 and still writes kvpilot's number
    cluster.scale.before_next_write(lambda: cluster.kube.patch("deployments", "chat", {"spec": {"replicas": 9}}, "llm"))
    result = make_actuator("direct", apps=cluster.apps).apply(decision("llm/chat", desired=4))
    assert (result.previous_replicas, result.attempts, cluster.replicas()) == (9, 2, 4)


def test_endless_conflicts_give_up_with_a_retryable_error_naming_the_cause(cluster: Cluster) -> None:
    for i in range(10):
        cluster.scale.before_next_write(
            lambda i=i: cluster.kube.patch("deployments", "chat", {"metadata": {"labels": {"n": str(i)}}}, "llm")
        )
    actuator = make_actuator("direct", apps=cluster.apps, max_attempts=3)
    with pytest.raises(ActuationError, match="still conflicting after 3 attempts") as raised:
        actuator.apply(decision("llm/chat", desired=6))
    assert raised.value.retryable
    assert cluster.replicas() == 2


def test_missing_deployment_is_a_permanent_error_naming_it(cluster: Cluster) -> None:
    with pytest.raises(ActuationError, match=r"llm/gone: deployment not found \(404\)") as raised:
        make_actuator("direct", apps=cluster.apps).apply(decision("llm/gone", desired=3))
    assert not raised.value.retryable


def test_scale_subresource_refuses_negative_replicas(cluster: Cluster) -> None:
    # the fake keeps the API server's validation, so a bad write cannot pass silently
    body = {"metadata": {"name": "chat", "namespace": "llm"}, "spec": {"replicas": -1}}
    with pytest.raises(client.ApiException) as raised:
        cluster.apps.replace_namespaced_deployment_scale("chat", "llm", body)
    assert raised.value.status == 422


@contextmanager
def _answering(answer: bytes | None) -> Iterator[Any]:
    """An AppsV1Api whose API server takes every request and answers ``answer`` (raw HTTP), or never answers."""
    with api_answering(answer) as api:
        yield client.AppsV1Api(api)


def _http(body: bytes, content_type: str = "application/json") -> bytes:
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def test_an_api_server_that_never_answers_is_a_retryable_error_in_time() -> None:
    # before: the client waited for ever, and the actuation pass with it (no later scaling, no drain request)
    with _answering(None) as apps:
        done: list[BaseException | None] = []

        def apply() -> None:
            try:
                make_actuator("direct", apps=apps, request_timeout_s=0.5).apply(decision("llm/chat", desired=3))
                done.append(None)
            except BaseException as e:  # reported below
                done.append(e)

        worker = threading.Thread(target=apply, daemon=True)
        worker.start()
        worker.join(20)  # urllib3 tries a read up to 4 times: 2 s
        assert done, "still waiting for the API server after 20 s"
        assert isinstance(done[0], ActuationError)
        assert done[0].retryable
        assert "read deployments/scale of llm/chat: " in str(done[0])


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (_http(b"<html>bad gateway</html>", "text/html"), "ValidationError"),  # a proxy's page
        (_http(b'{"kind": "PodList", "items": [1, 2]}'), "no spec in the answer"),  # another kind
        (_http(b'{"kind": "Scale", "spec": {"replicas": "many"}}'), "ValidationError"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b'{"kind":"Sc', "IncompleteRead"),  # cut
    ],
)
def test_a_garbled_answer_is_a_retryable_error_naming_the_deployment(answer: bytes, words: str) -> None:
    # before: ValidationError, AttributeError, ProtocolError out of apply: a traceback each tick, and the
    # deployments after this one in the pass were not scaled
    with _answering(answer) as apps, pytest.raises(ActuationError, match=words) as raised:
        make_actuator("direct", apps=apps).apply(decision("llm/chat", desired=3))
    assert raised.value.retryable
    assert str(raised.value).startswith("read deployments/scale of llm/chat: ")
    assert len(str(raised.value)) < 400


def _answer(status: str, body: bytes = b"{}", headers: str = "") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{headers}"
    return head.encode() + b"Connection: close\r\n\r\n" + body


def _scale(replicas: int) -> bytes:
    body = {"kind": "Scale", "metadata": {"name": "chat", "namespace": "llm", "resourceVersion": "7"}}
    return _answer("200 OK", json.dumps(body | {"spec": {"replicas": replicas}}).encode())


def _in_a_thread(apply: Callable[[], Any], within_s: float) -> Any:
    done: list[Any] = []

    def run() -> None:
        try:
            done.append(apply())
        except BaseException as e:  # reported by the caller
            done.append(e)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(within_s)
    assert done, f"still scaling after {within_s} s"
    return done[0]


def test_kvpilot_run_does_not_wait_out_a_long_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 429 asking to wait 30 s, past what one scaling call may wait (request_timeout_s, 10 s), is a retryable error
    naming the deployment and the wait, at once; on 98c4c42 urllib3 waited it out three times: 90 s for one call,
    the pass (every later deployment, every drain request) held with it."""
    asked: list[bytes] = []

    def too_many(request: bytes) -> bytes:
        asked.append(request.split(b" ", 1)[0])
        return _answer("429 Too Many Requests", headers="Retry-After: 30\r\n")

    with api_answering(too_many) as api:
        actuation = kvpilot_run_actuation(api, monkeypatch, scaler={"mode": "direct"})
        started = time.monotonic()
        error = _in_a_thread(lambda: actuation._scaler.apply(decision("llm/chat", desired=3)), within_s=20)
        took = time.monotonic() - started
    assert isinstance(error, ActuationError), error
    assert error.retryable
    assert str(error).startswith("read deployments/scale of llm/chat: the API server asks to wait 30 s (HTTP 429")
    assert "retried next pass" in str(error)
    assert took < 5  # one request, no wait; was 90 s
    assert asked == [b"GET"]


def test_a_short_retry_after_is_waited_out_within_the_call() -> None:
    # an API server shedding load (API Priority and Fairness) asks for a second: the scaling still happens this pass
    answers = iter([_answer("429 Too Many Requests", headers="Retry-After: 1\r\n"), _scale(2), _scale(3)])
    with api_answering(lambda _: next(answers), retries=False) as api:
        started = time.monotonic()
        result = make_actuator("direct", apps=client.AppsV1Api(api)).apply(decision("llm/chat", desired=3))
        took = time.monotonic() - started
    assert (result.previous_replicas, result.target_replicas, result.applied) == (2, 3, True)
    assert 0.9 < took < 5


@pytest.mark.parametrize(
    ("retry_after", "words"),
    [
        ("30", "asks to wait 30 s (HTTP 503, Retry-After), more than the"),
        ("0", "still asks to wait after 4 tries"),  # a server that keeps saying "now": tried a bounded number of times
        ("soon", "HTTP 503 Service Unavailable"),  # unreadable: an ordinary retryable error
    ],
)
def test_a_503_asking_to_wait_is_bounded_too(retry_after: str, words: str) -> None:
    asked: list[bytes] = []

    def unavailable(request: bytes) -> bytes:
        asked.append(request)
        return _answer("503 Service Unavailable", headers=f"Retry-After: {retry_after}\r\n")

    with api_answering(unavailable, retries=False) as api:
        actuator = make_actuator("direct", apps=client.AppsV1Api(api), request_timeout_s=2.0)
        error = _in_a_thread(lambda: actuator.apply(decision("llm/chat", desired=3)), within_s=10)
    assert isinstance(error, ActuationError), error
    assert error.retryable
    assert words in str(error)
    assert len(asked) <= 4
