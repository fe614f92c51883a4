"""detectors._ratio_spread: how alike the replicas' hit ratios are over windows of their kept counters."""

from __future__ import annotations

import pytest

from collector.state import FleetState
from detectors._ratio_spread import median_spread, ratio_spread
from tests.unit.detectors.detector_fleet import drive, replica


@pytest.mark.parametrize(
    ("ratios", "spread"),
    [
        ([0.6, 0.4, 0.2, 0.4], 0.3536),  # prefix affinity's skew
        ([0.3, 0.3, 0.3], 0.0),  # alike
        ([0.5], None),  # one replica: no spread to read
        ([0.0, 0.0], None),  # nothing cached anywhere
    ],
)
def test_ratio_spread(ratios: list[float], spread: float | None) -> None:
    got = ratio_spread(ratios)
    assert got == spread if spread is None else got == pytest.approx(spread, abs=1e-4)


def _fleet(hits_per_tick: dict[str, float], *, restart_at: int | None = None) -> FleetState:
    """Two replicas with 1000 queried tokens a tick each; r1's counters restart at tick ``restart_at``."""

    def tick(i: int, t: float):
        out = []
        for name, hits in hits_per_tick.items():
            n = i - restart_at if name == "r1" and restart_at is not None and i >= restart_at else i
            out.append(replica(name, t, prefix_queries=1000.0 * n, prefix_hits=hits * n))
        return out, []

    return drive(tick, 60)


def test_median_spread_reads_each_window_from_the_counters() -> None:
    state = _fleet({"r0": 600.0, "r1": 200.0})  # ratios 0.6 and 0.2: spread 0.5
    now = state.now or 0.0
    assert median_spread(state, ["ml/r0", "ml/r1"], [now - 60, now]) == pytest.approx(0.5)


def test_a_counter_restart_leaves_that_replica_out_of_its_windows() -> None:
    # r1 restarts 10 ticks before the end: its window over the restart reads no ratio, so that window has one
    # replica (no spread) and the median comes from the windows before it
    state = _fleet({"r0": 600.0, "r1": 200.0}, restart_at=50)
    now = state.now or 0.0
    assert median_spread(state, ["ml/r0", "ml/r1"], [now]) is None
    assert median_spread(state, ["ml/r0", "ml/r1"], [now - 120, now]) == pytest.approx(0.5)


def test_unknown_replicas_read_nothing() -> None:
    state = _fleet({"r0": 600.0, "r1": 200.0})
    assert median_spread(state, ["ml/gone"], [state.now or 0.0]) is None
