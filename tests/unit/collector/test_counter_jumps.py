"""A replica's counter stepping by more than any replica can (``collector.validity.MAX_COUNTER_PER_S``) is no demand.
One page whose ``requests_finished`` read 9e15 made the deployment's arrival rate, which the planner sizes it by
and the minute's roll-up stores, 1.5e14 requests/s for the whole rate window; now such a reading is unknown, as a
missing value is, until a second reading agrees with it (session 29 helper F, hostile and parallel input round 14)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from collector.rates import CounterWindow
from collector.samples import ReplicaSample
from collector.state import FleetState
from collector.validity import MAX_COUNTER_PER_S

T0, STEP, TICKS = 1_000.0, 5.0, 40
GLITCH = 20  # the tick at which r0's page is odd


def _sample(replica: str, t: float, finished: float | None) -> ReplicaSample:
    base = ReplicaSample(
        namespace="prod", deployment="d", replica=replica, node="n", engine="vllm", model="m", timestamp=t
    )
    return replace(base, requests_finished=finished, requests_waiting=0.0, requests_running=1.0)


def _rates(r0_finished: list[float | None]) -> list[tuple[float | None, float | None]]:
    """(arrival rate, finished rate) of the deployment at each tick: r0 counting ``r0_finished``, r1 50 a tick."""
    state = FleetState()
    out = []
    for i, finished in enumerate(r0_finished):
        t = T0 + STEP * i
        state.observe([_sample("r0", t, finished), _sample("r1", t, 50.0 * i)], [], now=t)
        view = state.deployments()["prod/d"]
        out.append((view.arrival_rate, view.requests_finished_rate))
    return out


@pytest.mark.parametrize("glitch", [9e15, 1e12, 2.0**53])
def test_one_reading_no_replica_makes_reads_as_a_missing_one(glitch: float) -> None:
    # r0 counts 50 a tick (10 requests/s); one reading jumps to `glitch`, the next is back on course
    clean = [50.0 * i for i in range(TICKS)]
    odd, missing = list(clean), list(clean)
    odd[GLITCH], missing[GLITCH] = glitch, None
    assert _rates(odd) == _rates(missing)
    assert all(a is not None and a < 2 * 20.0 for a, _ in _rates(odd)[1:])  # 20 requests/s, at most a tick's catch-up


def test_a_counter_that_moved_for_good_is_read_from_its_new_value_on() -> None:
    # another process behind r0's URL: its counter is 5e9 and counts on from there; the jump counts nothing, and the
    # counter is read again from the second reading that agrees with the first
    moved = [50.0 * i if i < GLITCH else 5e9 + 50.0 * i for i in range(TICKS)]
    rates = _rates(moved)
    assert all(a is not None and a <= 20.0 + 1e-6 for a, _ in rates[1:])
    # a window (60 s, 12 ticks) after the move both replicas' steps are read again: the clean rate
    assert rates[-1] == pytest.approx((20.0, 20.0))


def test_a_jump_taken_off_leaves_no_rate_below_zero() -> None:
    # found by test_state's hypothesis on 47c0553: 1.4, then 1.37e11 twice (read from there on, the jump taken off,
    # rounded apart from the values it joins), then a restart to 0: the steps add to 0, the increase read -4.5e-6
    window = CounterWindow(MAX_COUNTER_PER_S["requests_finished"])
    for t, value in ((1.0, 1.4018994569778442), (2.0, 137438953474.0), (3.0, 137438953474.0), (4.0, 0.0)):
        window.add(t, value)
    assert window.increase_and_rate() == (0.0, 0.0)
