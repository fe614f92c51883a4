"""Never two holders of one Lease at once while the holder's wall clock runs behind a follower's by up to a margin,
counted on a virtual clock against the fake API server (tests/fakekube).

A follower places a renewal it reads at the holder's ``renewTime`` when that falls between its two reads
(``LeaseSightings``). A holder whose wall clock runs ``s`` seconds behind is placed ``s`` too early: the follower
took the Lease ``s`` before the holder's own lease (on its monotonic clock) ran out. With the elector's regular reads
(every 5 s) the placement mostly fell outside the interval; a follower reading more often (a shard coordinator woken
at an expiry, every 0.5-1 s) did not. Measured before: a holder alive but no longer renewing (a partition, a hung
round) and a follower reading every 0.5 s or 1 s: both led for up to 0.51 s at 1 s of skew and 2.51 s at 3 s; two
sharded instances owned one shard for up to 0.95 s at 1 s, 2.95 s at 3 s and 3.95 s at 4 s.

Now a holder leads only while its last renewal is younger than its renew deadline (``renew_deadline``): 12.5 s of
a 15 s lease renewed every 5 s, so that one failed round does not end its lead. Within that margin of skew (2.5 s;
NTP keeps hosts within milliseconds) no two hold a Lease at once; past it, for no longer than the skew beyond it
(measured: 0.01 s at 3 s for the elector; 0.45 s at 3 s and 1.45 s at 4 s for a shard), where before it was up to
the whole skew."""

from __future__ import annotations

import pytest
from kubernetes import client

from collector.clock import VirtualClock
from kvpilot.runtime.lease import RENEW_DEADLINE
from kvpilot.runtime.wiring import build_elector, build_shards
from kvpilot.settings import load_settings
from tests.fakekube import FakeKube
from tests.unit.kvpilot.runtime.test_lease_clock_skew import EVERY_S, LEASE_S, SkewedClock
from tests.unit.kvpilot.runtime.test_service_lease import _elector
from tests.unit.kvpilot.runtime.test_shards import _coordinator

STEP_S = 0.01
MARGIN_S = LEASE_S * (1 - RENEW_DEADLINE)  # 2.5 s: the lease a holder does not count on


def _beyond(skew_s: float) -> float:
    """Never both within the margin; past it, no longer than the skew beyond it (one step of this clock more)."""
    return 0.0 if -skew_s <= MARGIN_S else -skew_s - MARGIN_S + STEP_S


@pytest.mark.parametrize("read_every_s", [0.5, 1.0])
@pytest.mark.parametrize("phase_s", [0.5, 1.0, 2.5, 4.0, 4.9])
@pytest.mark.parametrize("skew_s", [-0.05, -1.0, -2.4, -3.0, -4.9, -60.0])
def test_no_two_leaders_within_the_margin_of_skew(
    kube: FakeKube, clock: VirtualClock, skew_s: float, phase_s: float, read_every_s: float
) -> None:
    holder, follower = _elector(kube, SkewedClock(clock, skew_s), "h"), _elector(kube, clock, "f")
    assert holder.try_acquire_or_renew()
    clock.advance(phase_s)
    assert not follower.try_acquire_or_renew()
    for _ in range(3):  # renewals every 5 s, the follower reading ``phase_s`` after each
        clock.advance(EVERY_S - phase_s)
        assert holder.try_acquire_or_renew()
        clock.advance(phase_s)
        assert not follower.try_acquire_or_renew()
    # the holder lives on but renews no more; the follower reads every ``read_every_s``
    both = 0.0
    steps, every = 0, round(read_every_s / STEP_S)
    while holder.leader or not follower.leader:
        clock.advance(STEP_S)
        steps += 1
        if steps % every == 0 and not follower.leader:
            follower.try_acquire_or_renew()
        if holder.leader and follower.leader:
            both += STEP_S
        assert steps < 10 * LEASE_S / STEP_S, "never taken over"
    assert both <= _beyond(skew_s), f"both led for {both:.2f} s"


@pytest.mark.parametrize("phase_s", [0.3, 1.3, 2.6, 3.9, 4.9])
@pytest.mark.parametrize("skew_s", [-1.0, -2.4, -3.0, -4.0, -5.5, -6.5, -7.4, -10.0, -60.0])
def test_no_shard_owned_by_two_instances_within_the_margin_of_skew(
    kube: FakeKube, clock: VirtualClock, skew_s: float, phase_s: float
) -> None:
    instances = {
        "a": _coordinator(kube, SkewedClock(clock, skew_s), "a", shards=2),
        "b": _coordinator(kube, clock, "b", shards=2),
    }
    due = {"a": clock.now(), "b": clock.now() + phase_s}
    for _ in range(40):
        who = min(due, key=lambda w: (due[w], w))
        clock.advance(max(0.0, due[who] - clock.now()))
        instances[who].round()
        due[who] = clock.now() + instances[who].next_wake_s(EVERY_S)
    a, b = instances["a"], instances["b"]
    (lost,) = a.owned
    del due["a"]  # a lives on but runs no more rounds (a hung round, a partition from the API server)
    both = 0.0
    while a.owned or lost not in b.owned:
        clock.advance(STEP_S)
        if clock.now() >= due["b"]:
            b.round()
            due["b"] = clock.now() + b.next_wake_s(EVERY_S)
        if lost in a.owned and lost in b.owned:
            both += STEP_S
        assert clock.now() < due["b"] + 10 * LEASE_S, "never taken over"
    assert both <= _beyond(skew_s), f"shard {lost} owned by both for {both:.2f} s"


@pytest.mark.parametrize(
    ("lease_s", "every_s", "deadline_s"),
    [(15.0, 5.0, 12.5), (6.0, 2.0, 5.0), (15.0, 12.0, 13.5), (10.0, 1.0, 9.5)],
)
def test_kvpilot_run_counts_on_a_lease_up_to_half_a_renewal_short_of_it(
    lease_s: float, every_s: float, deadline_s: float
) -> None:
    # renewals more than half the lease apart: half the time left after one, so that renewing on time keeps the lead
    ha = {"enabled": True, "lease_duration_s": lease_s, "renew_every_s": every_s}
    elector = build_elector(load_settings(ha=ha), VirtualClock(0), client.ApiClient())
    assert elector.renew_deadline_s == pytest.approx(deadline_s)
    shards = build_shards(load_settings(ha=ha, sharding={"shards": 2}), VirtualClock(0), client.ApiClient())
    assert [e.renew_deadline_s for e in shards._electors] == pytest.approx([deadline_s] * 2)
