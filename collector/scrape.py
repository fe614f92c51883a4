"""Async scraping of engine and GPU targets: bounded, time-limited, size-capped, and health-tracked.

`Collector.collect_once(targets)` scrapes every target once, each at its stable offset within the
configured spread (``ScrapeConfig.spread_s``) so a tick's scrapes trickle instead of bursting; it is the
scrape step of the control loop's tick (`kvpilot.runtime.loop.ControlLoop`, the one loop `kvpilot run` runs) and
all of `kvpilot scrape`. Pages are turned into canonical samples by `collector.adapt.adapt_page`, the
same adapters `kvpilot parse` and the PromQL source use; the GET itself is `collector.scrape_http` (a lean
asyncio client by default, httpx on request).

Reading a page never stalls the event loop that also serves HTTP and gRPC: a page larger than
``inline_max_bytes`` (a few milliseconds of work at most below it) is parsed and adapted in one worker
process, started with the first such page, within a CPU-time budget (``parse_budget_s``, via
`collector.exposition.watched_by`). A process rather than a thread: a reader thread holds the GIL in long
C calls (splitting and decoding megabytes, the garbage collector tracing the heap) and kept /healthz
waiting 80 ms at the 99th percentile on the shared 2-core VM, against 15 ms with a process. The body goes
over as bytes and the adapted samples come back, a few kilobytes. ``Collector.abort()`` (SIGTERM) ends that
process with the page it is reading, as the PromQL source ends its reader with its round.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import hashlib
import heapq
import itertools
import logging
import math
import multiprocessing
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache, partial
from typing import Any, Protocol

from collector.clock import Clock, VirtualClock, WallClock
from collector.exposition import watched_by
from collector.frozen import fast_init
from collector.health import HealthBook, TargetHealth
from collector.samples import GpuSample, ReplicaSample, TargetInfo
from collector.scrape_http import ACCEPT as ACCEPT
from collector.scrape_http import FETCHERS, Fetcher, PageTooBig, ScrapeError
from collector.urls import meet, page_name, redacted

log = logging.getLogger(__name__)

# The one page-size cap: `kvpilot run` takes it from settings (collector.max_body_bytes, whose default this
# is); `kvpilot scrape` and `kvpilot parse` use the default.
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
DEFAULT_INLINE_MAX_BYTES = 128 * 1024  # read on the event loop: ~5 ms of CPU even if every sample is wanted
DEFAULT_PARSE_BUDGET_S = 1.0  # CPU seconds to read one larger page in the reader process
SPREAD_FRACTION = 0.5  # `kvpilot run` spreads a tick's scrapes over this share of the interval (as far as it fits)
# Targets whose offsets lie within this of the first of them start together, on one timer: a thousand targets spread
# over 2.5 s cost ~50 wake-ups of the event loop instead of 1,000 timers, and their requests and answers share the
# loop's polls. A target starts at most this much before its offset, at the same time every tick. bench/scrape.py,
# 5 interleaved pairs each: one timer per target -> 20 ms slots (and requests kept per URL) -27 % CPU per scrape,
# 20 -> 50 ms a further -6 % (BENCHMARKS.md, "Scrape loop").
SPREAD_SLOT_S = 0.05


class Stopped(Exception):
    """The service is stopping (``Collector.abort()``): the tick's pages were abandoned. Not a target's fault: it is
    raised out of ``scrape`` and ``collect_once``, and no target's health records it."""


def end_reader(reader: concurrent.futures.ProcessPoolExecutor | None, *, kill: bool) -> None:
    """Shut a reader process pool down without waiting; ``kill`` also ends its worker now, with whatever it is
    reading (a page here, a PromQL round in `collector.discovery.promql`), instead of letting that run to its end."""
    if reader is None:
        return
    if kill:
        # ProcessPoolExecutor names its workers only privately before Python 3.14's terminate_workers()
        workers: dict[int, multiprocessing.process.BaseProcess] = getattr(reader, "_processes", None) or {}
        for worker in list(workers.values()):
            worker.terminate()
    reader.shutdown(wait=False, cancel_futures=True)


class AdaptedPageLike(Protocol):
    """What `collector.adapt.AdaptedPage` offers; a Protocol so tests can pass a stand-in adapter."""

    @property
    def engine(self) -> str | None: ...
    @property
    def replicas(self) -> Sequence[ReplicaSample]: ...
    @property
    def gpus(self) -> Sequence[GpuSample]: ...


