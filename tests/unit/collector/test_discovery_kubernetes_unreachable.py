"""Kubernetes discovery against an API server that does not answer, as an operator first meets it (a kubeconfig whose
server is wrong, the API down): one line that says where and why, not a warning every 2 s after three of urllib3's."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest
from kubernetes.config import kube_config
from prometheus_client import CollectorRegistry, Counter

from collector.discovery import DiscoveryUnavailable
from collector.discovery.kubernetes import KubernetesDiscovery, from_settings
from kvpilot.runtime.loop import ControlLoop
from kvpilot.runtime.stopping import Abandon
from tests.helpers.poll import wait_for
from tests.helpers.silent_api import api_answering

LOGGER = "collector.discovery.kubernetes"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # bound, never listened on, closed: a connection to it is refused


def _failures_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and "pod discovery failed" in r.getMessage()]


def test_a_kubeconfig_whose_server_does_not_answer_is_said_once_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # before: every 2 s, three urllib3 "Retrying (Retry(total=2 ...)) after connection broken by
    # 'NewConnectionError(...)'" warnings, then "pod discovery failed (MaxRetryError: HTTPSConnectionPool(...): Max
    # retries exceeded with url: /api/v1/pods?... (Caused by NewConnectionError(...)))"; for as long as it lasted
    port = _closed_port()
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    (tmp_path / "kubeconfig").write_text(json.dumps(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    # the client read $KUBECONFIG when it was imported
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "kubeconfig"))
    caplog.set_level(logging.INFO)
    disc = from_settings(SimpleNamespace(kubernetes_namespace=None, kubernetes_label_selector="kvpilot.io/scrape=true"))
    disc.retry_delay_s = 0.01
    disc.start()
    try:
        wait_for(lambda: disc.failures >= 20, what="twenty failed tries")
    finally:
        disc.stop()
    assert [r.getMessage() for r in caplog.records if r.name.startswith("urllib3")] == []
    (said,) = _failures_logged(caplog)
    assert f"the Kubernetes API at https://127.0.0.1:{port} does not answer: " in said
    assert "Connection refused" in said
    assert "MaxRetryError" not in said
    assert "HTTPSConnectionPool" not in said
    assert "check the kubeconfig's server" in said


# The raw server closes each connection after its answer, and says so: without "Connection: close" the client kept
# the connection and could send its next try on it before the server's thread, off the CPU on a loaded runner, closed
# it: that try was reset, another failure said between the 503s (the 503 then said again after it).


def _status(code: int, reason: str) -> bytes:
    return f"HTTP/1.1 {code} {reason}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode()


def _pods(resource_version: str) -> bytes:
    body = json.dumps(
        {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": resource_version}, "items": []}
    )
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close"
    return f"{head}\r\n\r\n{body}".encode()


def test_an_api_server_failing_then_back_is_said_once_then_back(caplog: pytest.LogCaptureFixture) -> None:
    # before: one warning per failed try (here five); the return was not said
    lists: list[bytes] = []

    def answer(request: bytes) -> bytes:
        if b"watch=true" in request.split(b"\r\n", 1)[0]:
            return _pods("7")  # a watch that ends at once; the list is what this test counts
        lists.append(request)
        return _status(503, "Service Unavailable") if len(lists) <= 5 else _pods("7")

    caplog.set_level(logging.INFO, logger=LOGGER)
    with api_answering(answer, retries=False) as api:
        disc = KubernetesDiscovery(api, namespace="prod", watch_timeout_s=30, retry_delay_s=0.01)
        disc.start()
        try:
            wait_for(lambda: disc.lists >= 1, what="a list after five failures")
        finally:
            disc.stop()
    said = _failures_logged(caplog)  # the 503 once (a connection the raw server reset is another failure: said too)
    assert [m for m in said if "API error 503" in m][:1] == said[:1]
    assert len([m for m in said if "API error 503" in m]) == 1
    # the first return is the one after the 503s; a connection the raw server reset later (a watch ending at once under
    # load) is another failure and another return, said as such
    back = next(r.getMessage() for r in caplog.records if "works again" in r.getMessage())
    tries = int(back.removeprefix("pod discovery works again after ").split()[0])
    assert tries >= 5
    assert back.endswith(" failed tries: 0 pods listed")


async def test_no_pod_list_yet_is_said_by_the_loop_in_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # before: "discovery failed; scraping the previous 0 targets" and a 12-line traceback ending in a RuntimeError,
    # every tick while the API server did not answer
    with api_answering(_status(503, "Service Unavailable"), retries=False) as api:
        disc = KubernetesDiscovery(api, namespace="prod", retry_delay_s=0.01)
        monkeypatch.setattr(disc._listed, "wait", lambda timeout=None: False)  # not the 30 s the first list gets
        loop = SimpleNamespace(
            discovery=disc,
            _abandon=Abandon(),
            metrics=SimpleNamespace(stage_errors=Counter("errors", "", ["stage"], registry=CollectorRegistry())),
            _targets=[],
        )
        disc.start()
        try:
            wait_for(lambda: disc.last_error is not None, what="a failed list")
            assert await ControlLoop._discover(loop) == []  # type: ignore[arg-type]
        finally:
            disc.stop()
    (said,) = [r for r in caplog.records if r.name == "kvpilot.runtime.loop"]
    assert said.getMessage() == (
        "discovery failed; scraping the previous 0 targets: kubernetes discovery: no pod list yet "
        "(API error 503: Service Unavailable)"
    )
    assert said.exc_info is None
    assert isinstance(DiscoveryUnavailable("x"), RuntimeError)
