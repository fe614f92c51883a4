"""A killed instance's shard is taken over as early as its Lease allows and no earlier: never before the victim's last
``renewTime`` + ``leaseDurationSeconds`` (until then the Lease is its holder's), and in the survivor's first round
after it, ``WAKE_AFTER_EXPIRY_S`` later. Through the official client against the fake API server (tests/fakekube), on
a virtual clock: each instance runs a round, then sleeps ``next_wake_s`` as ``ShardCoordinator.run`` does, so the
bound "+ one round" costs no time here and the takeover must come at the expiry plus the wake exactly."""

from __future__ import annotations

from typing import Any

import pytest

from collector.clock import Clock, VirtualClock
from kvpilot.runtime.lease import LeaseElector, Leases, _epoch
from kvpilot.runtime.shards import WAKE_AFTER_EXPIRY_S, ShardCoordinator
from tests.fakekube import FakeKube

SETTLE_S = 40.0  # every instance holds one shard well before this


def _coordinator(kube: FakeKube, clock: Clock, who: str, lease_s: float) -> ShardCoordinator:
    return ShardCoordinator(
        Leases(kube.api_client()),
        lease_name="kvpilot",
        namespace="kv",
        identity=who,
        address=f"{who}.kvpilot:9090",
        shards=3,
        clock=clock,
        lease_duration_s=lease_s,
    )


def _shard_spec(kube: FakeKube, shard: int) -> dict[str, Any]:
    spec: dict[str, Any] = kube.get("leases", f"kvpilot-shard-{shard}", namespace="kv")["spec"]
    return spec


@pytest.mark.parametrize(
    ("lease_s", "renew_s", "start_s"),
    [
        # the bench's Leases (6 s, renewed every 2 s), the survivors' rounds in phase with the victim's
        (6.0, 2.0, {"a": 0.0, "b": 0.0, "c": 0.0}),
        # ... out of phase: a survivor's last list can be up to half a lease older than the victim's last renewal
        (6.0, 2.0, {"a": 0.7, "b": 1.3, "c": 0.0}),
        # ... one survivor a hair after the victim, one a hair before
        (6.0, 2.0, {"a": 0.001, "b": 1.999, "c": 0.0}),
        # the settings' defaults (ha.lease_duration_s 15, ha.renew_every_s 5), out of phase
        (15.0, 5.0, {"a": 2.2, "b": 4.1, "c": 0.0}),
    ],
)
def test_a_killed_instances_shard_is_taken_when_its_lease_expires_not_before_nor_a_round_later(
    kube: FakeKube, clock: VirtualClock, lease_s: float, renew_s: float, start_s: dict[str, float]
) -> None:
    t0 = clock.now()
    instances = {who: _coordinator(kube, clock, who, lease_s) for who in sorted(start_s)}
    due = {who: t0 + start_s[who] for who in instances}  # when each one's next round runs
    victim = instances["c"]
    lost: int | None = None
    expiry = taken_at = float("nan")

    while taken_at != taken_at:  # nan: not taken yet
        who = min(due, key=lambda w: (due[w], w))
        clock.advance(max(0.0, due[who] - clock.now()))
        instances[who].round()
        due[who] = clock.now() + instances[who].next_wake_s(renew_s)
        if lost is None and who == "c" and clock.now() >= t0 + SETTLE_S:
            # SIGKILL after this round: no more rounds, nothing released
            assert sorted(len(x.owned) for x in instances.values()) == [1, 1, 1]
            assert due["c"] - clock.now() == pytest.approx(renew_s)  # it would next have renewed a round later
            del due["c"]
            (lost,) = victim.owned
            spec = _shard_spec(kube, lost)
            assert _epoch(spec["renewTime"]) == pytest.approx(clock.now(), abs=1e-6)  # renewed in its last round
            expiry = _epoch(spec["renewTime"]) + spec["leaseDurationSeconds"]
            transitions = spec["leaseTransitions"]
        elif lost is not None:
            spec = _shard_spec(kube, lost)
            if spec["holderIdentity"] != "c":
                taken_at = clock.now()
                assert taken_at > expiry, f"taken {expiry - taken_at:.3f} s before the Lease expired"
                assert spec["holderIdentity"] == who
                assert lost in instances[who].owned
                assert _epoch(spec["acquireTime"]) == pytest.approx(taken_at, abs=1e-6)
                assert spec["leaseTransitions"] == transitions + 1
            assert clock.now() <= expiry + lease_s, "never taken over"

    # the survivor's round that takes it is the one it woke for just after the expiry: not a round later
    assert taken_at <= expiry + WAKE_AFTER_EXPIRY_S + 1e-6, f"taken {taken_at - expiry:.3f} s after the Lease expired"


@pytest.mark.parametrize(
    ("after_expiry_s", "taken"),
    [
        (-1e-3, False),  # a millisecond before renewTime + leaseDurationSeconds: still the holder's
        (-1.0, False),  # well before
        (1e-3, True),  # a millisecond after: anyone may take it
    ],
)
def test_an_elector_takes_a_lease_only_after_renew_time_plus_duration(
    kube: FakeKube, clock: VirtualClock, after_expiry_s: float, taken: bool
) -> None:
    api = Leases(kube.api_client())
    a, b = (
        LeaseElector(api, name="kvpilot-leader", namespace="kv", identity=who, clock=clock, lease_duration_s=6)
        for who in "ab"
    )
    assert a.try_acquire_or_renew()
    clock.advance(1.5)
    assert a.try_acquire_or_renew()  # its last renewal: nothing more from a
    assert not b.try_acquire_or_renew()  # b reads it (a renewal b never read would count from b's first read)
    spec = kube.get("leases", "kvpilot-leader", namespace="kv")["spec"]
    expiry = _epoch(spec["renewTime"]) + spec["leaseDurationSeconds"]
    clock.advance(expiry + after_expiry_s - clock.now())
    assert b.try_acquire_or_renew() is taken
    assert kube.get("leases", "kvpilot-leader", namespace="kv")["spec"]["holderIdentity"] == ("b" if taken else "a")
