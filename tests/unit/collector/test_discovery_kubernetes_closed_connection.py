"""Kubernetes discovery's GET on a pooled connection the API server closed meanwhile (an idle timeout of the server or
of a load balancer in front, racing the next request): sent once more on another connection, quietly. Since
707c40a (urllib3's retries at 0) it cost a failed try, ``retry_delay_s`` and a full relist of the pods."""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
from kubernetes.config import kube_config

from collector.discovery.kubernetes import from_settings


def _pods() -> bytes:
    body = json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}, "items": []})
    return f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()


@contextmanager
def _api_closing_its_first_connection() -> Iterator[tuple[str, list[int]]]:
    """An API server whose first connection answers one request, then closes on reading the next without a byte of
    answer (the idle close racing the client's request); every other connection answers every request. Yields its
    URL and the requests answered per connection."""
    listener = socket.create_server(("127.0.0.1", 0))
    answered: list[int] = []
    threads: list[threading.Thread] = []

    def serve(conn: socket.socket, index: int) -> None:
        with conn:
            buffered = b""
            while True:
                while b"\r\n\r\n" not in buffered:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffered += chunk
                _, buffered = buffered.split(b"\r\n\r\n", 1)  # GETs: no body
                if index == 0 and answered[0] == 1:
                    return  # closed, nothing answered
                answered[index] += 1  # counted before the client can read it
                conn.sendall(_pods())

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            answered.append(0)
            t = threading.Thread(target=serve, args=(conn, len(answered) - 1), daemon=True)
            threads.append(t)
            t.start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", answered
    finally:
        listener.close()


def test_a_get_on_a_connection_the_server_closed_is_sent_again_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with _api_closing_its_first_connection() as (url, answered):
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": url}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
        (tmp_path / "kubeconfig").write_text(json.dumps(kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "kubeconfig"))
        caplog.set_level(logging.DEBUG)
        settings = SimpleNamespace(kubernetes_namespace=None, kubernetes_label_selector="kvpilot.io/scrape=true")
        disc = from_settings(settings)
        assert disc._relist() == "7"
        # the connection went back to the pool; the server closes it as the next list goes out on it. Before:
        # MaxRetryError(ProtocolError('Connection aborted.', RemoteDisconnected(...))): a failed try, 2 s, a relist
        assert disc._relist() == "7"
        assert answered == [1, 1]  # the second list answered on a second connection
    assert [r for r in caplog.records if r.name.startswith("urllib3") and r.levelno >= logging.WARNING] == []
