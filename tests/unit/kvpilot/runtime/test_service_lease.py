"""Leader election over a coordination.k8s.io/v1 Lease, through the official client against the in-process fake
API server (tests/fakekube: real HTTP, 404 when absent, 409 on create races and stale resourceVersions)."""

from __future__ import annotations

import copy
import datetime as dt
import socket
import time

import pytest
from kubernetes import client

from collector.clock import VirtualClock
from kvpilot.runtime.lease import LeaseElector, Leases
from kvpilot.runtime.wiring import build_elector, lease_call_timeout_s
from kvpilot.settings import load_settings
from tests.fakekube import FakeKube


def _elector(kube: FakeKube, clock: VirtualClock, who: str) -> LeaseElector:
    api = Leases(kube.api_client())
    return LeaseElector(api, name="kvpilot-leader", namespace="kv", identity=who, clock=clock, lease_duration_s=15)


def _lease(kube: FakeKube) -> dict:
    return kube.get("leases", "kvpilot-leader", namespace="kv")


def test_one_leader_then_takeover_after_expiry(kube: FakeKube, clock: VirtualClock) -> None:
    a, b = _elector(kube, clock, "a"), _elector(kube, clock, "b")
    assert a.try_acquire_or_renew()  # creates the Lease
    assert not b.try_acquire_or_renew()  # held and fresh: b follows
    for _ in range(5):  # a renews within the duration; b never gets it
        clock.advance(5)
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    clock.advance(16)  # a stopped renewing (crashed): the Lease expires
    assert b.try_acquire_or_renew()
    spec = _lease(kube)["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"], spec["leaseDurationSeconds"]) == ("b", 1, 15)
    renewed = dt.datetime.fromisoformat(spec["renewTime"].replace("Z", "+00:00")).timestamp()
    assert renewed == pytest.approx(clock.now(), abs=1e-3)


def test_racing_for_an_expired_lease_has_one_winner(kube: FakeKube, clock: VirtualClock) -> None:
    old, a, b = _elector(kube, clock, "old"), _elector(kube, clock, "a"), _elector(kube, clock, "b")
    old.try_acquire_or_renew()
    assert not a.try_acquire_or_renew()  # a and b read old's renewal
    assert not b.try_acquire_or_renew()
    clock.advance(20)
    stale = b._api.read_namespaced_lease("kvpilot-leader", "kv")
    b._api.read_namespaced_lease = lambda name, ns: copy.deepcopy(stale)  # b read before a wrote
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # its write carries the old resourceVersion: 409 from the server
    assert _lease(kube)["spec"]["holderIdentity"] == "a"


def test_leader_keeps_leading_through_a_short_api_outage_then_steps_down(kube: FakeKube, clock: VirtualClock) -> None:
    a = _elector(kube, clock, "a")
    assert a.try_acquire_or_renew()
    a._api = Leases(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))  # gone
    a._api.api_client.configuration.retries = False
    clock.advance(10)
    assert a.try_acquire_or_renew()  # within its lease: nobody else can hold it yet
    clock.advance(6)
    assert not a.try_acquire_or_renew()  # its lease would have expired: step down before another takes over


def test_a_round_says_the_holder_it_read_or_why_it_could_not_read(kube: FakeKube, clock: VirtualClock) -> None:
    """What the service's split-store warning reads (review G F7): another holder only when a read named one."""
    from kubernetes.client.exceptions import ApiException

    a, b = _elector(kube, clock, "a"), _elector(kube, clock, "b")
    assert a.try_acquire_or_renew()
    assert (a.holder_seen, a.lease_failure) == (None, None)
    assert not b.try_acquire_or_renew()
    assert (b.holder_seen, b.lease_failure) == ("a", None)

    def forbidden(name: str, namespace: str) -> dict:
        raise ApiException(status=403, reason="Forbidden")

    b._api.read_namespaced_lease = forbidden  # type: ignore[method-assign]
    assert not b.try_acquire_or_renew()
    assert (b.holder_seen, b.lease_failure) == (None, "HTTP 403 Forbidden")
    b._api = Leases(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))  # gone
    b._api.api_client.configuration.retries = False
    assert not b.try_acquire_or_renew()
    assert b.holder_seen is None
    assert b.lease_failure


