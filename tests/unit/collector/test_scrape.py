"""Scraping against real HTTP servers on loopback: good, slow, endless, huge, failing and garbage targets;
targets staggered over the spread in virtual time; large pages read off the event loop within a budget."""

from __future__ import annotations

import asyncio
import functools
import gzip
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from collector.adapt import adapt_page
from collector.clock import VirtualClock
from collector.exposition import parse
from collector.samples import GpuSample, ReplicaSample, TargetInfo
from collector.scrape import (
    SPREAD_SLOT_S,
    Collector,
    ScrapeConfig,
    VirtualTimer,
    jitter_offset,
)
from collector.state import FleetState
from tests.conftest import FIXTURES
from tests.helpers.gated_read import gated_adapt_page, open_gate, reading
from tests.helpers.poll import until
from tests.services.ports import free_port

PAGE = b"""# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 7.0
"""
GPU_PAGE = b"""# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n1"} 99
"""


@functools.cache
def big_page() -> bytes:
    """About 2.7 MiB of a wanted vLLM gauge, every sample its own label set: slow to read on purpose."""
    lines = [b"# TYPE vllm:num_requests_running gauge"]
    lines += [b'vllm:num_requests_running{model_name="m",shard="%d"} 1' % i for i in range(50_000)]
    return b"\n".join(lines) + b"\n"


@functools.cache
def _bomb() -> bytes:
    return gzip.compress(b"#" * (64 << 20), compresslevel=1)


# dcgm-exporter writes this as the value of a field it cannot render as text (a real capture: the A800 MIG page)
BAD_VALUE_PAGE = (
    b'# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n1"} 88\n'
    b"# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n"
    b'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",Hostname="n1"} ERROR - FAILED TO CONVERT TO STRING\n'
)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.server.hits[self.path] = self.server.hits.get(self.path, 0) + 1
        route = self.path.split("?")[0]
        if route == "/metrics":
            self._send(200, PAGE)
        elif route == "/big":
            self._send(200, big_page())
        elif route == "/gpu":
            self._send(200, GPU_PAGE)
        elif route == "/gzip":
            self._send(200, gzip.compress(PAGE), encoding="gzip")
        elif route == "/bomb":  # 64 KiB compressed, 64 MiB once inflated
            self._send(200, _bomb(), encoding="gzip")
        elif route == "/500":
            self._send(500, b"boom")
        elif route.startswith("/fixture/"):
            self._send(200, (FIXTURES / route.removeprefix("/fixture/")).read_bytes())
        elif self.path == "/%E6%8C%87%E6%A0%87%20v1?model=%C3%A9":  # /指标 v1?model=é, percent-encoded as UTF-8
            self._send(200, PAGE)
        elif route == "/bad-value":
            self._send(200, BAD_VALUE_PAGE)
        elif route == "/other":
            self._send(200, b"# TYPE foo gauge\nfoo 1\n")
        elif route == "/garbage":
            self._send(200, b"\x00\xff this is { not metrics\n")
        elif route == "/huge-declared":
            self._send(200, b"x" * (2 << 20))
        elif route == "/huge-chunked":
            self._chunked_forever(chunk=b"# padding\n" * 10_000)
        elif route == "/endless-trickle":
            self._chunked_forever(chunk=b"#\n", pause_s=0.05)
        elif route == "/slow":
            self.server.release.wait(30)
            self._send(200, PAGE)
        else:
            self._send(404, b"not found")

    def _send(self, code: int, body: bytes, *, encoding: str | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        if encoding:
            self.send_header("Content-Encoding", encoding)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _chunked_forever(self, *, chunk: bytes, pause_s: float = 0.0) -> None:
        self.protocol_version = "HTTP/1.1"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            while not self.server.release.is_set():
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
                if pause_s:
                    self.server.release.wait(pause_s)  # the server's own pacing, not a test wait
        except (BrokenPipeError, ConnectionResetError):
            pass  # the scraper hung up, as it should


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hits: dict[str, int] = {}
        self.release = threading.Event()


@dataclass
class Pages:
    base: str
    server: _Server

    def target(self, path: str, **kw: str) -> TargetInfo:
        return TargetInfo(url=f"{self.base}{path}", pod=path.strip("/") or "root", deployment="d", **kw)


@pytest.fixture
def pages() -> Iterator[Pages]:
    # Built before any scrape's clock starts, not at the first request: on a starved runner the bomb's 0.12 s of
    # gzip stretched past the 3 s scrape timeout ("timed out after 3 s" instead of the cap's error).
    _bomb()
    big_page()
    server = _Server()
    # shutdown() waits for serve_forever's next poll: 20 ms, not the default 0.5 s added to every teardown
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, name="test-pages", daemon=True
    )
    thread.start()
    try:
        yield Pages(f"http://127.0.0.1:{server.server_address[1]}", server)
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()


