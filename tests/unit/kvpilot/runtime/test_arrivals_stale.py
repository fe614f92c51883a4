"""A gateway series that stopped updating is not "no demand" (``collector.arrivals.max_sample_age_s``).

A query layer that keeps a series' last sample for the lookback (Thanos or remote-write set-ups without staleness
markers) answers a dead gateway's counter, or one whose scrapes fail, at its last value: read as is, its rate falls to
0 and the planner, handed 0 for the deployment in place of the engines' estimate, scales a busy fleet down. The query
is asked with ``timestamp()`` of it (``kvpilot.runtime.arrivals.timed``): a series whose newest sample is too old is
not read. The fake Prometheus below answers ``timed`` as Prometheus does (the values, and each series' sample time
under a label of ours, its metric name dropped); ``tests/integration/test_gateway_arrivals_prometheus.py`` asks a real
one."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from collector.clock import VirtualClock
from collector.promql.decode import PromQLError
from kvpilot.runtime.arrivals import TIME_LABEL, GatewayArrivals, LabelMapping, timed
from kvpilot.runtime.wiring import build_arrivals
from kvpilot.settings import load_settings
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, make_service, run_ticks
from tests.unit.kvpilot.runtime.test_loop_arrivals import TotalsPlanner
from tests.unit.kvpilot.runtime.test_loop_scale import KEY, FakeScale

QUERY = 'gateway_requests_total{job="gw"}'
URL = "http://prometheus:9090"


@dataclass
class Prometheus:
    """Per series (its pod label): the counter's value and the time it was last sampled, answered as a Prometheus
    query answers ``QUERY`` and ``timed(QUERY)``; ``refuse``: the timed query answered as Prometheus refuses one."""

    counters: dict[str, tuple[float, float]] = field(default_factory=dict)  # pod -> (value, sampled at)
    refuse: str | None = None
    asked: list[str] = field(default_factory=list)
    url: str = URL
    server_clock_offset_s: float | None = None  # as PromQLSource reads it from its answers' Date header

    async def query_vector(self, query: str, now: float) -> list[dict[str, Any]]:
        self.asked.append(query)
        labels = {pod: {"namespace": "llm", "deployment": "chat", "pod": pod} for pod in self.counters}
        values = [
            {"metric": {"__name__": "gateway_requests_total", **labels[pod]}, "value": [now, repr(value)]}
            for pod, (value, _) in self.counters.items()
        ]
        if query == QUERY:
            return values
        assert query == timed(QUERY)
        if self.refuse is not None:
            raise PromQLError(f"{URL}: HTTP 422: {self.refuse}")
        times = [
            {"metric": {**labels[pod], TIME_LABEL: "1"}, "value": [now, repr(sampled)]}
            for pod, (_, sampled) in self.counters.items()
        ]
        return values + times


def _errors(service: object) -> float:
    return float(service.loop.metrics.stage_errors.labels("arrivals")._value.get())  # type: ignore[attr-defined]


async def test_a_frozen_counter_leaves_the_busy_deployment_its_engines_estimate(tmp_path: Path) -> None:
    # before: the frozen counter read as a rate of 0 once the readings spanned half the window, and the planner was
    # handed {llm/chat: 0.0} for a deployment whose replicas were busy
    clock = VirtualClock(START)
    prometheus = Prometheus({"gw-a": (5000.0, START - 300.0)})  # the gateway died 5 minutes ago
    settings = load_settings(None, collector={"arrivals": {"source": "promql", "promql_url": URL, "query": QUERY}})
    gateway = build_arrivals(settings, prometheus)
    planner = TotalsPlanner()
    service, restored, timer = make_service(
        f"sqlite:///{tmp_path / 'kvpilot.db'}",
        clock,
        ScriptedFleet(clock),
        planner=planner,
        scale=FakeScale(replicas=2),
        arrivals=gateway,
    )
    await service.start(restored)
    await run_ticks(service, timer, 10)  # 45 s of readings: more than half the 60 s rate window
    assert [rates for _, rates in planner.calls] == [None] * len(planner.calls)  # the engines' estimate, every tick
    assert _errors(service) == len(planner.calls)  # counted once a tick
    # the gateway is back: its counter moves again, sampled now; the rate it reads reaches the planner
    for _ in range(8):
        prometheus.counters["gw-a"] = (prometheus.counters["gw-a"][0] + 50.0, clock.now())
        await run_ticks(service, timer, 1)
    assert planner.calls[-1][1] == {KEY: pytest.approx(10.0)}
    service.stop.set()
    await service.wait()


async def _rates(gateway: GatewayArrivals, prometheus: Prometheus, ticks: int) -> list[dict[str, float]]:
    """The rates read over ``ticks`` 5 s ticks, each pod's counter growing by 50 and sampled 2 s before the tick."""
    got = []
    for tick in range(ticks):
        now = START + 5.0 * tick
        for pod, (value, _) in prometheus.counters.items():
            prometheus.counters[pod] = (value + 50.0, now - 2.0)
        got.append(dict((await gateway.read(now, now - START)).rates))
    return got


