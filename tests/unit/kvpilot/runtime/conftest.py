"""Fixtures the runtime's Kubernetes-facing tests share (lease, shards): the started fake API server
(``tests/fakekube``) as ``kube`` and a virtual clock; a module that needs its own (a seeded server) defines it."""

import pytest

from collector.clock import VirtualClock
from tests.fakekube.fixtures import fake_kube as kube  # noqa: F401


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(1_700_000_000.0)