@dataclass
class Page:
    engine: str | None
    replicas: Sequence[ReplicaSample]
    gpus: Sequence[GpuSample]


def adapt(body: bytes, target: TargetInfo, timestamp: float, *, content_type: str | None = None) -> Page:
    """A stand-in for collector.adapt.adapt_page with its contract (raises ValueError on bad pages), so
    these tests pin the scraping mechanics whatever the adapters learn."""
    families = parse(body.decode("utf-8", errors="replace"))
    if "DCGM_FI_DEV_GPU_UTIL" in families:
        s = families["DCGM_FI_DEV_GPU_UTIL"].samples[0]
        gpu = GpuSample(
            node=s.labels["Hostname"],
            index=s.labels["gpu"],
            uuid=s.labels["UUID"],
            model_name=None,
            timestamp=timestamp,
            utilisation=s.value / 100,
        )
        return Page("dcgm", (), (gpu,))
    if "vllm:num_requests_running" not in families:
        raise ValueError("no adapter matches this page")
    running = families["vllm:num_requests_running"].samples[0].value
    waiting = families["vllm:num_requests_waiting"].samples[0].value
    replica = ReplicaSample(
        namespace=target.namespace,
        deployment=target.deployment,
        replica=target.pod,
        node=target.node,
        engine="vllm",
        model="m",
        timestamp=timestamp,
        requests_running=running,
        requests_waiting=waiting,
    )
    return Page("vllm", (replica,), ())


@pytest.fixture(params=["asyncio", "httpx"])
def http_client(request: pytest.FixtureRequest) -> str:
    """Every behaviour holds for each HTTP backend in collector.scrape_http.FETCHERS."""
    return str(request.param)


def collector(http_client: str = "asyncio", **config: float) -> Collector:
    return Collector(
        ScrapeConfig(http_client=http_client, **config),  # type: ignore[arg-type]
        clock=VirtualClock(100.0),
        adapt=adapt,
    )


FAILURE_CASES = [
    # server error: the status is the reason
    ("/500", {}, "HTTP 500"),
    # a page no parser accepts is reported, not guessed
    ("/garbage", {}, "unreadable page"),
    # a page that parses but matches no adapter
    ("/other", {}, "unreadable page: no adapter matches"),
    # a missing path: the status is the reason
    ("/nothing-here", {}, "HTTP 404"),
    # declared too big: refused from the headers, before reading
    ("/huge-declared", {"max_bytes": 1 << 20}, "body exceeds 1048576 bytes"),
    # chunked and endless: cut off at the cap while streaming
    ("/huge-chunked", {"max_bytes": 1 << 20}, "body exceeds 1048576 bytes"),
    # a gzip bomb is measured after inflating
    ("/bomb", {"max_bytes": 1 << 20}, "body exceeds 1048576 bytes"),
    # a trickle that never reaches the cap is ended by the total deadline, not by a read timeout
    ("/endless-trickle", {"timeout_s": 0.5}, "timed out after 0.5 s"),
    # a target that never answers times out
    ("/slow", {"timeout_s": 0.3}, "timed out after 0.3 s"),
]


@pytest.mark.parametrize(("path", "config", "reason"), FAILURE_CASES)
async def test_failures_are_reported_per_target(
    pages: Pages, http_client: str, path: str, config: dict[str, float], reason: str
) -> None:
    async with collector(http_client, **config) as c:
        result = await c.scrape(pages.target(path))
    assert not result.ok
    assert result.error is not None
    assert reason in result.error
    assert result.replicas == ()
    health = c.health.get(result.target.url)
    assert health is not None
    assert not health.up
    assert health.consecutive_failures == 1
    assert health.last_error == result.error


