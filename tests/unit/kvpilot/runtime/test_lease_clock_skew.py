"""A Lease's expiry does not depend on clock skew between hosts (client-go's observedTime): a holder's ``renewTime``
is its own clock's. Against the fake API server (tests/fakekube), on a virtual clock, with the holder's wall clock an
hour ahead of or behind the others'. Before, a follower read a live holder whose clock ran behind as expired (and took
its Lease at once), and a dead holder whose clock ran ahead as live for the hour."""

from __future__ import annotations

import pytest

from collector.clock import VirtualClock
from kvpilot.runtime.shards import WAKE_AFTER_EXPIRY_S
from tests.fakekube import FakeKube
from tests.unit.kvpilot.runtime.test_service_lease import _elector
from tests.unit.kvpilot.runtime.test_shards import _coordinator

LEASE_S = 15.0  # the helpers' Leases
EVERY_S = 5.0
HOUR_S = 3600.0


class SkewedClock:
    """Another host's clock: its wall time ``skew_s`` off the test's, its monotonic time its own."""

    def __init__(self, base: VirtualClock, skew_s: float) -> None:
        self.base, self.skew_s = base, skew_s

    def now(self) -> float:
        return self.base.now() + self.skew_s

    def monotonic(self) -> float:
        return self.base.now()


def _holder(kube: FakeKube) -> str:
    holder: str = kube.get("leases", "kvpilot-leader", namespace="kv")["spec"]["holderIdentity"]
    return holder


@pytest.mark.parametrize("skew_s", [HOUR_S, -HOUR_S])
def test_a_live_holder_keeps_its_lease_whatever_its_clock(kube: FakeKube, clock: VirtualClock, skew_s: float) -> None:
    holder, follower = _elector(kube, SkewedClock(clock, skew_s), "h"), _elector(kube, clock, "f")
    assert holder.try_acquire_or_renew()
    for _ in range(12):  # a minute of rounds, the follower's just after each renewal, then just before the next
        assert not follower.try_acquire_or_renew()
        clock.advance(EVERY_S - 0.01)
        assert not follower.try_acquire_or_renew()
        clock.advance(0.01)
        assert holder.try_acquire_or_renew()
        assert holder.leader
        assert not follower.leader
    assert _holder(kube) == "h"


@pytest.mark.parametrize("skew_s", [HOUR_S, -HOUR_S])
def test_a_dead_holders_lease_is_taken_one_lease_period_after_its_last_renewal_was_read(
    kube: FakeKube, clock: VirtualClock, skew_s: float
) -> None:
    holder, follower = _elector(kube, SkewedClock(clock, skew_s), "h"), _elector(kube, clock, "f")
    assert holder.try_acquire_or_renew()
    clock.advance(EVERY_S)
    assert holder.try_acquire_or_renew()  # its last renewal: it dies
    died = clock.now()
    clock.advance(1.0)
    assert not follower.try_acquire_or_renew()  # reads the last renewal a second later
    taken = None
    while taken is None and clock.now() < died + HOUR_S:
        clock.advance(1.0)
        if follower.try_acquire_or_renew():
            taken = clock.now()
    assert taken is not None
    assert died + LEASE_S < taken <= died + 1.0 + LEASE_S + 1.0  # after its own lease; one lease after it was read


@pytest.mark.parametrize("skew_s", [HOUR_S, -HOUR_S])
def test_shards_stay_with_a_live_skewed_instance_and_leave_a_dead_one_one_lease_after(
    kube: FakeKube, clock: VirtualClock, skew_s: float
) -> None:
    skewed = SkewedClock(clock, skew_s)
    instances = {"a": _coordinator(kube, skewed, "a", shards=2), "b": _coordinator(kube, clock, "b", shards=2)}
    due = {"a": clock.now(), "b": clock.now() + 1.3}  # when each one's next round runs (as ShardCoordinator.run)
    last = {"a": clock.now(), "b": clock.now()}
    held: list[tuple[int, int]] = []
    for _ in range(60):  # a few minutes of rounds
        who = min(due, key=lambda w: (due[w], w))
        clock.advance(max(0.0, due[who] - clock.now()))
        instances[who].round()
        last[who] = clock.now()
        due[who] = clock.now() + instances[who].next_wake_s(EVERY_S)
        held.append((len(instances["a"].owned), len(instances["b"].owned)))
    assert held[-30:] == [(1, 1)] * 30  # one each, kept: neither reads the other's live Leases as expired
    (lost,) = instances["a"].owned
    del due["a"]  # a dies after its last round (nothing released)
    b = instances["b"]
    while lost not in b.owned:
        clock.advance(max(0.0, due["b"] - clock.now()))
        b.round()
        due["b"] = clock.now() + b.next_wake_s(EVERY_S)
        assert clock.now() < last["a"] + HOUR_S / 2, "never taken over"
    taken = clock.now()
    assert taken > last["a"] + LEASE_S  # not before a's own lease ran out
    # b lists at least every half lease: it read a's last renewal by then, and took the shard one lease later
    assert taken <= last["a"] + LEASE_S / 2 + LEASE_S + WAKE_AFTER_EXPIRY_S + 2e-3