def test_release_hands_over_at_once(kube: FakeKube, clock: VirtualClock) -> None:
    a, b = _elector(kube, clock, "a"), _elector(kube, clock, "b")
    a.try_acquire_or_renew()
    a.release()
    assert not a.leader
    assert b.try_acquire_or_renew()  # no waiting for expiry


async def test_two_replicas_one_actuates_and_the_other_takes_over(
    kube: FakeKube, clock: VirtualClock, tmp_path
) -> None:
    # Two kvpilot services share a store and a Lease: both detect, only the holder requests drains; when the
    # holder shuts down it releases the Lease and the other one takes over at its next renewal.
    from store import repo
    from store.db import transaction
    from tests.helpers.poll import until
    from tests.unit.kvpilot.fleet_double import ScriptedFleet, make_service, run_ticks

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    two_nodes = (("chat-0", "n0"), ("chat-1", "n1"))
    electors = {who: _elector(kube, clock, who) for who in ("a", "b")}
    services = {}
    for who, elector in electors.items():
        fleet = ScriptedFleet(clock, xid=79, replicas=two_nodes)
        services[who] = make_service(url, clock, fleet, leadership=elector)
    for service, restored, _ in services.values():
        await service.start(restored)
    await until(lambda: sum(e.leader for e in electors.values()) == 1, what="one leader elected")
    for _ in range(4):
        for service, _, timer in services.values():
            await run_ticks(service, timer, 1)
            # its Lease round done too: the other timer's advance moves the shared clock, and a renewal still in
            # flight then would come one round late and let the Lease expire
            await until(lambda t=timer: t.asleep("lease"), what="the Lease task asleep")
    leader = next(w for w, e in electors.items() if e.leader)
    follower = "b" if leader == "a" else "a"

    def requested() -> list:
        with transaction(services[leader][0].sessions) as s:
            return list(repo.list_drains(session=s).items)

    await until(lambda: len(requested()) > 0, what="the leader's actuator requested the drain")
    drains = requested()
    assert [(d.node, d.requested_by) for d in drains] == [("n0", "kvpilot")]  # one request, not one per replica
    assert [f.kind for f in services[follower][0].snapshot().findings] == ["stuck_gpu"]  # the follower detects too
    assert not services[follower][0].health().leader

    services[leader][0].stop.set()
    await services[leader][0].wait()  # releases the Lease
    service, _, timer = services[follower]
    await run_ticks(service, timer, 2)  # its next renewal finds the Lease free
    await until(lambda: electors[follower].leader, what="the follower took over")
    assert kube.get("leases", "kvpilot-leader", namespace="kv")["spec"]["holderIdentity"] == follower
    service.stop.set()
    await service.wait()


async def test_ticks_advance_time_only_while_the_loop_sleeps(kube: FakeKube, clock: VirtualClock, tmp_path) -> None:
    # The Lease task sleeps on the same timer as the loop: time advanced while a tick still runs (a slow scrape)
    # moves the shared clock past renewals the other instance's Lease task has not made yet (the flake above
    # came from a helper that advanced on any sleeper).
    import asyncio

    from tests.helpers.poll import until
    from tests.unit.kvpilot.fleet_double import ScriptedFleet, make_service, run_ticks

    fleet = ScriptedFleet(clock, gate=asyncio.Event())
    service, restored, timer = make_service(
        f"sqlite:///{tmp_path / 's.db'}", clock, fleet, leadership=_elector(kube, clock, "a")
    )
    await service.start(restored)
    await until(lambda: fleet.started.is_set() and timer.asleep("lease"), what="a tick in its scrape, the Lease asleep")
    before = clock.now()
    ticking = asyncio.create_task(run_ticks(service, timer, 1))
    for _ in range(50):
        await asyncio.sleep(0.001)
    assert clock.now() == before  # the tick has not ended: no time passes
    assert not ticking.done()
    fleet.gate.set()
    await ticking
    assert service.loop.tick_count >= 1
    assert timer.asleep("control-loop")
    service.stop.set()
    await service.wait()


