"""`collector.arrivals` against Debian's real Prometheus scraping a gateway's page: the Gateway API Inference
Extension's endpoint picker counts requests by model in ``inference_objective_request_total`` (model_name,
target_model_name), Prometheus scrapes it every second, and ``GatewayArrivals`` built from settings reads the rate
and the count per deployment through the PromQL source's client, across a restart of the gateway."""

from __future__ import annotations

import asyncio
import logging
import statistics
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from kvpilot.runtime.arrivals import TIME_LABEL, Arrivals, GatewayArrivals, timed
from kvpilot.runtime.wiring import build_arrivals
from kvpilot.settings import Settings, load_settings
from tests.services.pages import serve_pages
from tests.services.prometheus import run_prometheus

pytestmark = pytest.mark.integration

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
RATE = 20.0  # requests/s the page counts for MODEL
WINDOW_S = 12.0
HANG_GUARD_S = 60.0


class GatewayPage(Mapping[str, bytes]):
    """The endpoint picker's /metrics: its counter grows at RATE a second from its (re)start."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.counted_before_restarts = 0.0

    def restart(self) -> None:
        with self.lock:
            self.counted_before_restarts += RATE * (time.monotonic() - self.started)
            self.started = time.monotonic()

    def counted(self) -> float:
        """Every request counted since the test began, restarts included."""
        with self.lock:
            return self.counted_before_restarts + RATE * (time.monotonic() - self.started)

    def __getitem__(self, path: str) -> bytes:
        if path != "/metrics":
            raise KeyError(path)
        with self.lock:
            value = int(RATE * (time.monotonic() - self.started))
        return (
            "# HELP inference_objective_request_total [ALPHA] Counter of inference objective requests broken out for "
            "each model and target model.\n"
            "# TYPE inference_objective_request_total counter\n"
            f'inference_objective_request_total{{model_name="{MODEL}",target_model_name="{MODEL}"}} {value}\n'
            'inference_objective_request_total{model_name="unrouted",target_model_name="unrouted"} 3\n'
            # another family with the same labels: timestamp() of both names at once is refused (their name dropped,
            # two series with one label set)
            "# TYPE inference_objective_request_copy_total counter\n"
            f'inference_objective_request_copy_total{{model_name="{MODEL}",target_model_name="{MODEL}"}} {value}\n'
        ).encode()

    def __iter__(self) -> Iterator[str]:
        return iter(["/metrics"])

    def __len__(self) -> int:
        return 1


async def _read_for(gateway: GatewayArrivals, seconds: float, rated: int = 0) -> list[Arrivals]:
    """Readings every 0.5 s for ``seconds``, and on until the last ``rated`` of them carry a rate for the deployment
    (on a loaded machine fewer readings fit in the time, and the first has none): at most HANG_GUARD_S more."""
    got: list[Arrivals] = []
    deadline = time.monotonic() + seconds

    def rated_enough() -> bool:
        return len(got) >= rated and all("llm/chat" in a.rates for a in got[len(got) - rated :])

    while time.monotonic() < deadline or not rated_enough():
        assert time.monotonic() < deadline + HANG_GUARD_S, f"no rate in {rated} readings in a row"
        got.append(await gateway.read(time.time(), time.monotonic()))
        await asyncio.sleep(0.5)
    return got


async def test_gateway_counter_read_through_a_real_prometheus(tmp_path: Path) -> None:
    page = GatewayPage()
    with serve_pages(page) as (host, port):
        scrape = [{"job_name": "epp", "static_configs": [{"targets": [f"{host}:{port}"]}]}]
        with run_prometheus(tmp_path, scrape_configs=scrape) as prom:
            prom.wait_for(f'inference_objective_request_total{{model_name="{MODEL}"}}', timeout_s=30)
            settings = load_settings(
                collector={
                    "rate_window_s": WINDOW_S,
                    "discovery": {"kind": "static"},
                    "arrivals": {
                        "source": "promql",
                        "promql_url": prom.url,
                        "query": 'inference_objective_request_total{job="epp"}',
                        "deployment_label": "model_name",
                        "deployments": {MODEL: "llm/chat"},
                    },
                }
            )
            gateway = build_arrivals(settings)
            assert gateway is not None
            try:
                await _check(gateway, page)
            finally:
                await gateway.aclose()


async def _check(gateway: GatewayArrivals, page: GatewayPage) -> None:
    # Bounds leave room for a loaded machine: the counter moves once a scrape (1 s, later when Prometheus is slow),
    # so a rate over the window is off by up to a scrape's requests over its span, and the count by a scrape or two.
    first = page.counted()
    got = await _read_for(gateway, WINDOW_S + 2, rated=8)
    last = got[-1]
    assert set(last.rates) == set(last.totals) == {"llm/chat"}  # the unrouted model is left out
    assert statistics.median(a.rates["llm/chat"] for a in got[-8:]) == pytest.approx(RATE, rel=0.2)
    # the count since the first reading, as Prometheus last scraped it
    assert last.totals["llm/chat"] == pytest.approx(page.counted() - first, abs=5 * RATE)

    page.restart()  # the endpoint picker restarts: its counter starts again from zero
    got = await _read_for(gateway, WINDOW_S + 2)
    rates = [a.rates["llm/chat"] for a in got if "llm/chat" in a.rates]
    assert len(rates) == len(got)
    assert all(0 < r < 2 * RATE for r in rates)  # no negative rate, no burst read from the reset
    assert statistics.median(rates[-8:]) == pytest.approx(RATE, rel=0.2)
    totals = [a.totals["llm/chat"] for a in got]
    assert totals == sorted(totals)  # the count never goes down


async def test_the_query_asked_with_its_sample_times_on_a_real_prometheus(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``collector.arrivals.max_sample_age_s``: Prometheus takes the query wrapped in ``timed`` and answers each
    series' newest sample time beside its value; a query whose ``timestamp()`` it refuses (two metric names, one
    label set) is asked alone, read as before."""
    page = GatewayPage()
    query = 'inference_objective_request_total{job="epp"}'
    with serve_pages(page) as (host, port):
        scrape = [{"job_name": "epp", "static_configs": [{"targets": [f"{host}:{port}"]}]}]
        with run_prometheus(tmp_path, scrape_configs=scrape) as prom:
            prom.wait_for(f'inference_objective_request_total{{model_name="{MODEL}"}}', timeout_s=30)
            now = time.time()
            answer = prom.query(timed(query), at=now)
            values = {tuple(sorted(s["metric"].items())) for s in answer if TIME_LABEL not in s["metric"]}
            times = {
                tuple(sorted((k, v) for k, v in s["metric"].items() if k != TIME_LABEL)): float(s["value"][1])
                for s in answer
                if TIME_LABEL in s["metric"]
            }
            assert len(values) == 2  # the query's own series, their values as the query alone answers them
            assert {tuple((k, v) for k, v in labels if k != "__name__") for labels in values} == set(times)
            # a sample time, not the evaluation time: within the last scrapes (1 s apart; a loaded machine is slower)
            assert all(now - 30 < t <= now for t in times.values())
            assert any(t < now for t in times.values())

            def settings(query: str) -> Settings:
                return load_settings(
                    collector={
                        "rate_window_s": WINDOW_S,
                        "discovery": {"kind": "static"},
                        "arrivals": {
                            "source": "promql",
                            "promql_url": prom.url,
                            "query": query,
                            "deployment_label": "model_name",
                            "deployments": {MODEL: "llm/chat"},
                        },
                    }
                )

            fresh = build_arrivals(settings(query))
            both = build_arrivals(settings('{__name__=~"inference_objective_request(_copy)?_total",job="epp"}'))
            assert fresh is not None
            assert both is not None
            try:
                with caplog.at_level(logging.WARNING, logger="kvpilot.runtime.arrivals"):
                    got = await _read_for(fresh, WINDOW_S / 2 + 2, rated=4)
                    assert fresh.stale == 0
                    assert statistics.median(a.rates["llm/chat"] for a in got[-4:]) == pytest.approx(RATE, rel=0.3)
                    got = await _read_for(both, WINDOW_S / 2 + 2, rated=4)
                    # both families summed (one page counted twice), read without times
                    assert statistics.median(a.rates["llm/chat"] for a in got[-4:]) == pytest.approx(2 * RATE, rel=0.3)
                said = [r.getMessage() for r in caplog.records if "it is asked alone, tried again" in r.getMessage()]
                assert len(said) == 1
                assert "same labelset" in said[0]
            finally:
                await fresh.aclose()
                await both.aclose()