@pytest.mark.parametrize(
    ("path", "size"),
    [
        # refused from the headers: the size the target declared
        ("/huge-declared", r"Content-Length 2097152"),
        # cut off while streaming: what was read (or announced) before the cap
        ("/huge-chunked", r"at least (\d+) bytes"),
        # a gzip body is capped once inflated, and says so
        ("/bomb", r"at least (\d+) bytes once inflated"),
    ],
)
async def test_a_page_over_the_cap_names_its_size_and_the_setting_that_raises_it(
    pages: Pages, http_client: str, path: str, size: str
) -> None:
    """A real page can outgrow the default cap (a vLLM fork's 22 MB page, vLLM issue 44691): the error tells the
    operator how big it is, as far as read, and which setting to raise."""
    async with collector(http_client, max_bytes=1 << 20) as c:
        result = await c.scrape(pages.target(path))
    assert result.error is not None
    said = re.fullmatch(
        rf"body exceeds 1048576 bytes \({size}\); raise collector\.max_body_bytes to read it", result.error
    )
    assert said is not None, result.error
    if said.groups():
        assert int(said.group(1)) > 1 << 20


async def test_connection_refused(http_client: str) -> None:
    port = free_port()  # nothing listens there
    async with collector(http_client) as c:
        result = await c.scrape(TargetInfo(url=f"http://127.0.0.1:{port}/metrics"))
    assert not result.ok
    assert result.error is not None
    assert "connection failed" in result.error


async def test_a_path_outside_ascii_is_sent_percent_encoded(pages: Pages, http_client: str) -> None:
    # kvpilot.io/path: "/指标 v1": sent as UTF-8 percent-encoded (RFC 3986 2.5), as Prometheus sends a __metrics_path__
    # and httpx a URL. Before, the asyncio backend could not write the request and said "unreadable page: 'latin-1'
    # codec can't encode characters", though nothing had been sent
    async with collector(http_client) as c:
        result = await c.scrape(pages.target("/指标 v1?model=é"))
    assert result.error is None
    assert [r.requests_running for r in result.replicas] == [3.0]
    assert pages.server.hits == {"/%E6%8C%87%E6%A0%87%20v1?model=%C3%A9": 1}


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:x/metrics", "not an http(s) URL: http://127.0.0.1:x/metrics ("),  # asyncio: unreadable page
        ("http://" + "x" * 70 + "é/metrics", "x" * 60),  # no IDNA form: a label over 63 characters
    ],
)
async def test_a_url_that_cannot_be_sent_says_so(http_client: str, url: str, reason: str) -> None:
    # before: "unreadable page: Port could not be cast..." (asyncio); "adapter error: InvalidURL", a traceback (httpx)
    async with collector(http_client) as c:
        result = await c.scrape(TargetInfo(url=url))
    assert result.error is not None
    assert reason in result.error
    assert "unreadable page" not in result.error
    assert "adapter error" not in result.error


async def test_collect_once_mixes_good_and_bad_targets(pages: Pages, http_client: str) -> None:
    good, gz, gpu, bad = (
        pages.target("/metrics"),
        pages.target("/gzip"),
        pages.target("/gpu", kind="gpu"),
        pages.target("/500"),
    )
    async with collector(http_client) as c:
        result = await c.collect_once([good, gz, gpu, bad, good])  # the duplicate is scraped once
    assert pages.server.hits["/metrics"] == 1
    assert [r.requests_running for r in result.replicas] == [3.0, 3.0]
    assert [g.utilisation for g in result.gpus] == [0.99]
    assert result.down_targets == [bad]
    assert result.gpu_nodes_scraped == {"n1"}
    assert result.timestamp == 100.0
    assert all(r.timestamp == 100.0 for r in result.replicas)
    assert result.health[good.url].up
    assert result.health[bad.url].consecutive_failures == 1
    # the tick's result feeds FleetState as is
    state = FleetState()
    state.observe(
        result.replicas,
        result.gpus,
        now=result.timestamp,
        down_targets=result.down_targets,
        gpu_nodes_scraped=result.gpu_nodes_scraped,
    )
    assert state.deployments()["default/d"].requests_waiting == 14.0


