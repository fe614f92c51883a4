"""Lease campaigns in real time (``kvpilot.runtime.lease.campaign``: rounds and waits in a thread of their own, as
``kvpilot run`` runs them), against the in-process fake API server: shards partitioned, a crashed instance's shard
taken over once its Lease expires, a stop hands everything back at once; the HA elector the same way. The protocol
itself is tested round by round in virtual time (test_shards.py, test_shards_takeover.py, test_service_lease.py).

Timing is read from the Leases' own times (renewTime, acquireTime: the instances' clocks when they wrote), not from
the test's: how late a loaded machine runs the test's polls or the crashed task's cancellation moves neither."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from collector.clock import WallClock
from kvpilot.runtime.lease import LeaseElector, Leases, _epoch, campaign
from tests.fakekube import FakeKube
from tests.helpers.poll import until
from tests.unit.kvpilot.runtime.test_shards_takeover import _coordinator

LEASE_S = 2.0
EVERY_S = 0.3
# A loaded CI's scheduler: how late, at most, a thread runs after it is due (the survivor's round woken just after the
# expiry). Measured 0.051-0.068 s after the expiry at load 7-14 on 2 cores; the bound is a lease, a round and this.
SCHEDULER_SLACK_S = 1.0


def _spec(kube: FakeKube, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = kube.get("leases", name, namespace="kv")["spec"]
    return spec


def _at(spec: dict[str, Any], key: str) -> float:
    """A Lease's MicroTime (renewTime, acquireTime) as epoch seconds."""
    t = _epoch(spec[key])
    assert t is not None, key
    return t


def _holders(kube: FakeKube) -> dict[int, str | None]:
    return {i: kube.get("leases", f"kvpilot-shard-{i}", namespace="kv")["spec"].get("holderIdentity") for i in range(3)}


async def test_shards_in_real_time_partition_survive_a_crash_and_hand_back_on_stop(kube: FakeKube) -> None:
    coordinators = {who: _coordinator(kube, WallClock(), who, LEASE_S) for who in "abc"}
    stops = {who: asyncio.Event() for who in coordinators}
    tasks = {who: asyncio.create_task(c.run(stops[who], every_s=EVERY_S)) for who, c in coordinators.items()}
    await until(lambda: all(len(c.owned) == 1 for c in coordinators.values()), what="one shard each", timeout_s=15)
    names = {t.name for t in threading.enumerate()}
    assert "shards" in names  # the rounds run in their own thread, not on the loop

    crashed = coordinators["c"]
    (lost,) = crashed.owned
    tasks["c"].cancel()  # a crash: nothing released
    await asyncio.gather(tasks["c"], return_exceptions=True)
    assert _holders(kube)[lost] == "c"
    await until(lambda: _holders(kube)[lost] in ("a", "b"), what="the crashed shard taken over", timeout_s=15)
    spec = _spec(kube, f"kvpilot-shard-{lost}")
    # c's last accepted renewal (a round in flight at the crash may renew once more; one after the takeover is
    # refused): the renewTime the survivor read as expired
    renewed = crashed._electors[lost]._renewed_at  # on the monotonic clock: as epoch seconds
    assert renewed is not None
    renewed += time.time() - time.monotonic()
    late = _at(spec, "acquireTime") - (renewed + LEASE_S)
    assert late > 0, f"taken {-late:.3f} s before c's Lease expired"
    # one lease period after c's last renewal, plus at most one round and a loaded machine's scheduling delay
    assert late <= EVERY_S + SCHEDULER_SLACK_S, f"taken {late:.3f} s after c's Lease expired"
    await until(lambda: sum(len(coordinators[w].owned) for w in "ab") == 3, what="held by the survivors", timeout_s=5)

    for who in "ab":
        stops[who].set()
    await asyncio.wait_for(asyncio.gather(tasks["a"], tasks["b"]), 5)
    assert _holders(kube) == {0: None, 1: None, 2: None}  # handed back at once, no waiting for expiry
    assert not any(coordinators[w].owned for w in "ab")


async def test_the_ha_elector_in_real_time_leads_then_releases(kube: FakeKube) -> None:
    electors = [
        LeaseElector(
            Leases(kube.api_client()),
            name="kvpilot-leader",
            namespace="kv",
            identity=who,
            clock=WallClock(),
            lease_duration_s=LEASE_S,
        )
        for who in "ab"
    ]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(e.run(stop, every_s=EVERY_S)) for e in electors]
    await until(lambda: sum(e.leader for e in electors) == 1, what="one leader", timeout_s=10)
    elected = _spec(kube, "kvpilot-leader")
    # renewals keep it (three more, by the same holder, the Lease never changing hands); the other follows
    renewed_by = _at(elected, "renewTime") + 3 * EVERY_S
    await until(lambda: _at(_spec(kube, "kvpilot-leader"), "renewTime") >= renewed_by, what="3 more renewals")
    renewed = _spec(kube, "kvpilot-leader")
    assert (renewed["holderIdentity"], renewed["leaseTransitions"]) == (elected["holderIdentity"], 0)
    assert renewed["acquireTime"] == elected["acquireTime"]
    assert [e.identity for e in electors if e.identity != renewed["holderIdentity"] and e.leader] == []
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert kube.get("leases", "kvpilot-leader", namespace="kv")["spec"].get("holderIdentity") is None
    assert not any(e.leader for e in electors)


async def test_a_failing_round_ends_the_campaign_with_its_error_and_releases_nothing() -> None:
    released: list[bool] = []

    def round_() -> None:
        raise RuntimeError("boom")

    stop = asyncio.Event()
    with pytest.raises(RuntimeError, match=r"^boom$"):
        await asyncio.wait_for(
            campaign(round_, lambda: EVERY_S, lambda: released.append(True), stop, sleep=asyncio.sleep, name="t"), 5
        )
    assert released == []