AdaptFn = Callable[..., AdaptedPageLike]
"""``adapt_page(body, target, timestamp, content_type=...)``; raises ValueError for pages it cannot read."""

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ScrapeConfig:
    """Limits for every scrape, validated once. ``timeout_s`` bounds the whole scrape (connect, headers,
    body and reading the page), so a target trickling an endless body cannot hold a worker;
    ``parse_budget_s`` bounds the CPU time of reading one page off the loop (see the module docstring);
    ``spread_s`` is the window over which `Collector.collect_once` staggers the targets' starts;
    ``empty_gpu_page_grace_s`` is how long a GPU target may serve an empty page before it is down (see
    `Collector.scrape`)."""

    timeout_s: float = 3.0
    max_bytes: int = DEFAULT_MAX_BYTES
    max_concurrency: int = 64
    http_client: str = "asyncio"  # a key of collector.scrape_http.FETCHERS
    parse_budget_s: float = DEFAULT_PARSE_BUDGET_S
    inline_max_bytes: int = DEFAULT_INLINE_MAX_BYTES
    spread_s: float = 0.0
    # dcgm-exporter serves an empty page until its first collection, one collect interval (30 s by default) after it
    # starts, and after a failed one: twice that default
    empty_gpu_page_grace_s: float = 60.0
    # what raises ``max_bytes`` where this collector runs, named when a page is over it: the setting for `kvpilot run`
    # (and the demo), the flag for the commands that read no settings (`kvpilot scrape`, `detect`)
    max_bytes_name: str = "collector.max_body_bytes"

    def __post_init__(self) -> None:
        if self.http_client not in FETCHERS:
            raise ValueError(f"scrape config: http_client must be one of {sorted(FETCHERS)}, got {self.http_client!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"scrape config: timeout_s must be > 0, got {self.timeout_s}")
        if self.max_bytes < 1:
            raise ValueError(f"scrape config: max_bytes must be >= 1, got {self.max_bytes}")
        if self.max_concurrency < 1:
            raise ValueError(f"scrape config: max_concurrency must be >= 1, got {self.max_concurrency}")
        if not self.parse_budget_s > 0:
            raise ValueError(f"scrape config: parse_budget_s must be > 0, got {self.parse_budget_s}")
        if self.inline_max_bytes < 0:
            raise ValueError(f"scrape config: inline_max_bytes must be >= 0, got {self.inline_max_bytes}")
        if not self.spread_s >= 0:
            raise ValueError(f"scrape config: spread_s must be >= 0, got {self.spread_s}")
        if not self.empty_gpu_page_grace_s >= 0:
            raise ValueError(f"scrape config: empty_gpu_page_grace_s must be >= 0, got {self.empty_gpu_page_grace_s}")

    @classmethod
    def for_interval(cls, interval_s: float, timeout_s: float, **limits: Any) -> ScrapeConfig:
        """The config of a loop that scrapes every ``interval_s``: targets spread over the first
        ``SPREAD_FRACTION`` of the interval, shortened so the last scrape's timeout still ends within the
        interval's first 90 %."""
        spread = max(0.0, min(interval_s * SPREAD_FRACTION, interval_s * 0.9 - timeout_s))
        return cls(timeout_s=timeout_s, spread_s=spread, **limits)


@fast_init
@dataclass(frozen=True, slots=True)
class ScrapeResult:
    """One target's scrape: the samples on success, the reason on failure."""

    target: TargetInfo
    ok: bool
    timestamp: float  # clock time the scrape started (samples carry it)
    duration_s: float  # wall seconds
    error: str | None = None
    body_bytes: int | None = None
    engine: str | None = None
    replicas: tuple[ReplicaSample, ...] = ()
    gpus: tuple[GpuSample, ...] = ()
    # PromQL source: the replica label values of the Prometheus copy read (collector.promql.series.REPLICA_LABELS)
    copy: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CollectResult:
    """Everything one tick scraped, in the shape `FleetState.observe` takes."""

    timestamp: float
    results: tuple[ScrapeResult, ...]
    health: Mapping[str, TargetHealth] = field(default_factory=dict)

    @property
    def replicas(self) -> list[ReplicaSample]:
        return [r for res in self.results for r in res.replicas]

    @property
    def gpus(self) -> list[GpuSample]:
        """Every page's GPUs; one that no label places on a node carries its page's URL (``GpuSample.page``), its
        password redacted (``page_name``): the URL names the page's down finding, shown masked (``masked_in``) on
        /metrics and to Alertmanager."""
        out: list[GpuSample] = []
        for res in self.results:
            if res.target.node or not res.gpus:
                out.extend(res.gpus)
            else:
                out.extend(g if g.node or g.page else replace(g, page=page_name(res.target.url)) for g in res.gpus)
        return out

    @property
    def down_targets(self) -> list[TargetInfo]:
        return [res.target for res in self.results if not res.ok]

    @property
    def gpu_nodes_scraped(self) -> frozenset[str]:
        """Nodes whose GPU exporter answered: a GPU of theirs missing from the page has vanished. A page that places
        its GPUs on no node stands for itself (its URL, as ``GpuSample.page``): before, "" stood for every such page,
        and one answering made another's GPUs "vanished" (critical) instead of its exporter down."""
        nodes = {g.node or page_name(res.target.url) for res in self.results if res.ok for g in res.gpus}
        nodes |= {
            res.target.node or page_name(res.target.url)  # a page that lists no GPU at all: its node, else itself
            for res in self.results
            if res.ok and res.target.kind == "gpu" and (res.target.node or not res.gpus)
        }
        return frozenset(nodes)


def jitter_offset(url: str, interval_s: float, spread_fraction: float) -> float:
    """A stable offset in ``[0, interval_s * spread_fraction)`` for ``url``: targets spread over the
    interval instead of all firing at its start, and each keeps its slot across restarts (as Prometheus
    does), so its samples stay evenly spaced."""
    return _unit_offset(url) * interval_s * spread_fraction


@lru_cache(maxsize=65_536)
def _unit_offset(url: str) -> float:
    """``url``'s place in [0, 1), from its hash (worked out once per URL, not per tick)."""
    digest = hashlib.sha256(url.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class Collector:
    """Scrapes targets with one shared HTTP client: at most ``max_concurrency`` at once, each within
    ``timeout_s`` and ``max_bytes``; records per-target health. Use as ``async with Collector() as c``."""

    def __init__(
        self,
        config: ScrapeConfig | None = None,
        *,
        clock: Clock | None = None,
        adapt: AdaptFn | None = None,
        fetcher: Fetcher | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.config = config or ScrapeConfig()
        self.clock: Clock = clock or WallClock()
        self._sleep = sleep
        if adapt is None:
            from collector.adapt import adapt_page

            self._adapt: AdaptFn = adapt_page
        else:
            self._adapt = adapt
        self._own_fetcher = fetcher is None
        self._fetcher = fetcher or FETCHERS[self.config.http_client](max_connections=self.config.max_concurrency)
        self._semaphore = asyncio.Semaphore(self.config.max_concurrency)
        self._reader: concurrent.futures.ProcessPoolExecutor | None = None  # started with the first large page
        self._stopping = False  # set once, by abort()
        self.health = HealthBook()
        # GPU targets serving empty pages (``collector.adapt.NoGpuFamilies``): since when, without a page read in
        # between; infinity where the run began right after a page was read (see ``_starting``)
        self._empty_since: dict[str, float] = {}

    async def __aenter__(self) -> Collector:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own_fetcher:
            await self._fetcher.aclose()
        self._stop_reader()

    def abort(self) -> None:
        """Stop now (SIGTERM): the reader process is ended with the page it was reading, that page and those queued
        behind it raise ``Stopped``, and so does every later ``collect_once`` or ``scrape``, at once. Scrapes still
        fetching are left to whoever awaits them (the control loop cancels its abandoned tick)."""
        self._stopping = True
        self._stop_reader(kill=True)

    def _stop_reader(self, *, kill: bool = False) -> None:
        """``kill``: end the reader process now, with the page it is reading (``shutdown`` alone lets that page be
        read to its end, up to ``parse_budget_s`` of CPU, and the interpreter waits for it at exit)."""
        reader, self._reader = self._reader, None
        end_reader(reader, kill=kill)

    def _refuse_if_stopping(self, what: str) -> None:
        if self._stopping:
            raise Stopped(f"{what}: stopping, no page read")

    async def _read(
        self, body: bytes, target: TargetInfo, started_ts: float, content_type: str | None
    ) -> AdaptedPageLike:
        """Parse and adapt a page: on the loop when small, else in the reader process within the CPU budget."""
        if len(body) <= self.config.inline_max_bytes:
            return self._adapt(body, target, started_ts, content_type=content_type)
        self._refuse_if_stopping(target.url)  # abort() has ended the reader: no new one is started
        if self._reader is None:
            # spawn, not fork: the parent runs threads (the event loop's executors, the store writer)
            context = multiprocessing.get_context("spawn")
            self._reader = concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context)
        job = partial(_read_within_budget, self._adapt, self.config.parse_budget_s, body, target, started_ts)
        try:
            return await asyncio.get_running_loop().run_in_executor(self._reader, partial(job, content_type))
        except concurrent.futures.BrokenExecutor:
            if self._stopping:
                raise Stopped(f"{redacted(target.url)}: stopping, the page reader's read abandoned") from None
            self._reader = None  # the reader died (killed, out of memory): the next large page starts another
            raise ScrapeError("the page reader process died while reading this page") from None
        except asyncio.CancelledError:
            # abort() cancelled the pages queued behind the one being read: they end as that one does, unless this
            # scrape itself is being cancelled (its timeout, an abandoned tick), which stays a cancellation
            task = asyncio.current_task()
            if self._stopping and task is not None and not task.cancelling():
                raise Stopped(
                    f"{redacted(target.url)}: stopping, the page's read abandoned in the reader's queue"
                ) from None
            raise

    async def scrape(self, target: TargetInfo) -> ScrapeResult:
        """Scrape one target; never raises for the target's faults (they become ``ok=False``); raises ``Stopped``
        once the collector is aborted."""
        async with self._semaphore:
            self._refuse_if_stopping(target.url)
            started_ts = self.clock.now()
            t0 = time.perf_counter()
            body: bytes | None = None
            try:
                async with asyncio.timeout(self.config.timeout_s):
                    body, content_type = await self._fetcher.get(target.url, max_bytes=self.config.max_bytes)
                    page = await self._read(body, target, started_ts, content_type)
            except Stopped:
                raise
            except TimeoutError:
                return self._failed(target, started_ts, t0, f"timed out after {self.config.timeout_s:g} s", body)
            except PageTooBig as exc:
                error = f"{exc}; raise {self.config.max_bytes_name} to read it"
                return self._failed(target, started_ts, t0, error, body)
            except ScrapeError as exc:
                return self._failed(target, started_ts, t0, str(exc), body)
            except OSError as exc:
                return self._failed(target, started_ts, t0, f"connection failed: {exc.strerror or exc}", body)
            except ValueError as exc:  # parse errors and pages no adapter recognises
                empty = getattr(exc, "empty", False)  # collector.adapt.NoGpuFamilies
                if empty and self._starting(target.url):
                    return self._read_as_no_gpus(target, started_ts, t0, body)
                return self._failed(target, started_ts, t0, f"unreadable page: {exc}", body, empty_page=empty)
            except Exception as exc:  # an adapter bug must cost one target, not the whole tick
                log.exception("adapting the page of %s failed", redacted(target.url))
                return self._failed(target, started_ts, t0, f"adapter error: {type(exc).__name__}: {exc}", body)
            duration = time.perf_counter() - t0
            if self._empty_since:
                self._empty_since.pop(target.url, None)
            read_around = getattr(page, "parse_errors", ())  # a stand-in adapter in tests may not say
            self.health.record(
                target.url,
                ok=True,
                started_ts=started_ts,
                duration_s=duration,
                body_bytes=len(body),
                error=f"page read in part: {'; '.join(read_around)}" if read_around else None,
            )
            return ScrapeResult(
                target=target,
                ok=True,
                timestamp=started_ts,
                duration_s=duration,
                body_bytes=len(body),
                engine=page.engine,
                replicas=tuple(page.replicas),
                gpus=tuple(page.gpus),
            )

    def _starting(self, url: str) -> bool:
        """Whether an empty page from GPU target ``url`` reads as no GPUs (as it did before it could be an error).

        Right after a page was read, it does for as long as it lasts: the exporter answered without its GPUs, which
        ``FleetState`` keeps as GPUs fallen off the bus, their findings open. Else (the target's first pages, or
        after a failure: an exporter starting, whose page stays empty until its first collection, one collect
        interval) it does for ``empty_gpu_page_grace_s``, timed on the monotonic clock (a step of the wall clock
        neither stretches nor ends it); then the target is down with the page's description."""
        now = self.clock.monotonic()
        since = self._empty_since.get(url)
        if since is None:
            before = self.health.get(url)
            since = self._empty_since[url] = math.inf if before is not None and before.up else now
        return now - since < self.config.empty_gpu_page_grace_s

    def _read_as_no_gpus(self, target: TargetInfo, started_ts: float, t0: float, body: bytes | None) -> ScrapeResult:
        duration = time.perf_counter() - t0
        size = len(body) if body is not None else None
        self.health.record(target.url, ok=True, started_ts=started_ts, duration_s=duration, body_bytes=size)
        return ScrapeResult(target=target, ok=True, timestamp=started_ts, duration_s=duration, body_bytes=size)

    def _failed(
        self,
        target: TargetInfo,
        started_ts: float,
        t0: float,
        error: str,
        body: bytes | None,
        *,
        empty_page: bool = False,
    ) -> ScrapeResult:
        duration = time.perf_counter() - t0
        if self._empty_since and not empty_page:  # a run of empty pages ends with a failure too
            self._empty_since.pop(target.url, None)
        size = len(body) if body is not None else None
        self.health.record(
            target.url, ok=False, started_ts=started_ts, duration_s=duration, error=error, body_bytes=size
        )
        return ScrapeResult(target=target, ok=False, timestamp=started_ts, duration_s=duration, error=error)

    async def collect_once(
        self, targets: Sequence[TargetInfo], *, spread_s: float | None = None, sleep: Sleep | None = None
    ) -> CollectResult:
        """Scrape every target once, concurrently (bounded); forget health of targets not listed.

        With a spread (``spread_s``, else the config's) > 0, each target starts at its stable offset within
        that many seconds (see `jitter_offset`; up to ``SPREAD_SLOT_S`` sooner, with the targets just before
        it) instead of all at once, so a tick's load and the targets' see a steady trickle. After ``abort()`` it
        raises ``Stopped`` at once."""
        self._refuse_if_stopping(f"{len(targets)} targets")
        started = self.clock.now()
        spread_s = self.config.spread_s if spread_s is None else spread_s
        sleep = sleep or self._sleep
        unique = _unique(targets)
        meet(t.url for t in unique)  # targets that show alike (they differ in a secret) named apart, in this order
        if spread_s > 0:
            results = await self._scrape_spread(unique, spread_s, sleep)
        else:
            results = await asyncio.gather(*(self.scrape(t) for t in unique))
        self.health.retain(t.url for t in targets)
        if self._empty_since:
            listed = {t.url for t in targets}
            self._empty_since = {url: ts for url, ts in self._empty_since.items() if url in listed}
        return CollectResult(timestamp=started, results=tuple(results), health=self.health.snapshot())

    async def _scrape_spread(self, targets: list[TargetInfo], spread_s: float, sleep: Sleep) -> list[ScrapeResult]:
        """Every target scraped from its offset on, the results in ``targets``' order: one sleep per slot of
        targets (``SPREAD_SLOT_S``), each until the first offset of the slot."""
        order = sorted((jitter_offset(t.url, spread_s, 1.0), i) for i, t in enumerate(targets))
        scrapes: list[asyncio.Task[ScrapeResult] | None] = [None] * len(targets)
        started = self.clock.now()
        slept_to = 0.0  # the offset the sleeps so far reached (a clock that does not move with ``sleep`` says 0)
        at = 0
        try:
            while at < len(order):
                first = order[at][0]
                ahead = first - max(self.clock.now() - started, slept_to)
                if ahead > 0:
                    await sleep(ahead)
                slept_to = first
                while at < len(order) and order[at][0] < first + SPREAD_SLOT_S:
                    i = order[at][1]
                    scrapes[i] = asyncio.create_task(self.scrape(targets[i]))
                    at += 1
        except BaseException:  # cancelled (shutdown): the scrapes already started go with it, as under gather
            for task in scrapes:
                if task is not None:
                    task.cancel()
            raise
        return list(await asyncio.gather(*(task for task in scrapes if task is not None)))


def _read_within_budget(
    adapt: AdaptFn, budget_s: float, body: bytes, target: TargetInfo, started_ts: float, content_type: str | None
) -> AdaptedPageLike:
    """In the reader process: the page read as on the loop, its parse stopped once it used ``budget_s`` of CPU."""
    deadline = time.thread_time() + budget_s

    def over_budget() -> str | None:
        if time.thread_time() > deadline:
            return f"reading the page took more than its CPU budget of {budget_s:g} s"
        return None

    # The page's samples live until the adapters are done and form no cycles: the garbage collector would
    # only trace them again and again as they pile up.
    collecting = gc.isenabled()
    gc.disable()
    try:
        with watched_by(over_budget):
            return adapt(body, target, started_ts, content_type=content_type)
    finally:
        if collecting:
            gc.enable()


def _unique(targets: Sequence[TargetInfo]) -> list[TargetInfo]:
    """One scrape per URL even if discovery lists a target twice."""
    seen: dict[str, TargetInfo] = {}
    for t in targets:
        seen.setdefault(t.url, t)
    return list(seen.values())


# -- running forever --------------------------------------------------------------------------------------


async def sleep_unless_stopped(sleep: Sleep, seconds: float, stop: asyncio.Event) -> None:
    """``sleep(seconds)``, ended early when ``stop`` is set (a shutdown does not wait out a loop's interval)."""
    sleeper = asyncio.ensure_future(sleep(seconds))
    current = asyncio.current_task()
    if current is not None and isinstance(sleeper, asyncio.Task):
        sleeper.set_name(current.get_name())  # whose sleep it is, in task dumps and to `VirtualTimer.asleep`
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (sleeper, stopper):
            t.cancel()


def spawn_guarded(
    name: str,
    body: Callable[[], Coroutine[Any, Any, None]],
    stop: asyncio.Event,
    *,
    restart_delay_s: float = 1.0,
    sleep: Sleep = asyncio.sleep,
) -> asyncio.Task[None]:
    """Run a never-ending coroutine as a named task that logs a crash and restarts after a delay
    instead of dying silently; it ends when ``stop`` is set (or the task is cancelled)."""

    async def guard() -> None:
        while not stop.is_set():
            try:
                await body()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("task %s crashed; restarting in %.1f s", name, restart_delay_s)
                await sleep(restart_delay_s)
            else:
                return

    return asyncio.create_task(guard(), name=name)


class VirtualTimer:
    """Async sleeping in virtual time: ``sleep`` waits until a test calls ``advance`` past its deadline.

    Pairs with `collector.clock.VirtualClock` so the scrape loop (and the control loop) run in tests and
    backtests without waiting for real time."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self._waiters: list[tuple[float, int, asyncio.Future[None], str]] = []
        self._seq = itertools.count()

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = asyncio.current_task()
        name = task.get_name() if task is not None else ""
        heapq.heappush(self._waiters, (self.clock.now() + seconds, next(self._seq), future, name))
        await future

    @property
    def sleepers(self) -> int:
        return sum(1 for _, _, f, _ in self._waiters if not f.done())

    def asleep(self, name: str) -> bool:
        """Whether the task named ``name`` sleeps here now (`spawn_guarded`'s names; `sleep_unless_stopped` gives
        its sleeper its caller's name). A count of sleepers cannot tell a loop mid-tick from one asleep while
        another task sleeps."""
        return any(n == name and not f.done() for _, _, f, n in self._waiters)

    async def until_sleepers(self, count: int, *, max_yields: int = 10_000) -> None:
        """Yield to other tasks until at least ``count`` are asleep here (a started loop has reached its
        first sleep); raises if they never get there, rather than hanging a test."""
        for _ in range(max_yields):
            if self.sleepers >= count:
                return
            await asyncio.sleep(0)
        raise RuntimeError(f"expected {count} sleeper(s), have {self.sleepers}")

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking sleepers in deadline order and letting each run before the next."""
        target = self.clock.now() + seconds
        while self._waiters and self._waiters[0][0] <= target:
            deadline, _, future, _ = heapq.heappop(self._waiters)
            self.clock.set(max(deadline, self.clock.now()))
            if not future.done():
                future.set_result(None)
            for _ in range(3):
                await asyncio.sleep(0)
        self.clock.set(max(target, self.clock.now()))
        await asyncio.sleep(0)