async def test_a_moving_counter_reads_as_it_did_without_times() -> None:
    alone, fresh = Prometheus({"gw-a": (0.0, 0.0)}), Prometheus({"gw-a": (0.0, 0.0)})
    untimed = GatewayArrivals(alone.query_vector, QUERY, LabelMapping(), window_s=60.0)
    gateway = GatewayArrivals(fresh.query_vector, QUERY, LabelMapping(), window_s=60.0, max_sample_age_s=120.0)
    got = await _rates(gateway, fresh, 20)
    assert got == await _rates(untimed, alone, 20)  # the same floats, tick by tick
    assert got[-1] == {KEY: 10.0}
    assert set(alone.asked) == {QUERY}
    assert set(fresh.asked) == {timed(QUERY)}
    assert gateway.stale == 0


async def test_one_gateway_pod_stopped_the_other_still_counts(caplog: pytest.LogCaptureFixture) -> None:
    prometheus = Prometheus({"gw-a": (0.0, 0.0), "gw-b": (0.0, 0.0)})
    gateway = GatewayArrivals(prometheus.query_vector, QUERY, LabelMapping(), window_s=60.0, max_sample_age_s=60.0)
    assert (await _rates(gateway, prometheus, 20))[-1] == {KEY: pytest.approx(20.0)}
    del prometheus.counters["gw-b"]  # gw-b died: a query layer without staleness markers keeps its last sample
    frozen = (START + 5.0 * 19 - 2.0, START + 5.0 * 19 - 2.0)
    with caplog.at_level(logging.WARNING, logger="kvpilot.runtime.arrivals"):
        got = []
        for tick in range(20, 40):
            now = START + 5.0 * tick
            prometheus.counters["gw-a"] = (prometheus.counters["gw-a"][0] + 50.0, now - 2.0)
            prometheus.counters["gw-b"] = (1000.0, frozen[0])
            got.append((now - frozen[0], dict((await gateway.read(now, now - START)).rates), gateway.stale))
    # read while its last sample is at most 60 s old (its rate falling as the window spans its silence), then left out
    assert [stale for age, _, stale in got] == [int(age > 60.0) for age, _, _ in got]
    assert got[-1][1] == {KEY: pytest.approx(10.0)}  # gw-a's own 10 requests/s, not 10 averaged with a dead 0
    said = [r.getMessage() for r in caplog.records if "was last sampled" in r.getMessage()]
    assert len(said) == 1
    assert 'pod="gw-b"' in said[0]
    assert "max_sample_age_s, 60 s" in said[0]


async def test_a_query_the_server_refuses_to_wrap_is_asked_alone(caplog: pytest.LogCaptureFixture) -> None:
    # timestamp() of series that differ only in their name: "vector cannot contain metrics with the same labelset"
    prometheus = Prometheus({"gw-a": (0.0, 0.0)}, refuse="execution: vector cannot contain metrics with the same")
    gateway = GatewayArrivals(prometheus.query_vector, QUERY, LabelMapping(), window_s=60.0, max_sample_age_s=60.0)
    with caplog.at_level(logging.WARNING, logger="kvpilot.runtime.arrivals"):
        got = await _rates(gateway, prometheus, 20)
    assert got[-1] == {KEY: pytest.approx(10.0)}  # read every tick, without times
    assert prometheus.asked[:6] == [timed(QUERY), QUERY] * 3  # refused three ticks in a row: asked alone a while
    assert set(prometheus.asked[6:]) == {QUERY}
    assert sum("it is asked alone, tried again every 600 s" in r.getMessage() for r in caplog.records) == 1
    assert not gateway.timed


async def test_a_failing_server_is_not_asked_twice() -> None:
    prometheus = Prometheus({"gw-a": (0.0, 0.0)})
    gateway = GatewayArrivals(prometheus.query_vector, QUERY, LabelMapping(), window_s=60.0, max_sample_age_s=60.0)

    async def unavailable(query: str, now: float) -> list[dict[str, Any]]:
        prometheus.asked.append(query)
        raise PromQLError(f"{URL}: HTTP 503: service unavailable")

    gateway._query = unavailable
    with pytest.raises(PromQLError, match="503"):  # the loop counts it; that tick keeps the engines' estimate
        await gateway.read(START, 0.0)
    assert prometheus.asked == [timed(QUERY)]


