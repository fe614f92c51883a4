"""The gateway's counter is asked at the time on the Prometheus API's clock. Prometheus answers an instant query with
each series' newest sample of the 5 minutes before the `time` asked (its lookback delta): asked at kvpilot's time, a
server an hour behind answered no series at all, whatever 7250a79 allowed for in the samples' age (its test server
answered every query at its own time, as Prometheus does not). Checked against Prometheus 2.x itself: `up` asked at
its time answers, asked an hour later or earlier answers `[]` (session 30 helper E, review of 7250a79)."""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import Message

import pytest

from collector.discovery.promql import PromQLSource
from kvpilot.runtime.arrivals import TIME_LABEL, GatewayArrivals, LabelMapping
from tests.helpers.json_server import JsonServer

QUERY = 'gateway_requests_total{job="gw"}'
LOOKBACK_S = 300.0  # Prometheus' default --query.lookback-delta


@contextmanager
def _prometheus(offset_s: float) -> Iterator[str]:
    """A Prometheus API ``offset_s`` behind this host's clock (negative: ahead): its Date header and its samples on that
    clock, the gateway's counter growing 10 a second, sampled every second; an instant query answers the sample at or
    before the ``time`` asked, if it is within the lookback, as Prometheus does."""
    started = time.time() - offset_s - 600.0  # scraped for the last 10 minutes

    def answer(path: str, raw: bytes, headers: Message) -> tuple[int, bytes]:
        form = urllib.parse.parse_qs(raw.decode())
        asked = float(form["time"][0])
        newest = float(int(time.time() - offset_s))  # scraped every whole second of the server's clock
        sampled = min(newest, float(int(asked)))
        result = []
        if started <= sampled and asked - sampled <= LOOKBACK_S:
            labels = {"namespace": "llm", "deployment": "chat", "pod": "gw-a"}
            count = 1000.0 + 10.0 * (sampled - started)
            result = [
                {"metric": {"__name__": "gateway_requests_total", **labels}, "value": [asked, repr(count)]},
                {"metric": {**labels, TIME_LABEL: "1"}, "value": [asked, repr(sampled)]},
            ]
        return 200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()

    server = JsonServer(answer, clock=lambda: time.time() - offset_s)
    try:
        yield server.url
    finally:
        server.close()


@pytest.mark.parametrize("offset_s", [3600.0, -3600.0])  # an hour behind, an hour ahead
async def test_a_server_an_hour_off_is_asked_at_its_own_time(offset_s: float) -> None:
    with _prometheus(offset_s) as url:
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
            named, stale = [], []
            for tick in range(10):  # a 5 s tick each; the first asked again once its answer gave the server's clock
                now = time.time() + 5.0 * tick
                arrivals = await gateway.read(now, 5.0 * tick)
                named.append(sorted(gateway.named))
                stale.append(gateway.stale)
            # before 1a8bdd1: [] every tick (asked an hour from the server's samples); before session 31: [] on the
            # first, asked before any answer gave the server's clock
            assert named == [["llm/chat"]] * 10
            assert stale == [0] * 10
            assert set(arrivals.rates) == {"llm/chat"}
        finally:
            await source.aclose()
