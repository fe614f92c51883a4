"""A gateway's request counter into per-deployment rates and totals (``kvpilot.runtime.arrivals``): the label mapping,
resets, the steps of a counter Prometheus scrapes less often than the loop ticks, and readings that stop."""

from __future__ import annotations

import itertools
import logging
import math
from typing import Any

import pytest

from collector.promql.decode import PromQLError
from kvpilot.runtime.arrivals import CounterRates, GatewayArrivals, LabelMapping, SeriesId, timed

KEY = "llm/chat"
A: SeriesId = (("pod", "gw-a"),)
B: SeriesId = (("pod", "gw-b"),)


def _series(value: float | str, **labels: str) -> dict[str, Any]:
    return {"metric": {"__name__": "inference_objective_request_total", **labels}, "value": [0, str(value)]}


@pytest.mark.parametrize(
    ("mapping", "labels", "key"),
    [
        # the default: namespace and deployment labels
        (LabelMapping(), {"namespace": "llm", "deployment": "chat"}, "llm/chat"),
        # no namespace label: nothing, rather than a guess
        (LabelMapping(), {"deployment": "chat"}, None),
        # a fixed namespace for a gateway whose series carry none
        (LabelMapping(namespace="llm"), {"deployment": "chat"}, "llm/chat"),
        # other label names (ingress-nginx: exported_namespace, service)
        (
            LabelMapping(deployment_label="service", namespace_label="exported_namespace"),
            {"exported_namespace": "llm", "service": "chat"},
            "llm/chat",
        ),
        # a value map: the Inference Extension counts by model name
        (
            LabelMapping(deployment_label="model_name", deployments={"meta-llama/Llama-3.1-8B": "llm/chat"}),
            {"model_name": "meta-llama/Llama-3.1-8B"},
            "llm/chat",
        ),
        # a value the map does not list is left out
        (LabelMapping(deployment_label="model_name", deployments={"a": "llm/chat"}), {"model_name": "b"}, None),
        # an empty label is no label
        (LabelMapping(), {"namespace": "llm", "deployment": ""}, None),
    ],
)
def test_mapping(mapping: LabelMapping, labels: dict[str, str], key: str | None) -> None:
    assert mapping.key(labels) == key


def test_mapping_says_which_labels_the_series_lack() -> None:
    why = LabelMapping().why_not({"__name__": "x", "model_name": "m", "job": "epp"})
    assert "'deployment' nor 'namespace'" in why
    assert "__name__, job, model_name" in why
    why = LabelMapping(deployment_label="model_name", deployments={"a": "llm/chat"}).why_not({"model_name": "b"})
    assert "model_name='b' is not among collector.arrivals.deployments (a)" in why


def test_rate_over_the_window_once_half_of_it_is_read() -> None:
    counts = CounterRates(window_s=60.0)
    seen = [counts.observe(t, [(KEY, A, 1000.0 + 10.0 * t)]) for t in range(0, 65, 5)]
    assert seen[0].rates == {}
    assert seen[5].rates == {}
    assert seen[6].rates[KEY] == pytest.approx(10.0)  # 30 s read
    assert seen[-1].rates[KEY] == pytest.approx(10.0)
    # the first reading counts nothing (the gateway's count runs from its own start); then 10 a second
    assert seen[0].totals == {KEY: 0.0}
    assert seen[-1].totals[KEY] == pytest.approx(600.0)


def test_a_counter_that_goes_down_restarted() -> None:
    counts = CounterRates(window_s=60.0)
    for t in range(0, 35, 5):
        counts.observe(t, [(KEY, A, 5000.0 + 10.0 * t)])
    # the gateway restarted between 30 and 35 s: its counter reads 40, the requests since its start
    got = counts.observe(35, [(KEY, A, 40.0)])
    for t in range(40, 65, 5):
        got = counts.observe(t, [(KEY, A, 40.0 + 10.0 * (t - 35))])
    assert got.rates[KEY] == pytest.approx(10.0 - 10.0 / 60)  # 590 counted in 60 s (10 lost at the restart)
    assert got.totals[KEY] == pytest.approx(590.0)