async def test_a_refused_timed_query_is_tried_again_after_a_while() -> None:
    """Before, three refusals in a row turned the samples' age off for the process's life, a refusal that was the
    server's passing trouble (a query layer mid-upgrade) included."""
    prometheus = Prometheus({"gw-a": (0.0, 0.0)}, refuse="execution: vector cannot contain metrics with the same")
    gateway = GatewayArrivals(prometheus.query_vector, QUERY, LabelMapping(), window_s=60.0, max_sample_age_s=60.0)
    await _rates(gateway, prometheus, 3)
    assert not gateway.timed
    prometheus.refuse = None  # the server takes it again
    prometheus.asked.clear()
    for tick in range(3, 200):  # 5 s ticks: 985 s
        now = START + 5.0 * tick
        value, _ = prometheus.counters["gw-a"]
        prometheus.counters["gw-a"] = (value + 50.0, now - 2.0)
        await gateway.read(now, now - START)
        if gateway.timed:
            break
    assert gateway.timed, "never tried again"
    assert 600.0 <= (tick - 2) * 5.0 <= 605.0  # asked alone for TIMED_AGAIN_AFTER_S after the third refusal
    assert prometheus.asked[-1] == timed(QUERY)
    assert prometheus.asked[:-1] == [QUERY] * (len(prometheus.asked) - 1)


async def test_a_server_error_that_names_execution_is_no_refusal_of_the_query() -> None:
    """A proxy's or query layer's own failure (HTTP 503 "query execution timed out") is the server's trouble: it is
    counted as any failure (the loop keeps the engines' estimate that tick), and the samples' age stays read. Before,
    the word "execution" anywhere read as a refusal of the wrapped query: three such ticks turned it off for good."""
    prometheus = Prometheus({"gw-a": (0.0, 0.0)})
    gateway = GatewayArrivals(prometheus.query_vector, QUERY, LabelMapping(), window_s=60.0, max_sample_age_s=60.0)

    async def overloaded(query: str, now: float) -> list[dict[str, Any]]:
        prometheus.asked.append(query)
        raise PromQLError(f"{URL}/api/v1/query: HTTP 503: query execution timed out")

    gateway._query = overloaded
    for tick in range(4):
        with pytest.raises(PromQLError, match="503"):
            await gateway.read(START + 5.0 * tick, 5.0 * tick)
    assert prometheus.asked == [timed(QUERY)] * 4  # never asked alone: the server failed, not the query
    assert gateway.timed


def _own(service: object, name: str) -> float:
    page = generate_latest(service.registry).decode()  # type: ignore[attr-defined]
    (line,) = [x for x in page.splitlines() if x.startswith(name + " ")]
    return float(line.split()[1])


async def test_whether_ages_are_read_and_the_server_clock_are_on_metrics(tmp_path: Path) -> None:
    clock = VirtualClock(START)
    prometheus = Prometheus({"gw-a": (0.0, START)}, server_clock_offset_s=-3600.0)  # an hour behind
    settings = load_settings(None, collector={"arrivals": {"source": "promql", "promql_url": URL, "query": QUERY}})
    gateway = build_arrivals(settings, prometheus)
    service, restored, timer = make_service(
        f"sqlite:///{tmp_path / 'kvpilot.db'}",
        clock,
        ScriptedFleet(clock),
        scale=FakeScale(replicas=2),
        arrivals=gateway,
    )
    await service.start(restored)
    for _ in range(3):  # the counter moves, sampled 2 s ago on the server's clock
        prometheus.counters["gw-a"] = (prometheus.counters["gw-a"][0] + 50.0, clock.now() - 3600.0 - 2.0)
        await run_ticks(service, timer, 1)
    assert _own(service, "kvpilot_arrivals_clock_offset_seconds") == -3600.0
    assert _own(service, "kvpilot_arrivals_sample_age_read") == 1.0
    assert _errors(service) == 0  # not stale: its age read on its clock
    prometheus.refuse = "execution: vector cannot contain metrics with the same labelset"
    await run_ticks(service, timer, 3)
    assert _own(service, "kvpilot_arrivals_sample_age_read") == 0.0  # asked alone, for now
    service.stop.set()
    await service.wait()
