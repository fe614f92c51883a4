"""What the detectors keep from tick to tick (KV trends, prefix baselines) belongs to one ``Detection`` and the fleet
state it watches: nothing is shared with another state, and a replica or deployment the state lets go leaves it."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import pytest

from collector.samples import ReplicaSample
from collector.state import FleetState
from detectors import kv_trend
from detectors.kv_exhaustion import kv_trend as trend_of
from detectors.kv_exhaustion import time_to_exhaustion_s
from detectors.kv_trend import KvTrends, fit_trend
from detectors.registry import Detection
from detectors.thresholds import DEFAULT
from tests.unit.detectors.detector_fleet import TICK_S, replica

KV = DEFAULT.kv


def _alike_at_the_ends() -> tuple[list[ReplicaSample], list[ReplicaSample]]:
    """Two histories of replica ml/r0 with the very same first and latest sample objects and the same length: one
    filling steadily, one flat at 50 % in between (what two states fed the same samples can hold)."""
    rising = [replica("r0", TICK_S * i, kv_usage=0.5 + 0.02 * i) for i in range(20)]
    flat = [rising[0], *(replace(s, kv_usage=0.5) for s in rising[1:-1]), rising[-1]]
    return rising, flat


def test_histories_alike_at_their_ends_get_each_their_own_trend() -> None:
    # One KvTrends per state: a history that another state holds for the same replica, alike in its first and
    # latest samples and its length, is fitted from its own samples (a memo shared by the process answered the
    # other history's trend).
    rising, flat = _alike_at_the_ends()
    mine, theirs = KvTrends(), KvTrends()
    assert trend_of(rising, KV, trends=theirs) == fit_trend(rising[-13:], KV.trend_window_s, KV.min_trend_samples)
    own = trend_of(flat, KV, trends=mine)
    assert own == fit_trend(flat[-13:], KV.trend_window_s, KV.min_trend_samples)
    assert own is not None
    assert own[0] == pytest.approx(0.0, abs=1e-9)  # flat over the window but for its latest sample


def _state(samples: list[ReplicaSample]) -> FleetState:
    # A rate window as long as the history keeps every sample object as observed (none moved to the older tiers).
    state = FleetState(rate_window_s=600.0)
    for s in samples:
        state.observe([s], [], now=s.timestamp)
    return state


def test_two_detections_keep_nothing_of_each_other() -> None:
    rising, flat = _alike_at_the_ends()
    filling, levelled = _state(rising), _state(flat)
    now = rising[-1].timestamp
    first, second = Detection(only=["kv_exhaustion"]), Detection(only=["kv_exhaustion"])
    first.tick(filling, now=now)
    assert "ml/r0" in first.kv_trends
    assert "ml/r0" not in second.kv_trends  # nothing of the first state's replica
    second.tick(levelled, now=now)
    history = levelled.replica_history("ml/r0")
    assert trend_of(history, KV, trends=second.kv_trends) == trend_of(history, KV)  # its own, not the first's
    assert time_to_exhaustion_s(history, KV, trends=second.kv_trends) is None  # flat: never full at this trend
    assert time_to_exhaustion_s(filling.replica_history("ml/r0"), KV, trends=first.kv_trends) is not None


def test_the_projection_after_a_tick_reuses_the_detectors_fit() -> None:
    # The exported projection (the control loop) asks for the trend the detector fitted this tick: no fit again.
    rising, _ = _alike_at_the_ends()
    state = _state(rising)
    detection = Detection(only=["kv_exhaustion"])
    detection.tick(state, now=rising[-1].timestamp)
    with mock.patch.object(kv_trend, "fit_trend", wraps=fit_trend) as fits:
        assert time_to_exhaustion_s(state.replica_history("ml/r0"), KV, trends=detection.kv_trends) is not None
    assert fits.call_count == 0


def test_a_window_is_fitted_once_whatever_history_it_is_cut_from() -> None:
    # The detector reads a replica's window of its rate and trend windows, the projection its trend window alone
    # (FleetState.replica_history_since): the same trend window, one fit. A trend is known by its window's samples.
    rising, flat = _alike_at_the_ends()
    trends = KvTrends()
    with mock.patch.object(kv_trend, "fit_trend", wraps=fit_trend) as fits:
        whole = trend_of(rising, KV, trends=trends)
        assert trend_of(rising[-13:], KV, trends=trends) == whole  # the trend window alone
        assert trend_of(rising[-15:], KV, trends=trends) == whole  # cut a little longer
        assert fits.call_count == 1
        # shorter than the window: its own samples
        assert trend_of(rising[-5:], KV, trends=trends) == fit_trend(rising[-5:], KV.trend_window_s, 3)
        # the same latest sample, first sample and length, other samples in the window: fitted from its own
        assert trend_of(flat, KV, trends=trends) == fit_trend(flat[-13:], KV.trend_window_s, KV.min_trend_samples)
        assert fits.call_count == 3


def test_a_replica_and_a_deployment_the_state_lets_go_leave_what_was_kept_for_them() -> None:
    # r1 (deployment "other") stops reporting at t=300 s; the state forgets it after forget_after_s. r0 reports on.
    state = FleetState(stale_after_s=15.0, forget_after_s=60.0)
    detection = Detection(only=["kv_exhaustion", "prefix_cache_miss"])
    deployments = {"r0": "chat", "r1": "other"}
    for i in range(100):
        t = TICK_S * i
        names = ("r0", "r1") if t < 300 else ("r0",)
        counters = {"prefix_queries": 1e3 * i, "prefix_hits": 6e2 * i}
        state.observe([replica(n, t, deployment=deployments[n], **counters) for n in names], [], now=t)
        detection.tick(state, now=t)
        if t == 295:  # both kept while both report
            assert "ml/r0" in detection.kv_trends
            assert "ml/r1" in detection.kv_trends
            assert "ml/chat" in detection.prefix_baselines
            assert "ml/other" in detection.prefix_baselines
    assert state.replica("ml/r1") is None  # forgotten by the state ...
    assert "ml/r1" not in detection.kv_trends  # ... and by the detection
    assert "ml/other" not in detection.prefix_baselines
    assert "ml/r0" in detection.kv_trends
    assert "ml/chat" in detection.prefix_baselines