def test_series_of_one_deployment_are_summed_each_with_its_own_resets() -> None:
    counts = CounterRates(window_s=60.0)
    got = counts.observe(0, [(KEY, A, 100.0), (KEY, B, 9000.0)])
    for t in range(5, 65, 5):
        b = 9000.0 + 4.0 * t if t < 30 else 2.0 + 4.0 * (t - 30)  # gw-b restarts at 30 s
        got = counts.observe(t, [(KEY, A, 100.0 + 6.0 * t), (KEY, B, b)])
    # gw-a 360; gw-b 100 before its restart, the 2 it read after, 120 since. The sum of the two counters went from
    # 9,350 to 282 at 30 s: read as one restart, 282 requests where 32 came
    assert got.rates[KEY] == pytest.approx((360.0 + 100.0 + 2.0 + 120.0) / 60)


def test_a_step_scraped_every_30_s_is_spread_over_the_time_it_built() -> None:
    """Prometheus scrapes the gateway every 30 s and the loop ticks every 5 s: the counter moves by 300 once in six
    ticks. The totals move 50 a tick (10/s, the rate it was), not 300 in one tick (60/s to the burst floor)."""
    counts = CounterRates(window_s=60.0)
    totals = []
    for t in range(0, 185, 5):
        scraped = (t // 30) * 30  # the value as of the gateway's last scrape
        totals.append(counts.observe(t, [(KEY, A, 10.0 * scraped)]).totals[KEY])
    steps = [b - a for a, b in itertools.pairwise(totals)]
    assert max(steps[12:]) == pytest.approx(50.0)  # after the first step (no cadence known before it)
    assert min(steps[12:]) == pytest.approx(50.0)


def test_a_series_back_after_a_missed_scrape_is_no_burst() -> None:
    """Two gateway pods count 10 requests/s each, scraped every 30 s; gw-b's scrape at 90 s fails, so its series is
    gone from the answers until its scrape at 120 s, which holds 60 s of its requests. gw-a was read throughout: the
    deployment's totals went on, and the burst floor steps them tick by tick. They move 100 to 125 a tick (20/s, the
    backlog caught up over the rate window), not most of gw-b's 60 s handed over in one tick (400: a burst of 4 times
    the rate, held burst_hold_s); nothing is lost."""
    counts = CounterRates(window_s=60.0)
    totals = []
    for t in range(0, 305, 5):
        scraped = (t // 30) * 30
        readings = [(KEY, A, 10.0 * scraped)]
        if not 90 <= t < 120:
            readings.append((KEY, B, 10.0 * scraped))
        totals.append(counts.observe(t, readings).totals[KEY])
    steps = [b - a for a, b in itertools.pairwise(totals)]
    assert max(steps[12:]) <= 1.5 * 100.0
    for t in range(305, 425, 5):  # no more requests: what is still pending is handed over, all of it
        got = counts.observe(t, [(KEY, A, 3000.0), (KEY, B, 3000.0)])
    assert got.totals[KEY] == pytest.approx(6000.0)


def test_a_deployment_back_after_a_missed_scrape_keeps_its_pace() -> None:
    """One gateway pod at 10 requests/s, scraped every 30 s, its scrape at 90 s failed: the deployment is read by no
    series until 120 s, so the burst floor steps nothing across the gap (no total the tick before). From there its
    totals move 50 a tick as before the gap, the backlog not caught up on top (75 a tick: 1.5 times the rate)."""
    counts = CounterRates(window_s=60.0)
    totals: list[float | None] = []
    for t in range(0, 305, 5):
        scraped = (t // 30) * 30
        totals.append(counts.observe(t, [] if 90 <= t < 120 else [(KEY, A, 10.0 * scraped)]).totals.get(KEY))
    steps = [b - a for a, b in itertools.pairwise(totals) if a is not None and b is not None]
    assert max(steps[6:]) == pytest.approx(50.0)
    assert min(steps[6:]) == pytest.approx(50.0)


def test_no_reading_for_twice_the_window_starts_over() -> None:
    counts = CounterRates(window_s=60.0)
    for t in range(0, 65, 5):
        counts.observe(t, [(KEY, A, 10.0 * t)])
    # the gateway's series are gone (or every read failed) for 3 minutes, then come back at 1 request/s
    got = counts.observe(245, [(KEY, A, 5000.0)])
    assert got.rates == {}  # no rate spanning the outage: the engines' estimate serves until one is read again
    for t in range(250, 280, 5):
        got = counts.observe(t, [(KEY, A, 5000.0 + (t - 245))])
    assert got.rates[KEY] == pytest.approx(1.0)


def test_a_deployment_not_read_this_tick_gets_nothing() -> None:
    counts = CounterRates(window_s=60.0)
    for t in range(0, 65, 5):
        counts.observe(t, [(KEY, A, 10.0 * t), ("llm/code", B, 2.0 * t)])
    got = counts.observe(65, [(KEY, A, 650.0)])
    assert set(got.rates) == set(got.totals) == {KEY}


class _Prometheus:
    def __init__(self, *answers: list[dict[str, Any]] | Exception) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, float]] = []

    async def __call__(self, query: str, now: float) -> list[dict[str, Any]]:
        self.asked.append((query, now))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


async def test_gateway_arrivals_reads_the_query_and_maps_its_series(caplog: pytest.LogCaptureFixture) -> None:
    model = "meta-llama/Llama-3.1-8B-Instruct"
    mapping = LabelMapping(deployment_label="model_name", deployments={model: KEY})
    answers = [
        [
            _series(100 + 10 * t, model_name=model, target_model_name=model, prometheus_replica="a"),
            # the other copy of an HA pair: read once
            _series(100 + 10 * t, model_name=model, target_model_name=model, prometheus_replica="b"),
            _series(7, model_name="unlisted"),
            _series("NaN", model_name=model, target_model_name="lora"),
        ]
        for t in range(0, 35, 5)
    ]
    prometheus = _Prometheus(*answers, PromQLError("http://p:9090: HTTP 503"))
    gateway = GatewayArrivals(
        prometheus, "inference_objective_request_total", mapping, window_s=60.0, replica_labels=("prometheus_replica",)
    )
    with caplog.at_level(logging.WARNING, logger="kvpilot.runtime.arrivals"):
        for t in range(0, 35, 5):
            got = await gateway.read(1e9 + t, float(t))
    assert prometheus.asked[-1] == ("inference_objective_request_total", 1e9 + 30)
    assert got.rates == {KEY: pytest.approx(10.0)}
    assert got.totals == {KEY: pytest.approx(300.0)}
    said = [r.getMessage() for r in caplog.records]
    assert sum("model_name='unlisted' is not among" in m for m in said) == 1  # said once, not every tick
    assert sum("NaN" in m and "not a count" in m for m in said) == 1
    with pytest.raises(PromQLError):  # the loop counts it and decides on the engines' estimate
        await gateway.read(1e9 + 35, 35.0)


async def test_gateway_arrivals_says_once_when_the_query_finds_nothing(caplog: pytest.LogCaptureFixture) -> None:
    gateway = GatewayArrivals(_Prometheus([], []), "envoy_cluster_upstream_rq_total", LabelMapping(), window_s=60.0)
    with caplog.at_level(logging.WARNING, logger="kvpilot.runtime.arrivals"):
        assert await gateway.read(1e9, 0.0) == await gateway.read(1e9 + 5, 5.0)
    assert [r.getMessage().count("returns no series") for r in caplog.records] == [1]


def test_rates_are_finite() -> None:
    counts = CounterRates(window_s=60.0)
    got = counts.observe(0, [(KEY, A, 1.0)])
    for t in (30, 30, 31):  # the same time twice: a step of no length never divides by zero
        got = counts.observe(t, [(KEY, A, 2.0)])
    assert all(math.isfinite(v) for v in (*got.rates.values(), *got.totals.values()))


async def test_built_from_settings_on_the_discovery_prometheus_through_its_client() -> None:
    """`collector.arrivals` without a URL of its own reads the Prometheus discovery reads, through its client."""
    from kvpilot.runtime.wiring import build_arrivals
    from kvpilot.settings import load_settings

    url = "http://prometheus:9090"
    settings = load_settings(
        collector={
            "rate_window_s": 30,
            "discovery": {"kind": "promql", "promql_url": url},
            "arrivals": {"source": "promql", "query": "x_total", "namespace": "llm"},
        }
    )
    prometheus = _Prometheus([_series(5, deployment="chat")])
    prometheus.url = url  # type: ignore[attr-defined]
    prometheus.query_vector = prometheus  # type: ignore[attr-defined]
    gateway = build_arrivals(settings, prometheus)
    assert gateway is not None
    assert gateway.counts.window_s == 30
    assert (await gateway.read(1e9, 0.0)).totals == {KEY: 0.0}
    # asked with its sample times (collector.arrivals.max_sample_age_s, test_arrivals_stale.py)
    assert prometheus.asked == [(timed("x_total"), 1e9)]
    assert gateway.max_sample_age_s == 120.0
    assert build_arrivals(load_settings()) is None  # engines, the default: no stage
