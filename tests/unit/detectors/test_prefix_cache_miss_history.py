"""prefix_cache_miss keeps each deployment's baseline medians from tick to tick: over random histories, tick after
tick, its findings are exactly those of the baseline worked out afresh from the whole history, and its cost no
longer grows with the history kept."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.samples import ReplicaSample
from collector.state import DeploymentPoint, FleetState
from detectors import prefix_cache_miss
from detectors.finding import Finding
from detectors.thresholds import DEFAULT, PrefixThresholds, Thresholds
from tests.unit.detectors.detector_fleet import replica

# A baseline after 30 s that excludes the last 30 s, so that a few dozen ticks hold baselines that move, and a
# FleetState that lets its oldest points go within them.
SHORT = dataclasses.replace(
    DEFAULT,
    prefix=dataclasses.replace(DEFAULT.prefix, baseline_exclude_recent_s=30.0, min_baseline_s=30.0, settle_s=20.0),
)
# Without the lost-affinity option: with it, a detector that keeps its state from tick to tick also holds the findings
# it opened (test_prefix_cache_miss), which one worked out afresh cannot know; the baselines compared here are the same.
UNHELD = dataclasses.replace(DEFAULT, prefix=dataclasses.replace(DEFAULT.prefix, lost_affinity_drop=None))
SHORT_UNHELD = dataclasses.replace(SHORT, prefix=dataclasses.replace(SHORT.prefix, lost_affinity_drop=None))


@st.composite
def fleets(draw: st.DrawFn) -> list[tuple[float, list[ReplicaSample]]]:
    """Ticks of up to four replicas of two deployments: hit ratios that hold, fall or vanish, replicas that come and
    go (the ready count moves), preemptions now and then, scrapes missed."""
    ticks: list[tuple[float, list[ReplicaSample]]] = []
    queries = dict.fromkeys(("r0", "r1", "r2", "r3"), 0.0)
    hits, preempted = dict(queries), dict(queries)
    ratio = {name: draw(st.sampled_from([0.0, 0.3, 0.8])) for name in queries}
    t = 0.0
    for _ in range(draw(st.integers(1, 80))):
        t += draw(st.sampled_from([5.0, 5.0, 5.0, 10.0, 45.0]))
        samples = []
        for name in queries:
            if draw(st.integers(0, 5)) == 0:
                continue  # not scraped (or not there) this tick
            if draw(st.integers(0, 7)) == 0:
                ratio[name] = draw(st.sampled_from([0.0, 0.01, 0.3, 0.35, 0.5, 0.8, 1.0]))
            asked = draw(st.sampled_from([0.0, 300.0, 1000.0]))
            queries[name] += asked
            hits[name] += asked * ratio[name]
            preempted[name] += draw(st.sampled_from([0.0, 0.0, 0.0, 1.0]))
            samples.append(
                replica(
                    name,
                    t,
                    deployment="a" if name in ("r0", "r1") else "b",
                    prefix_queries=draw(st.one_of(st.just(queries[name]), st.none())),
                    prefix_hits=hits[name],
                    preemptions=preempted[name],
                )
            )
        ticks.append((t, samples))
    return ticks


def _afresh(
    kept: prefix_cache_miss.PrefixBaselines,
    key: str,
    history: Sequence[DeploymentPoint],
    th: PrefixThresholds,
    now: float,
) -> object:
    return prefix_cache_miss.baseline(history, th, now)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ticks=fleets(), th=st.sampled_from([SHORT_UNHELD, UNHELD]), history_s=st.sampled_from([90.0, 3600.0]))
def test_baselines_and_findings_equal_those_worked_out_afresh(
    ticks: list[tuple[float, list[ReplicaSample]]], th: Thresholds, history_s: float
) -> None:
    state = FleetState(history_s=history_s)
    # Asked every tick, and as the detector asks (not for a deployment without queries that tick).
    asked, detected = prefix_cache_miss.PrefixBaselines(), prefix_cache_miss.PrefixBaselines()
    for now, samples in ticks:
        state.observe(samples, [], now=now)
        for key in state.deployments():
            history = state.deployment_history(key)
            assert asked.baseline(key, history, th.prefix, now) == prefix_cache_miss.baseline(history, th.prefix, now)
        found = prefix_cache_miss.detect(state, thresholds=th, now=now, baselines=detected)
        with mock.patch.object(prefix_cache_miss.PrefixBaselines, "baseline", _afresh):
            afresh: list[Finding] = prefix_cache_miss.detect(state, thresholds=th, now=now)
        assert found == afresh


def test_a_tick_reads_as_many_points_with_an_hour_of_history_as_with_ten_minutes() -> None:
    # Before, each tick took three medians over every point older than the last five minutes (~660 a deployment
    # after an hour, ~60 after ten minutes); now it adds the point that aged past the cutoff.
    reads = []
    for minutes in (10, 60):
        state, t, baselines = FleetState(), 0.0, prefix_cache_miss.PrefixBaselines()
        for i in range(minutes * 12 + 2):
            t = 5.0 * i
            samples = [
                replica(f"r{k}", t, deployment=f"d{k % 2}", prefix_queries=1e3 * i, prefix_hits=6e2 * i)
                for k in range(4)
            ]
            state.observe(samples, [], now=t)
            if i == minutes * 12:
                prefix_cache_miss.detect(state, thresholds=DEFAULT, now=t, baselines=baselines)  # kept up to here
        counted = mock.Mock(wraps=prefix_cache_miss._preemptions_per_replica)
        with mock.patch.object(prefix_cache_miss, "_preemptions_per_replica", counted):
            assert prefix_cache_miss.detect(state, thresholds=DEFAULT, now=t, baselines=baselines) == []
        reads.append(counted.call_count)
    assert reads[1] == reads[0]