async def test_real_fixture_pages_through_the_real_adapters(pages: Pages) -> None:
    # the default adapter is collector.adapt.adapt_page: real vLLM and dcgm-exporter pages become samples
    vllm = pages.target("/fixture/metrics/vllm__DataDog__integrations-core__vllm_metrics.txt")
    dcgm = pages.target("/fixture/metrics/dcgm__DataDog__integrations-core__metrics.txt", kind="gpu")
    async with Collector(clock=VirtualClock(7.0)) as c:
        result = await c.collect_once([vllm, dcgm])
    assert [r.error for r in result.results] == [None, None]
    assert result.results[0].engine == "vllm"
    assert len(result.replicas) >= 1
    assert all(r.timestamp == 7.0 for r in result.replicas)
    assert len(result.gpus) >= 1
    assert result.gpu_nodes_scraped


async def test_health_streaks_and_forgetting(pages: Pages) -> None:
    good, bad = pages.target("/metrics"), pages.target("/500")
    async with collector() as c:
        for _ in range(3):
            await c.collect_once([good, bad])
        assert c.health.get(bad.url).consecutive_failures == 3  # type: ignore[union-attr]
        assert c.health.get(good.url).scrapes_total == 3  # type: ignore[union-attr]
        # bad goes away (pod deleted): its health goes with it
        result = await c.collect_once([good])
    assert set(result.health) == {good.url}


async def test_concurrency_is_bounded(pages: Pages, http_client: str) -> None:
    # with 2 slots and 5 hanging targets, exactly 2 requests reach the server until released
    targets = [pages.target(f"/slow?{i}") for i in range(5)]
    async with collector(http_client, max_concurrency=2, timeout_s=30) as c:
        task = asyncio.create_task(c.collect_once(targets))
        await until(lambda: sum(pages.server.hits.values()) >= 2, what="two requests at the server", timeout_s=10)
        for _ in range(20):  # give a third request every chance to slip through
            await asyncio.sleep(0.01)
        assert sum(pages.server.hits.values()) == 2
        pages.server.release.set()
        result = await task
    assert all(r.ok for r in result.results)


async def test_adapter_bug_costs_one_target_not_the_tick(pages: Pages) -> None:
    def buggy(body: bytes, target: TargetInfo, timestamp: float, *, content_type: str | None = None) -> Page:
        if target.pod == "gpu":
            raise KeyError("Hostname")
        return adapt(body, target, timestamp, content_type=content_type)

    async with Collector(clock=VirtualClock(0.0), adapt=buggy) as c:
        result = await c.collect_once([pages.target("/metrics"), pages.target("/gpu")])
    assert [r.ok for r in result.results] == [True, False]
    assert result.results[1].error == "adapter error: KeyError: 'Hostname'"


async def test_collect_once_spreads_targets_over_the_configured_spread(pages: Pages) -> None:
    clock = VirtualClock(0.0)
    timer = VirtualTimer(clock)
    targets = [pages.target("/metrics?a"), pages.target("/metrics?b"), pages.target("/gpu")]
    config = ScrapeConfig(spread_s=4.0)
    async with Collector(config, clock=clock, adapt=adapt, sleep=timer.sleep) as c:
        task = asyncio.create_task(c.collect_once(targets))
        await timer.until_sleepers(1)  # one sleep at a time: each until the next slot of targets
        await timer.advance(4.0)
        result = await task
    # each scraped at its own stable offset within the 4 s, not all at t=0: at the offset, or with a target whose
    # offset lies less than a slot before it (the URLs carry the test server's port, so the offsets vary by run)
    offsets = [jitter_offset(t.url, 4.0, 1.0) for t in targets]
    for r, offset in zip(result.results, offsets, strict=True):
        assert offset - SPREAD_SLOT_S < r.timestamp <= offset + 1e-9
        assert any(r.timestamp == pytest.approx(o) for o in offsets)
    assert sorted({round(r.timestamp, 9) for r in result.results}) == [
        round(o, 9) for o in _slot_starts(sorted(offsets))
    ]


