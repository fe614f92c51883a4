"""Lease campaigns in real time (``kvpilot.runtime.lease.campaign``: rounds and waits in a thread of their own, as
``kvpilot run`` runs them), against the in-process fake API server: shards partitioned, a crashed instance's shard
taken over once its Lease expires, a stop hands everything back at once; the HA elector the same way. The protocol
itself is tested round by round in virtual time (test_shards.py, test_shards_takeover.py, test_service_lease.py)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from collector.clock import WallClock
from kvpilot.runtime.lease import LeaseElector, Leases, campaign
from tests.fakekube import FakeKube
from tests.helpers.poll import until
from tests.unit.kvpilot.runtime.test_shards_takeover import _coordinator

LEASE_S = 2.0
EVERY_S = 0.3


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
    crashed_at = time.monotonic()
    await asyncio.gather(tasks["c"], return_exceptions=True)
    assert _holders(kube)[lost] == "c"
    await until(lambda: _holders(kube)[lost] in ("a", "b"), what="the crashed shard taken over", timeout_s=15)
    # one lease period after its last renewal (<= the crash), plus at most one round and the poll
    assert time.monotonic() - crashed_at <= LEASE_S + EVERY_S + 0.5
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
    await asyncio.sleep(3 * EVERY_S)
    assert sum(e.leader for e in electors) == 1  # renewals keep it; the other follows
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
