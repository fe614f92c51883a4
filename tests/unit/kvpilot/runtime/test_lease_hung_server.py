"""A Lease call to an API server that accepts and never answers fails once, within its timeout: the election's timing
(``wiring.lease_call_timeout_s``: a third of the lease, so that a round of a read and a write that both time out
ends inside the lease) relies on it. On d1ee2b5 urllib3's default retries sent it four times (2.0 s for a 0.5 s
timeout, over four connections); the kept connection of c7a6cb4 sends it once."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from kubernetes import client
from urllib3.exceptions import HTTPError

from kvpilot.runtime.lease import Leases
from tests.helpers.poll import wait_for
from tests.helpers.raw_servers import Silent


@pytest.fixture
def silent_server() -> Iterator[tuple[str, list[socket.socket]]]:
    server = Silent()  # reads nothing, answers nothing
    try:
        yield server.url, server.held
    finally:
        server.close()


def test_a_call_to_a_silent_api_server_fails_once_within_its_timeout(
    silent_server: tuple[str, list[socket.socket]],
) -> None:
    url, accepted = silent_server
    api = Leases(client.ApiClient(client.Configuration(host=url)), timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises((OSError, HTTPError)):  # a timeout here, urllib3's MaxRetryError on d1ee2b5
        api.read_namespaced_lease("l", "kv")
    assert time.monotonic() - started < 1.5  # one timeout and some slack on a loaded machine; four were 2.0 s
    # Every connection the call made is in the listener's queue by now, not necessarily accepted yet: one more,
    # of our own, accepted after them all (in order) says the accept thread has taken them.
    with socket.create_connection(("127.0.0.1", urlsplit(url).port or 0), timeout=5) as marker:
        mine = marker.getsockname()
        wait_for(lambda: any(c.getpeername() == mine for c in list(accepted)), what="our own connection accepted")
    assert len(accepted) == 2  # the call's one connection, then ours


def test_kvpilot_runs_lease_calls_through_urllib3_once_within_their_timeout(
    silent_server: tuple[str, list[socket.socket]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the configuration needs urllib3 (here socket options), `kvpilot run`'s Leases call once: on 4164289
    urllib3's default retries made a silent API server cost four timeouts (2.0 s for 0.5 s), past the lease."""
    from kubernetes import config as kube_config

    from collector.clock import VirtualClock
    from kvpilot.runtime.wiring import build_elector
    from kvpilot.settings import load_settings

    url, accepted = silent_server
    configuration = client.Configuration(host=url)
    configuration.socket_options = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]  # only urllib3 applies these

    def load_incluster_config() -> None:
        client.Configuration.set_default(configuration)

    monkeypatch.setattr(kube_config, "load_incluster_config", load_incluster_config)
    default = client.Configuration.get_default_copy()
    try:
        settings = load_settings(ha={"enabled": True, "lease_duration_s": 1.5, "renew_every_s": 0.5})
        elector = build_elector(settings, VirtualClock(0))
        started = time.monotonic()
        with pytest.raises((OSError, HTTPError)):
            elector._api.read_namespaced_lease("l", "kv")
        assert time.monotonic() - started < 1.5  # one 0.5 s timeout and slack; four were 2.0 s
    finally:
        client.Configuration.set_default(default)
    with socket.create_connection(("127.0.0.1", urlsplit(url).port or 0), timeout=5) as marker:
        mine = marker.getsockname()
        wait_for(lambda: any(c.getpeername() == mine for c in list(accepted)), what="our own connection accepted")
    assert len(accepted) == 2  # the call's one connection, then ours