def _slot_starts(offsets: list[float]) -> list[float]:
    """The first offset of each slot of ``offsets`` (ascending): a slot holds the offsets less than a slot after it."""
    starts: list[float] = []
    for o in offsets:
        if not starts or o >= starts[-1] + SPREAD_SLOT_S:
            starts.append(o)
    return starts


class _Answers:
    """A stand-in fetcher: the vLLM test page for every URL, or a wait that never ends (``hang``)."""

    def __init__(self, *, hang: bool = False) -> None:
        self.hang = hang
        self.started: list[str] = []
        self.cancelled: list[str] = []

    async def get(self, url: str, *, max_bytes: int) -> tuple[bytes, str | None]:
        self.started.append(url)
        if self.hang:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.append(url)
                raise
        return PAGE, "text/plain"

    async def aclose(self) -> None:
        pass


async def test_targets_within_one_slot_start_together_on_one_timer() -> None:
    # 40 targets over 0.1 s: one sleep per slot (SPREAD_SLOT_S), not one per target; each target starts at its
    # offset or up to one slot sooner, every tick the same, and the results keep the targets' order
    clock = VirtualClock(0.0)
    timer = VirtualTimer(clock)
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        await timer.sleep(seconds)

    targets = [TargetInfo(url=f"http://t{i}/metrics", pod=f"p{i}", deployment="d") for i in range(40)]
    async with Collector(ScrapeConfig(spread_s=0.1), clock=clock, adapt=adapt, fetcher=_Answers(), sleep=sleep) as c:
        starts = []
        for tick in range(2):
            sleeps.clear()
            clock.set(10.0 * tick)
            task = asyncio.create_task(c.collect_once(targets))
            await timer.until_sleepers(1)
            await timer.advance(0.1)
            result = await task
            assert [r.target for r in result.results] == targets
            assert all(r.ok for r in result.results)
            starts.append([r.timestamp - 10.0 * tick for r in result.results])
    assert len(sleeps) <= 0.1 / SPREAD_SLOT_S + 1
    assert starts[0] == pytest.approx(starts[1])  # the same slot every tick
    for target, start in zip(targets, starts[0], strict=True):
        offset = jitter_offset(target.url, 0.1, 1.0)
        assert offset - SPREAD_SLOT_S - 1e-9 <= start <= offset + 1e-9
    assert len(set(starts[0])) == len(sleeps) + (min(starts[0]) == 0.0)  # one start time per timer


async def test_a_spread_tick_cancelled_cancels_the_scrapes_it_started() -> None:
    clock = VirtualClock(0.0)
    timer = VirtualTimer(clock)
    answers = _Answers(hang=True)
    targets = [TargetInfo(url=f"http://t{i}/metrics", pod=f"p{i}", deployment="d") for i in range(20)]
    async with Collector(ScrapeConfig(spread_s=4.0), clock=clock, adapt=adapt, fetcher=answers, sleep=timer.sleep) as c:
        task = asyncio.create_task(c.collect_once(targets))
        await timer.until_sleepers(1)
        await timer.advance(2.0)  # about half the targets started, and hang
        assert 0 < len(answers.started) < len(targets)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert sorted(answers.cancelled) == sorted(answers.started)


def test_jitter_offsets_are_stable_and_spread() -> None:
    urls = [f"http://10.0.0.{i}:8000/metrics" for i in range(200)]
    offsets = [jitter_offset(u, 5.0, 0.5) for u in urls]
    assert offsets == [jitter_offset(u, 5.0, 0.5) for u in urls]  # same slot every time
    assert all(0 <= o < 2.5 for o in offsets)
    # spread over the window, not bunched: every half-second bucket is used
    assert {int(o / 0.5) for o in offsets} == {0, 1, 2, 3, 4}


@pytest.mark.parametrize(
    "config",
    # each limit must be positive; the HTTP backend must exist
    [
        {"timeout_s": 0},
        {"max_bytes": 0},
        {"max_concurrency": 0},
        {"http_client": "curl"},
        {"parse_budget_s": 0},
        {"inline_max_bytes": -1},
        {"spread_s": -1},
    ],
)
def test_bad_scrape_config_is_rejected(config: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="scrape config"):
        ScrapeConfig(**config)  # type: ignore[arg-type]


