"""/metrics off the event loop (issue 17): the snapshot's gauges are rendered once, at the first scrape of that
snapshot, in the page's worker thread (not at every tick: issue 12), and every scrape sends those bytes after the
live counters; the page is the one the whole registry renders, its values move with every tick, and a slow render
holds neither ``/healthz`` nor a second scrape."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

import api.exposition
from api.auth import TokenAuth
from api.main import create_app
from collector.clock import VirtualClock
from kvpilot.runtime.service import Service
from kvpilot.runtime.snapshot import Snapshot
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, make_service, run_ticks

GATE_S = 10.0  # the longest a slow render spins; on the loop, that long with no request answered


def _spin_until(gate: threading.Event) -> None:
    """Spends CPU until the test opens the gate (or GATE_S passes): pure Python, holding the GIL but for the
    interpreter's switches, like rendering a very large fleet. The test opens the gate only once the requests it
    counts were answered *while* this spun, so no machine is too slow or too fast for it: off the loop, they are
    answered and the gate opens at once; on the loop, none could be, and the spin ends at GATE_S with none."""
    start = time.perf_counter()
    while not gate.is_set() and time.perf_counter() - start < GATE_S:
        sum(i * i for i in range(1000))


class CountedRender:
    """Wraps ``api.exposition.snapshot_families``: counts the renders, notes when each ran, and, when slow, spins
    until the test opens its gate."""

    def __init__(self) -> None:
        self.original = api.exposition.snapshot_families
        self.slow = False
        self.gate = threading.Event()
        self.rendering = False
        self.ran: list[tuple[float, float]] = []

    def __call__(self, snap: Snapshot) -> list[GaugeMetricFamily]:
        start = time.perf_counter()
        self.rendering = True
        if self.slow:
            _spin_until(self.gate)
        self.rendering = False
        families = self.original(snap)
        self.ran.append((start, time.perf_counter()))
        return families


@pytest.fixture
def render(monkeypatch: pytest.MonkeyPatch) -> CountedRender:
    counted = CountedRender()
    monkeypatch.setattr(api.exposition, "snapshot_families", counted)
    return counted


def _client(service: Service) -> httpx.AsyncClient:
    app = create_app(service, TokenAuth(["r" * 24], ["a" * 24], anonymous_read=False))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://kvpilot")


def _value(page: str, series: str) -> float:
    (line,) = [line for line in page.splitlines() if line.startswith(series + " ")]
    return float(line.rsplit(" ", 1)[1])


def _series(lines: list[str]) -> list[str]:
    """Each line without its value: comments whole, samples as name{labels}."""
    return [line if line.startswith("#") else line.rsplit(" ", 1)[0] for line in lines]


ARRIVALS = 'kvpilot_deployment_arrival_rate{deployment="llm/chat"}'
TICKS = "kvpilot_loop_tick_seconds_count"


async def test_scrapes_send_the_gauges_their_snapshot_rendered_once(tmp_path: Path, render: CountedRender) -> None:
    clock = VirtualClock(START)
    fleet = ScriptedFleet(clock)
    service, restored, timer = make_service(f"sqlite:///{tmp_path / 'k.db'}", clock, fleet)
    await service.start(restored)
    try:
        async with _client(service) as client:
            await run_ticks(service, timer, 2)
            assert render.ran == []  # nobody scraped: the ticks rendered nothing
            pages = [(await client.get("/metrics")).text for _ in range(3)]
            assert len(render.ran) == 1  # the first scrape of the snapshot rendered it, the next two sent its bytes
            page = pages[-1]
            # valid exposition, and the same page the whole registry renders in one go
            names = [f.name for f in text_string_to_metric_families(page)]
            assert len(names) == len(set(names))
            # (every series the same; values the same for the snapshot's gauges, which only a tick moves — the
            # live series, e.g. the store writer's pending writes, may move between the two reads)
            whole = generate_latest(service.registry).decode().splitlines()
            assert sorted(_series(page.splitlines())) == sorted(_series(whole))
            assert sorted(line for line in page.splitlines() if line.startswith("kvpilot_deployment_")) == sorted(
                line for line in whole if line.startswith("kvpilot_deployment_")
            )
            before = (_value(page, ARRIVALS), _value(page, TICKS))
            rendered = len(render.ran)  # (generate_latest above rendered the registry's gauges once more)
            fleet.rate = 12.0  # three times the requests from now on
            await run_ticks(service, timer, 2)
            after_page = (await client.get("/metrics")).text
            after = (_value(after_page, ARRIVALS), _value(after_page, TICKS))
            assert len(render.ran) == rendered + 1  # the newest snapshot; the one before it was never scraped
    finally:
        service.stop.set()
        await service.wait()
    assert after[0] > before[0]  # the gauges of the newest tick, not the first rendered ones
    assert after[1] == before[1] + 2  # live counters, read at the scrape


async def test_a_slow_render_holds_neither_healthz_nor_a_second_scrape(tmp_path: Path, render: CountedRender) -> None:
    clock = VirtualClock(START)
    service, restored, timer = make_service(f"sqlite:///{tmp_path / 'k.db'}", clock, ScriptedFleet(clock))
    answered: list[tuple[str, float, float]] = []
    inside: list[float] = []
    stop = asyncio.Event()

    async def poll(client: httpx.AsyncClient, path: str) -> None:  # an operator's probe, or a Prometheus
        while not stop.is_set():
            sent = time.perf_counter()
            assert (await client.get(path)).status_code == 200
            answered.append((path, sent, time.perf_counter()))
            if path == "/healthz" and render.rendering:
                inside.append(sent)
                if len(inside) >= 6:  # (one more than asserted: the first may have been sent before the render)
                    render.gate.set()
            if sum(p == "/metrics" for p, _, _ in answered) >= 6:
                stop.set()
            await asyncio.sleep(0.005)

    await service.start(restored)
    try:
        async with _client(service) as client:
            await run_ticks(service, timer, 1)
            render.slow = True
            polling = [asyncio.create_task(poll(client, path)) for path in ("/healthz", "/metrics", "/metrics")]
            await asyncio.gather(*polling)
    finally:
        service.stop.set()
        await service.wait()
    ((start, end),) = render.ran  # two scrapers, six scrapes and more: one render of the one snapshot
    during = [(path, sent, got) for path, sent, got in answered if start < sent and got < end]
    # On the loop, the spinning render would let no request through until GATE_S; in the page's worker thread the
    # loop gets the GIL back at every switch interval (5 ms), so requests keep being answered. The scrape that came
    # while the first one rendered waited for that render rather than rendering again.
    assert sum(path == "/healthz" for path, _, _ in during) >= 5, during


class SlowLiveSeries(Collector):
    """A live collector (counters, the lease, a source's gauges) that spins until the test opens its gate."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def collect(self) -> list[Metric]:
        _spin_until(self.gate)
        return []


async def test_a_slow_scrape_does_not_hold_healthz(tmp_path: Path) -> None:
    clock = VirtualClock(START)
    service, restored, timer = make_service(f"sqlite:///{tmp_path / 'k.db'}", clock, ScriptedFleet(clock))
    await service.start(restored)
    try:
        async with _client(service) as client:
            await run_ticks(service, timer, 1)
            slow = SlowLiveSeries()
            service.registry.register(slow)
            scrape = asyncio.create_task(client.get("/metrics"))
            answered = 0
            while not scrape.done():
                await asyncio.sleep(0.005)  # a probe every 5 ms (in-process, a request alone never yields)
                assert (await client.get("/healthz")).status_code == 200
                answered += not scrape.done()
                if answered >= 5:
                    slow.gate.set()
            assert (await scrape).status_code == 200
    finally:
        service.stop.set()
        await service.wait()
    # rendered on the loop, the spinning scrape would let no /healthz through before it ended (at GATE_S)
    assert answered >= 5
