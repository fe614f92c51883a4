"""bench/kv_replay.py: the recorded readings replayed through a judge open where the detector opens."""

from __future__ import annotations

from dataclasses import replace

import pytest

from collector.samples import ReplicaSample
from detectors import kv_exhaustion
from tests.helpers.bench import load_bench


def _reading(usage: float) -> kv_exhaustion.KvReading:
    return kv_exhaustion.KvReading(
        usage=usage, peak_usage=usage, slope_per_s=None, time_to_exhaustion_s=None,
        confirm_time_to_exhaustion_s=None, requests_waiting=0.0, requests_running=0.0, preemptions_rate=0.0,
        in_flight_growth=None, arrival_rate=None,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("bad", "opens_at"),
    [
        ({"a": {10, 15}}, 15.0),  # two bad ticks in a row on one replica open it (kv_exhaustion's hysteresis)
        ({"a": {10, 20}}, None),  # a clean tick in between starts the count again
        ({"a": {10}, "b": {15}}, None),  # one bad tick on each of two replicas is not a streak
        ({"a": {5, 10, 15}, "b": {10, 15}}, 10.0),  # the first replica to open sets the time
        ({}, None),  # nothing bad, nothing opens
    ],
)
def test_first_warning_opens_like_the_hysteresis(bad: dict[str, set[int]], opens_at: float | None) -> None:
    kv_replay = load_bench("kv_replay")
    readings = [
        kv_replay.Reading(float(t), replica, _reading(1.0 if t in bad.get(replica, set()) else 0.1))
        for t in range(5, 30, 5)
        for replica in ("a", "b")
    ]
    rec = kv_replay.Recorded(episode=None, readings=readings, kvpilot_first=None)
    assert kv_replay.first_warning(rec, lambda r: r.usage > 0.5) == opens_at


def _filling_episode(episode: type) -> object:
    """Two replicas whose pools fill over ten minutes, one of them to a queue and preemptions."""
    ticks = []
    for i in range(1, 121):
        t = 5.0 * i
        reps = []
        for k, top in enumerate((1.0, 0.7)):
            usage = min(top, 0.1 + top * t / 600.0)
            full = usage >= 0.95
            base = ReplicaSample(
                namespace="inference", deployment="llama", replica=f"llama-000{k}", node=f"node-{k}", engine="vllm",
                model="m", timestamp=t,
            )  # fmt: skip
            reps.append(
                replace(
                    base,
                    kv_usage=usage,
                    requests_running=100.0 * usage,
                    requests_waiting=8.0 if full else 0.0,
                    requests_finished=4.0 * t * (1 + t / 600.0),
                    preemptions=float(max(0, i - 110)) if full else 0.0,
                )
            )
        ticks.append((t, reps))
    first = next(t for t, reps in ticks if any((r.preemptions or 0.0) > 0 for r in reps))
    return episode("azure_conv", "ramp", 1.3, 0, ticks, first, 1.0, 0.85)


def test_record_replays_the_detectors_own_warning_and_restores_it() -> None:
    kv_replay = load_bench("kv_replay")
    original = kv_exhaustion._replica_finding
    rec = kv_replay.record(_filling_episode(kv_replay.Episode))
    assert kv_exhaustion._replica_finding is original
    assert rec.kvpilot_first is not None
    assert kv_replay.first_warning(rec, kv_replay.default_judge) == rec.kvpilot_first
    # Every ready replica's reading at every tick, the longer trend worked out where the short one is read.
    assert {r.replica for r in rec.readings} == {"llama-0000", "llama-0001"}
    assert len(rec.readings) == 2 * len(rec.episode.ticks)
