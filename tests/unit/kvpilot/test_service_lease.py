"""Leader election over a Lease with the semantics kvpilot relies on (404 when absent, 409 on create races and
on stale resourceVersions). The API double below keeps exactly those; tests/fakekube replaces it when it lands."""

from __future__ import annotations

import copy
import datetime as dt

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from collector.clock import VirtualClock
from kvpilot.lease import LeaseElector


class LeaseApi:
    """CoordinationV1Api's Lease calls over one in-memory object store with resourceVersions."""

    def __init__(self) -> None:
        self.leases: dict[tuple[str, str], client.V1Lease] = {}
        self.version = 0
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise ApiException(status=503, reason="Service Unavailable")

    def read_namespaced_lease(self, name: str, namespace: str) -> client.V1Lease:
        self._check()
        if (namespace, name) not in self.leases:
            raise ApiException(status=404, reason="Not Found")
        return copy.deepcopy(self.leases[(namespace, name)])

    def create_namespaced_lease(self, namespace: str, body: client.V1Lease) -> client.V1Lease:
        self._check()
        key = (namespace, body.metadata.name)
        if key in self.leases:
            raise ApiException(status=409, reason="AlreadyExists")
        self.version += 1
        body = copy.deepcopy(body)
        body.metadata.resource_version = str(self.version)
        self.leases[key] = body
        return body

    def replace_namespaced_lease(self, name: str, namespace: str, body: client.V1Lease) -> client.V1Lease:
        self._check()
        current = self.leases[(namespace, name)]
        if body.metadata.resource_version != current.metadata.resource_version:
            raise ApiException(status=409, reason="Conflict")
        self.version += 1
        body = copy.deepcopy(body)
        body.metadata.resource_version = str(self.version)
        self.leases[(namespace, name)] = body
        return body


@pytest.fixture
def world() -> tuple[LeaseApi, VirtualClock]:
    return LeaseApi(), VirtualClock(1_700_000_000.0)


def _elector(api: LeaseApi, clock: VirtualClock, who: str) -> LeaseElector:
    return LeaseElector(
        api,
        name="kvpilot-leader",
        namespace="kv",
        identity=who,
        clock=clock,  # type: ignore[arg-type]
        lease_duration_s=15,
    )


def test_one_leader_then_takeover_after_expiry(world) -> None:
    api, clock = world
    a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
    assert a.try_acquire_or_renew()  # creates the Lease
    assert not b.try_acquire_or_renew()  # held and fresh: b follows
    for _ in range(5):  # a renews within the duration; b never gets it
        clock.advance(5)
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    clock.advance(16)  # a stopped renewing (crashed): the Lease expires
    assert b.try_acquire_or_renew()
    spec = api.leases[("kv", "kvpilot-leader")].spec
    assert (spec.holder_identity, spec.lease_transitions) == ("b", 1)
    assert isinstance(spec.renew_time, dt.datetime)


def test_racing_for_an_expired_lease_has_one_winner(world) -> None:
    api, clock = world
    old, a, b = _elector(api, clock, "old"), _elector(api, clock, "a"), _elector(api, clock, "b")
    old.try_acquire_or_renew()
    clock.advance(20)
    stale = api.read_namespaced_lease("kvpilot-leader", "kv")
    real_read = api.read_namespaced_lease
    api.read_namespaced_lease = lambda name, ns: copy.deepcopy(stale)  # both read the same version
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # its write carries the old resourceVersion: 409
    api.read_namespaced_lease = real_read
    assert api.leases[("kv", "kvpilot-leader")].spec.holder_identity == "a"


def test_leader_keeps_leading_through_a_short_api_outage_then_steps_down(world) -> None:
    api, clock = world
    a = _elector(api, clock, "a")
    assert a.try_acquire_or_renew()
    api.down = True
    clock.advance(10)
    assert a.try_acquire_or_renew()  # within its lease: nobody else can have it yet
    clock.advance(6)
    assert not a.try_acquire_or_renew()  # its lease would have expired: step down before another takes over
    assert not _elector(api, clock, "b").try_acquire_or_renew()  # a follower cannot campaign while it is down


def test_release_hands_over_at_once(world) -> None:
    api, clock = world
    a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
    a.try_acquire_or_renew()
    a.release()
    assert not a.leader
    assert b.try_acquire_or_renew()  # no waiting for expiry
