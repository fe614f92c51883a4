"""A Kubernetes API server on loopback that takes every request and answers with the given raw HTTP bytes, or never
answers: the official client against a hung or garbled API server (tests/fakekube's always answers well)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import client

from tests.helpers.raw_servers import Silent


class _Answering(Silent):
    """Reads each request and sends ``answer`` (or what ``answer(request)`` returns), then closes; None: holds the
    connection open and says nothing (``Silent``)."""

    def __init__(self, answer: bytes | Callable[[bytes], bytes] | None) -> None:
        self.answer = answer
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        super().serve(conn)
        answer = self.answer
        if answer is not None:
            request = conn.recv(65536)
            conn.sendall(answer(request) if callable(answer) else answer)
            conn.close()


@contextlib.contextmanager
def api_answering(
    answer: bytes | Callable[[bytes], bytes] | None = None, *, retries: bool | None = None
) -> Iterator[client.ApiClient]:
    """An ApiClient whose API server reads each request and sends ``answer`` (or what ``answer(request)`` returns)
    then closes, or (None) holds the connection open and says nothing. ``retries=False``: one try a request, as
    ``kvpilot run`` builds its clients for Leases and direct scaling (None: urllib3's default retries)."""
    server = _Answering(answer)
    config = client.Configuration()
    config.host = server.url
    config.retries = retries
    api = client.ApiClient(config)
    try:
        yield api
    finally:
        api.close()
        server.close()


def kvpilot_run_actuation(api: client.ApiClient, monkeypatch: Any, **settings: Any) -> Any:
    """``build_actuation`` as ``kvpilot run`` calls it (its own clients, from the in-cluster configuration), with the
    in-cluster configuration pointing at ``api``'s server: what ``kvpilot run`` would do against it."""
    from kubernetes import config as kube_config

    from collector.clock import VirtualClock
    from kvpilot.runtime.sources import Sources
    from kvpilot.runtime.targets import StaticTargets
    from kvpilot.runtime.wiring import build_actuation
    from kvpilot.settings import load_settings

    host = api.configuration.host

    def load_incluster_config() -> None:
        client.Configuration.set_default(client.Configuration(host=host))

    monkeypatch.setattr(kube_config, "load_incluster_config", load_incluster_config)
    default = client.Configuration.get_default_copy()
    try:
        return build_actuation(load_settings(**settings), Sources(None, StaticTargets([])), None, VirtualClock(0))
    finally:
        client.Configuration.set_default(default)
