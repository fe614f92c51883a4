"""detectors._ratio_spread: how alike the replicas' hit ratios are over windows of their kept counters."""

from __future__ import annotations

import statistics
from unittest import mock

import pytest

from collector.state import FleetState
from detectors._ratio_spread import _Track, ratio_spread, spreads
from tests.unit.detectors.detector_fleet import drive, replica


def median_spread(state: FleetState, replicas: list[str], times: list[float], *, min_replicas: int = 2) -> float | None:
    """The median of the spreads the prefix detector reads over ``times``; None where there is none."""
    found = spreads(state, replicas, times, min_replicas=min_replicas)
    return statistics.median(found) if found else None


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


def _hour(ticks: int = 720) -> FleetState:
    """Three replicas over an hour, each its own ratio drifting, one started ten minutes late: the history older than
    two minutes is thinned to one sample a minute."""

    def tick(i: int, t: float):
        out = []
        for k, name in enumerate(("r0", "r1", "r2")):
            n = i - 120 if name == "r2" else i
            if n >= 0:
                ratio = 0.2 + 0.1 * k + 0.05 * ((i // 30) % 3)
                out.append(replica(name, t, prefix_queries=1000.0 * n, prefix_hits=1000.0 * ratio * n))
        return out, []

    return drive(tick, ticks)


def _from_the_whole_history(state: FleetState, keys: list[str], times: list[float]) -> list[float]:
    tracks = [_Track(state.replica_history(k)) for k in keys]
    out = []
    for t in times:
        got = ratio_spread([r for tr in tracks if (r := tr.ratio(t - state.rate_window_s, t)) is not None])
        if got is not None:
            out.append(got)
    return out


@pytest.mark.parametrize("ago", [0.0, 100.0, 300.0, 1500.0, 3000.0, 3500.0])
def test_a_window_reads_as_from_the_whole_history(ago: float) -> None:
    # The samples since the oldest window's start (one a minute there, where the history is thinned) give every
    # window the very ratios the whole kept history gives.
    state = _hour()
    now = state.now or 0.0
    keys = ["ml/r0", "ml/r1", "ml/r2"]
    times = [now - ago - 5.0 * k for k in range(0, 48, 7)]
    assert spreads(state, keys, times) == _from_the_whole_history(state, keys, times)


def test_a_recent_window_reads_only_its_own_samples() -> None:
    state = _hour()
    now = state.now or 0.0
    with mock.patch.object(state, "replica_history", wraps=state.replica_history) as whole:
        assert spreads(state, ["ml/r0", "ml/r1", "ml/r2"], [now - 120.0, now])
    whole.assert_not_called()


def test_fewer_replicas_than_asked_read_no_spread() -> None:
    state = _fleet({"r0": 600.0, "r1": 200.0})
    now = state.now or 0.0
    assert median_spread(state, ["ml/r0", "ml/r1"], [now], min_replicas=3) is None
    assert median_spread(state, ["ml/r0", "ml/r1"], [now], min_replicas=2) == pytest.approx(0.5)


def test_a_replica_counts_once_it_has_served_a_rate_window() -> None:
    # r2 joins at 600 s (its cache cold): the window ending at 660 s leaves it out with warm_s=60, and the next
    # window that starts a minute after it joined counts it
    state = _hour(160)
    keys = ["ml/r0", "ml/r1", "ml/r2"]
    assert spreads(state, keys, [660.0], min_replicas=3) != []
    assert spreads(state, keys, [660.0], min_replicas=3, warm_s=60.0) == []
    assert spreads(state, keys, [720.0], min_replicas=3, warm_s=60.0) != []
