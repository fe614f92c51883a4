"""kv_exhaustion reads each replica's recent windows by bisection, its trend once per tick and the longer
confirmation trend only where it is read: over random histories, tick after tick, its findings are exactly those of
a straightforward recomputation that passes over the whole history and works every number out afresh."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import overload
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.samples import ReplicaSample
from collector.state import FleetState
from collector.validity import fraction
from detectors import kv_exhaustion
from detectors.kv_trend import KvTrends, fit_trend
from detectors.thresholds import DEFAULT, Thresholds
from tests.unit.detectors.detector_fleet import replica

# Usages around every threshold the detector compares with (project_from_usage 0.4, near_full 0.9, full 0.98),
# impossible ones (unknown here) and anything in between.
usages = st.one_of(
    st.none(),
    st.sampled_from([0.0, 0.39, 0.4, 0.5, 0.89, 0.9, 0.97, 0.98, 1.0, 1.2, -0.3]),
    st.floats(0.0, 1.0),
)
Seen = tuple[str, str, str, dict[str, object]]  # replica, severity, summary, the numbers read over history

thresholds = st.sampled_from(
    [
        DEFAULT,
        # a trend window shorter and a confirm window longer than the rate window, and the reverse
        dataclasses.replace(DEFAULT, kv=dataclasses.replace(DEFAULT.kv, trend_window_s=30.0, confirm_window_s=300.0)),
        dataclasses.replace(DEFAULT, kv=dataclasses.replace(DEFAULT.kv, trend_window_s=90.0, confirm_window_s=45.0)),
        # burst-aware: the arrivals' spread reads the sample before its window, wherever it lies in the history
        dataclasses.replace(
            DEFAULT, kv=dataclasses.replace(DEFAULT.kv, burst_margin=1.0, burst_window_s=90.0, projected_usage=0.6)
        ),
    ]
)


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[float, list[ReplicaSample]]]:
    """Ticks of two replicas: usages that climb, hold or jump, scrapes missed, queues and preemptions now and then."""
    ticks: list[tuple[float, list[ReplicaSample]]] = []
    t = 0.0
    level = {"r0": draw(st.floats(0.0, 1.0)), "r1": draw(st.floats(0.0, 1.0))}
    preempted = {"r0": 0.0, "r1": 0.0}
    for _ in range(draw(st.integers(1, 60))):
        t += draw(st.sampled_from([5.0, 5.0, 5.0, 5.0, 2.5, 15.0, 70.0]))  # gaps longer than every window too
        samples = []
        for name in ("r0", "r1"):
            if draw(st.integers(0, 9)) == 0:
                continue  # scrape missed
            step = draw(st.sampled_from(["climb", "hold", "jump"]))
            if step == "climb":
                level[name] = min(1.0, level[name] + draw(st.floats(0.0, 0.05)))
            elif step == "jump":
                level[name] = draw(st.floats(0.0, 1.0))
            usage = draw(st.one_of(st.just(level[name]), usages))
            preempted[name] += draw(st.sampled_from([0.0, 0.0, 0.0, 2.0]))
            samples.append(
                replica(
                    name,
                    t,
                    kv_usage=usage,
                    requests_waiting=draw(st.sampled_from([0.0, 0.0, 3.0])),
                    requests_finished=t * draw(st.sampled_from([1.0, 2.0])),
                    preemptions=preempted[name],
                )
            )
        ticks.append((t, samples))
    return ticks


def _straightforward(state: FleetState, th: Thresholds, demand: dict[str, kv_exhaustion.Demand]) -> list[Seen]:
    """Each ready replica's finding from a reading worked out afresh over its whole history: every trend fitted
    from scratch (a pass over all samples, no remembered answer), the peak by a pass, the confirmation always."""
    kv, out = th.kv, list[Seen]()
    ready = {k: v.ready_replicas for k, v in state.deployments().items()}

    def fresh_trend(history: Sequence[ReplicaSample], window_s: float, min_samples: int, trends: object) -> object:
        return fit_trend(history, window_s, min_samples) if history else None

    with mock.patch.object(kv_exhaustion, "window_trend", fresh_trend):
        for view in state.replicas():
            if not view.ready:
                continue
            history = state.replica_history(view.key)
            hint = demand.get(view.deployment_key)
            r = kv_exhaustion.read(view, history, kv, state.rate_window_s, hint, ready.get(view.deployment_key, 0))
            if r is None:
                continue
            start = view.sample.timestamp - state.rate_window_s
            window = [v for s in history if s.timestamp >= start and (v := fraction(s.kv_usage)) is not None]
            r = dataclasses.replace(r, peak_usage=max([r.usage, *window]))
            verdict = kv_exhaustion.judge(r, kv)
            if verdict is not None:
                evidence: dict[str, object] = {
                    "kv_usage_peak": r.peak_usage,
                    "kv_slope_per_s": r.slope_per_s,
                    "time_to_exhaustion_s": r.time_to_exhaustion_s,
                    "confirm_time_to_exhaustion_s": r.confirm_time_to_exhaustion_s,
                    "projected_usage": r.projected_usage,
                }
                out.append((view.sample.replica, str(verdict[0]), f"{view.sample.replica}: {verdict[1]}", evidence))
    return out


def _found(
    state: FleetState, th: Thresholds, now: float, demand: dict[str, kv_exhaustion.Demand], trends: KvTrends
) -> list[Seen]:
    keys = (
        "kv_usage_peak",
        "kv_slope_per_s",
        "time_to_exhaustion_s",
        "confirm_time_to_exhaustion_s",
        "projected_usage",
    )
    return [
        (f.subject.replica, str(f.severity), f.summary, {k: f.evidence[k] for k in keys})
        for f in kv_exhaustion.detect(state, thresholds=th, now=now, demand=demand, trends=trends)
    ]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ticks=histories(), th=thresholds, forecast=st.one_of(st.none(), st.floats(0.0, 40.0)))
def test_findings_equal_a_fresh_recomputation_over_the_whole_history(
    ticks: list[tuple[float, list[ReplicaSample]]], th: Thresholds, forecast: float | None
) -> None:
    state = FleetState()
    demand = (
        {}
        if forecast is None
        else {"ml/chat": kv_exhaustion.Demand(capacity_rps=10.0, forecast_rps=forecast, horizon_s=120.0)}
    )
    trends = KvTrends()  # kept across the ticks, as Detection keeps them
    for now, samples in ticks:
        state.observe(samples, [], now=now)
        assert _found(state, th, now, demand, trends) == _straightforward(state, th, demand)


class _Counted(Sequence[ReplicaSample]):
    """A history that counts the samples read from it."""

    def __init__(self, samples: Sequence[ReplicaSample]) -> None:
        self.samples, self.reads = tuple(samples), 0

    def __len__(self) -> int:
        return len(self.samples)

    @overload
    def __getitem__(self, i: int) -> ReplicaSample: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[ReplicaSample]: ...
    def __getitem__(self, i: int | slice) -> ReplicaSample | Sequence[ReplicaSample]:
        got = self.samples[i]
        self.reads += len(got) if isinstance(got, tuple) else 1
        return got


def test_a_reading_costs_the_same_with_an_hour_of_history_as_with_ten_minutes() -> None:
    # The windows (60 s, 120 s) are found by bisection: a reading after an hour reads ~1 sample more per window than
    # one after ten minutes, where a pass over the history would read its ~50 extra samples each time.
    reads = []
    for minutes in (10, 60):
        state = FleetState()
        for i in range(minutes * 12 + 1):
            state.observe([replica("r0", 5.0 * i, kv_usage=0.5 + 0.4 * (i % 24) / 24)], [], now=5.0 * i)
        (view,) = state.replicas()
        history = _Counted(state.replica_history(view.key))
        assert kv_exhaustion.read(view, history, DEFAULT.kv, state.rate_window_s) is not None
        reads.append((len(history), history.reads))
    (short, short_reads), (long, long_reads) = reads
    assert long > short + 40
    assert long_reads - short_reads <= 6


def test_the_arrivals_spread_is_read_over_the_whole_history() -> None:
    # Burst-aware (burst_margin on), each of the last 90 s of rates reaches back 60 s before it, past the windows the
    # detector reads otherwise (rate and trend: 60 s): there it reads the history as the reading over all of it does.
    kv = dataclasses.replace(DEFAULT.kv, burst_margin=1.0, burst_window_s=90.0, projected_usage=0.6)
    state, finished = FleetState(), 0.0
    for i in range(61):  # five minutes, arrivals of 1 and 3 a second by turns, a minute each
        state.observe([replica("r0", 5.0 * i, kv_usage=0.5, requests_finished=finished)], [], now=5.0 * i)
        finished += 5.0 * (1.0 if i // 12 % 2 == 0 else 3.0)
    demand = kv_exhaustion.Demand(capacity_rps=10.0, forecast_rps=3.0, horizon_s=120.0)
    (view,) = state.replicas()
    whole = kv_exhaustion.read(view, state.replica_history(view.key), kv, state.rate_window_s, demand, 1)
    calm = kv_exhaustion.read(
        view, state.replica_history(view.key), dataclasses.replace(kv, burst_margin=0.0), 60, demand, 1
    )
    assert whole is not None
    assert calm is not None
    assert whole.projected_usage != calm.projected_usage  # the spread counts here
    th = dataclasses.replace(DEFAULT, kv=kv)
    (finding,) = kv_exhaustion.detect(state, thresholds=th, now=300.0, demand={"ml/chat": demand})
    assert finding.evidence["projected_usage"] == whole.projected_usage
