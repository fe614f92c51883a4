"""A renewal stamped just before a follower's read, but not in what that read returned (the holder's write still in
flight, or the read's answer handled late on a busy host), is placed at that read, not at the next one: the next read
comes up to a list interval later (half a lease, plus a round), and counting the renewal from there took a dead
holder's shard that much past its lease (bench/shards.py, 2026-12-07 08:24 UTC at 80010be: taken 9.34 s after the
SIGKILL for a 6 s lease, 4.12 s late against the victim's renewTime + 6 s). Clocks agree here (one virtual clock)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from collector.clock import VirtualClock
from kvpilot.runtime.lease import UNSEEN_WRITE_S, LeaseSightings

LEASE_S = 6.0  # bench/shards.py's Leases, listed at least every half lease
LIST_EVERY_S = 3.0


def _spec(renew_epoch: float, transitions: int = 0) -> dict[str, Any]:
    stamp = datetime.fromtimestamp(renew_epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "holderIdentity": "c",
        "renewTime": stamp,
        "acquireTime": stamp if transitions == 0 else "2026-12-07T00:00:00.000000Z",
        "leaseDurationSeconds": int(LEASE_S),
        "leaseTransitions": transitions,
    }


@pytest.mark.parametrize("unseen_s", [0.05, 0.3, 0.9])
def test_a_renewal_stamped_before_a_read_that_missed_it_counts_from_that_read(unseen_s: float) -> None:
    clock = VirtualClock(1_796_600_000.0)
    sightings = LeaseSightings(clock)
    first = clock.now()
    assert sightings.renewed_at("kvpilot-shard-2", _spec(first), LEASE_S) == pytest.approx(first, abs=1e-3)
    clock.advance(2.0)
    missed_at = clock.monotonic()  # this read returns the old record: the renewal below is not visible yet
    assert sightings.renewed_at("kvpilot-shard-2", _spec(first), LEASE_S) == pytest.approx(first, abs=1e-3)
    stamped = clock.now() - unseen_s  # the holder stamped it before that read; it landed after
    clock.advance(LIST_EVERY_S)  # the next list; the holder died meanwhile
    renewed = sightings.renewed_at("kvpilot-shard-2", _spec(stamped), LEASE_S)
    # at the read that missed it (80010be: at this read, 3 s later), and never before its own stamp
    assert renewed == pytest.approx(missed_at, abs=1e-3)
    assert renewed >= stamped


def test_a_stamp_further_before_the_last_read_still_counts_from_this_read() -> None:
    """Past ``UNSEEN_WRITE_S`` before the last read, a stamp says the clocks disagree (or one stepped): the renewal
    counts from this read, as client-go counts it (test_lease_clock_skew.py's cases, kept)."""
    clock = VirtualClock(1_796_600_000.0)
    sightings = LeaseSightings(clock)
    first = clock.now()
    sightings.renewed_at("kvpilot-shard-2", _spec(first), LEASE_S)
    clock.advance(2.0)
    sightings.renewed_at("kvpilot-shard-2", _spec(first), LEASE_S)
    stamped = clock.now() - UNSEEN_WRITE_S - 0.5
    clock.advance(LIST_EVERY_S)
    assert sightings.renewed_at("kvpilot-shard-2", _spec(stamped), LEASE_S) == pytest.approx(
        clock.monotonic(), abs=1e-3
    )