def test_a_loop_spreads_over_half_its_interval_as_far_as_the_timeout_allows() -> None:
    assert ScrapeConfig.for_interval(5.0, 2.0).spread_s == 2.5
    # the last scrape started must still time out within the first 90 % of the interval
    assert ScrapeConfig.for_interval(5.0, 3.0).spread_s == pytest.approx(1.5)
    assert ScrapeConfig.for_interval(5.0, 4.9).spread_s == 0.0


# -- large pages: read off the event loop, within a CPU budget ----------------------------------------


async def test_large_pages_are_read_off_the_event_loop(pages: Pages, tmp_path: Path) -> None:
    """While three large pages are read, the loop keeps its 5 ms heartbeat: reading them on the loop would stall
    it until the read ended. Each read waits for a gate (tests/helpers/gated_read.py) that the heartbeat opens only
    after it beat while a read was waiting, so no machine is too slow for the test; on the loop no beat could come
    while a read waited, and each read goes on only after GATE_S."""
    page = big_page()
    expected = adapt_page(page, pages.target("/big"), 0.0)
    assert len(page) > ScrapeConfig().inline_max_bytes

    beats_while_reading = 0
    done = asyncio.Event()

    async def heartbeat() -> None:
        nonlocal beats_while_reading
        while not done.is_set():
            if reading(tmp_path):
                beats_while_reading += 1
                if beats_while_reading >= 5:
                    open_gate(tmp_path)
            await asyncio.sleep(0.005)

    beat = asyncio.create_task(heartbeat())
    targets = [pages.target(f"/big?{i}") for i in range(3)]
    gated = functools.partial(gated_adapt_page, str(tmp_path))
    async with Collector(ScrapeConfig(timeout_s=60), clock=VirtualClock(0.0), adapt=gated) as c:
        result = await c.collect_once(targets)
    done.set()
    await beat
    assert [r.ok for r in result.results] == [True, True, True], [r.error for r in result.results]
    assert [r.replicas[0].requests_running for r in result.results] == [expected.replicas[0].requests_running] * 3
    assert expected.replicas[0].requests_running == 50_000
    # the heartbeat kept beating while a page's read waited
    assert beats_while_reading >= 5


async def test_a_page_over_its_cpu_budget_fails_that_target_only(pages: Pages) -> None:
    config = ScrapeConfig(timeout_s=60, parse_budget_s=0.005, inline_max_bytes=1024)
    async with Collector(config, clock=VirtualClock(0.0)) as c:
        big, small = (await c.collect_once([pages.target("/big"), pages.target("/metrics")])).results
    assert not big.ok
    assert big.error is not None
    assert "more than its CPU budget of 0.005 s" in big.error
    assert small.ok  # small pages are read on the loop, without a budget


def test_one_page_cap_for_run_scrape_and_parse() -> None:
    from kvpilot.settings import CollectorSettings

    assert CollectorSettings().max_body_bytes == ScrapeConfig().max_bytes


async def test_a_bad_sample_line_costs_its_family_and_is_counted_per_target(pages: Pages) -> None:
    # One unconvertible value used to lose the whole page (every GPU field of the node); now only its family, and the
    # target's health says what was left out, page after page.
    target = pages.target("/bad-value", kind="gpu")
    async with Collector(clock=VirtualClock(0.0)) as c:  # the real adapter, collector.adapt.adapt_page
        for _ in range(2):
            result = await c.collect_once([target])
        health = c.health.get(target.url)
    (res,) = result.results
    assert res.ok
    (gpu,) = res.gpus
    assert (gpu.utilisation, gpu.power_w) == (0.88, None)  # the power family left out: unknown, not 0
    assert health is not None
    assert (health.up, health.partial_pages_total, health.failures_total) == (True, 2, 0)
    assert health.last_error is not None
    assert "line 4" in health.last_error
    assert "families left out: DCGM_FI_DEV_POWER_USAGE" in health.last_error