def test_a_leader_whose_rounds_stop_follows_once_its_lease_expires(kube: FakeKube, clock: VirtualClock) -> None:
    # A round that hangs (an API server that stopped answering) ends no sooner than its calls' timeout: meanwhile
    # the Lease it last renewed expires and another instance may take it, so leading is read against that renewal,
    # up to its renew deadline (12.5 s of the 15 s lease: a follower whose clock runs ahead may take it early).
    a, b = _elector(kube, clock, "a"), _elector(kube, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b reads a's write (a Lease is counted from when its renewal was read)
    clock.advance(12.4)
    assert a.leader
    clock.advance(0.2)  # no round since: the renewal 12.6 s ago is past its deadline; the Lease not yet expired
    assert not a.leader
    assert not b.try_acquire_or_renew()
    clock.advance(2.5)  # 15.1 s: expired
    assert not a.leader
    assert b.try_acquire_or_renew()


def test_a_lease_call_to_an_api_server_that_never_answers_fails_at_its_timeout() -> None:
    with socket.socket() as silent:  # accepts (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        config = client.Configuration(host=f"http://127.0.0.1:{silent.getsockname()[1]}")
        config.retries = False
        api = Leases(client.ApiClient(config), timeout_s=0.3)
        t0 = time.monotonic()
        with pytest.raises(Exception, match=r"(?i)timed out"):
            api.read_namespaced_lease("kvpilot-leader", "kv")
        assert time.monotonic() - t0 < 3


def test_kvpilot_run_bounds_each_lease_call_within_the_lease() -> None:
    assert lease_call_timeout_s(15) == 5
    elector = build_elector(
        load_settings(ha={"enabled": True, "lease_duration_s": 6, "renew_every_s": 2}),
        VirtualClock(0),
        client.ApiClient(),
    )
    assert elector._api.timeout_s == 2


async def test_only_the_lease_holder_writes_findings(kube: FakeKube, clock: VirtualClock, tmp_path) -> None:
    # Two replicas on one store whose views differ (scrape timing at a finding's edges; here one sees an XID the
    # other does not): every replica wrote its findings, each closing what the other's list lacked, so the finding
    # flapped closed/open a tick and every reopening was a new episode that dropped the operator's acknowledgement.
    from store import repo
    from store.db import transaction
    from tests.helpers.poll import until
    from tests.unit.kvpilot.fleet_double import ScriptedFleet, make_service, run_ticks

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    electors = {who: _elector(kube, clock, who) for who in ("a", "b")}
    fleets = {"a": ScriptedFleet(clock, xid=79), "b": ScriptedFleet(clock, xid=79)}
    services = {who: make_service(url, clock, fleets[who], leadership=e) for who, e in electors.items()}
    for service, restored, _ in services.values():
        await service.start(restored)
    await until(lambda: sum(e.leader for e in electors.values()) == 1, what="one leader elected")

    async def tick_both(n: int) -> None:
        for _ in range(n):
            for service, _, timer in services.values():
                await run_ticks(service, timer, 1)
                await until(lambda t=timer: t.asleep("lease"), what="the Lease task asleep")

    def rows() -> list:
        with transaction(services["a"][0].sessions) as s:
            return list(repo.list_findings(session=s).items)

    await tick_both(4)
    await until(lambda: len(rows()) == 1, what="the finding stored")
    with transaction(services["a"][0].sessions) as s:
        repo.acknowledge_finding(session=s, finding_id=rows()[0].id, by="ops", note="", now=clock.now())
    leader = next(w for w, e in electors.items() if e.leader)
    fleets["b" if leader == "a" else "a"].xid = None  # the follower no longer sees it
    await tick_both(4)
    assert [(r.state, r.acknowledged_by) for r in rows()] == [("acknowledged", "ops")]
    for service, _, _ in services.values():
        service.stop.set()
        await service.wait()
