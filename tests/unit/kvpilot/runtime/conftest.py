"""Fixtures the runtime's Kubernetes-facing tests share (lease, shards): the started fake API server
(``tests/fakekube``) as ``kube`` and a virtual clock; a module that needs its own (a seeded server) defines it. The
kube-state-metrics tests share a loopback Prometheus API (``tests/services/promapi.py``) as ``promapi_fleet``."""

from collections.abc import Iterator

import pytest

from collector.clock import VirtualClock
from tests.fakekube.fixtures import fake_kube as kube  # noqa: F401
from tests.services.promapi import FakeFleet, serve


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(1_700_000_000.0)


@pytest.fixture(scope="module")
def promapi_fleet() -> Iterator[tuple[FakeFleet, str]]:
    """A one-replica fleet behind the loopback Prometheus API, and its URL; a test module's own (module scope)."""
    fleet = FakeFleet(1, per_deployment=1)
    server = serve(fleet)
    try:
        yield fleet, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
