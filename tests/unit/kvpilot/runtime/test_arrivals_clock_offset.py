"""A Prometheus API whose clock is not kvpilot's (``collector.arrivals.max_sample_age_s``): the samples' times are on
the server's clock, so their age is read on it, as its answers' Date header gives it (RFC 9110). Before, kvpilot's
wall clock less the sample's time: a server an hour behind had every gateway series read an hour old, left out as
stale every tick, and the planner never had the gateway's rate; one two minutes ahead would have hidden a dead
gateway for two minutes. The server here is a loopback HTTP server answering ``timed`` queries as Prometheus does,
read through the PromQL source's own client."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import Message

import pytest

from collector.discovery.promql import PromQLSource
from kvpilot.runtime.arrivals import TIME_LABEL, GatewayArrivals, LabelMapping
from tests.helpers.json_server import JsonServer

QUERY = 'gateway_requests_total{job="gw"}'
BEHIND_S = 3600.0


@contextmanager
def _prometheus_behind(offset_s: float, frozen: threading.Event) -> Iterator[str]:
    """A Prometheus API ``offset_s`` behind this host's clock: its Date header and its samples' times on that clock;
    the gateway's counter grows 10 a second and is sampled 2 s before each query, until ``frozen``."""
    started = time.time() - offset_s
    last = [started]

    def answer(path: str, raw: bytes, headers: Message) -> tuple[int, bytes]:
        server_now = time.time() - offset_s
        if not frozen.is_set():
            last[0] = server_now - 2.0
        labels = {"namespace": "llm", "deployment": "chat", "pod": "gw-a"}
        result = [
            {
                "metric": {"__name__": "gateway_requests_total", **labels},
                "value": [server_now, repr(1000.0 + 10.0 * (last[0] - started))],
            },
            {"metric": {**labels, TIME_LABEL: "1"}, "value": [server_now, repr(last[0])]},
        ]
        return 200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()

    server = JsonServer(answer, clock=lambda: time.time() - offset_s)
    try:
        yield server.url
    finally:
        server.close()


async def test_samples_on_a_server_clock_an_hour_behind_are_read_by_their_age_on_it() -> None:
    frozen = threading.Event()
    with _prometheus_behind(BEHIND_S, frozen) as url:
        source = PromQLSource(url, reader="thread", timeout_s=5.0)
        gateway = GatewayArrivals(
            source.query_vector,
            QUERY,
            LabelMapping(),
            window_s=60.0,
            max_sample_age_s=120.0,
            server_clock_offset_s=lambda: source.server_clock_offset_s,
        )
        try:
            stale = []
            for tick in range(8):  # the rate is read once the readings span half the window (a 5 s tick each)
                arrivals = await gateway.read(time.time(), 5.0 * tick)
                stale.append(gateway.stale)
            assert stale == [0] * 8  # before: 1 every tick, "last sampled 3602 s ago"
            assert set(arrivals.rates) == {"llm/chat"}
            assert gateway.clock_offset_s == pytest.approx(-BEHIND_S, abs=2.0)
            frozen.set()  # the gateway stops: its series' sample ages on the server's clock
            await gateway.read(time.time() + 121.0, 200.0)  # two minutes on, by our clock and by its
            assert gateway.stale == 1  # a dead gateway is still found out, whatever the clocks say
        finally:
            await source.aclose()
