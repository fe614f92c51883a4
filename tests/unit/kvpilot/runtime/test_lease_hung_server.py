"""A Lease call to an API server that accepts and never answers fails once, within its timeout: the election's timing
(``wiring.lease_call_timeout_s``: a third of the lease, so that a round of a read and a write that both time out
ends inside the lease) relies on it. On d1ee2b5 urllib3's default retries sent it four times (2.0 s for a 0.5 s
timeout, over four connections); the kept connection of c7a6cb4 sends it once."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from kubernetes import client
from urllib3.exceptions import HTTPError

from kvpilot.runtime.lease import Leases
from tests.helpers.poll import wait_for


@pytest.fixture
def silent_server() -> Iterator[tuple[str, list[socket.socket]]]:
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn)  # read nothing, answer nothing

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        listener.close()
        for conn in accepted:
            conn.close()


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
