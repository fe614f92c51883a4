"""Async scraping of engine and GPU targets: bounded, time-limited, size-capped, and health-tracked.

`Collector.collect_once(targets)` scrapes every target once (the control loop's tick and `kvpilot scrape`);
`ScrapeLoop` does so every interval, spreading targets over the interval by a deterministic per-target
offset, counting overruns, and following targets that come and go. Pages are turned into canonical
samples by `collector.adapt.adapt_page`, the same adapters `kvpilot parse` and the PromQL source use;
the GET itself is `collector.scrape_http` (a lean asyncio client by default, httpx on request).
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from collector.clock import Clock, VirtualClock, WallClock
from collector.health import HealthBook, TargetHealth
from collector.samples import GpuSample, ReplicaSample, TargetInfo
from collector.scrape_http import ACCEPT as ACCEPT
from collector.scrape_http import FETCHERS, Fetcher, ScrapeError

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 16 * 1024 * 1024


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
    """Limits for every scrape, validated once. ``timeout_s`` bounds the whole scrape (connect, headers
    and body together), so a target trickling an endless body cannot hold a worker."""

    timeout_s: float = 3.0
    max_bytes: int = DEFAULT_MAX_BYTES
    max_concurrency: int = 64
    http_client: str = "asyncio"  # a key of collector.scrape_http.FETCHERS

    def __post_init__(self) -> None:
        if self.http_client not in FETCHERS:
            raise ValueError(f"scrape config: http_client must be one of {sorted(FETCHERS)}, got {self.http_client!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"scrape config: timeout_s must be > 0, got {self.timeout_s}")
        if self.max_bytes < 1:
            raise ValueError(f"scrape config: max_bytes must be >= 1, got {self.max_bytes}")
        if self.max_concurrency < 1:
            raise ValueError(f"scrape config: max_concurrency must be >= 1, got {self.max_concurrency}")


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
        return [g for res in self.results for g in res.gpus]

    @property
    def down_targets(self) -> list[TargetInfo]:
        return [res.target for res in self.results if not res.ok]

    @property
    def gpu_nodes_scraped(self) -> frozenset[str]:
        """Nodes whose GPU exporter answered: a GPU of theirs missing from the page has vanished."""
        nodes = {g.node for res in self.results if res.ok for g in res.gpus}
        nodes |= {res.target.node for res in self.results if res.ok and res.target.kind == "gpu" and res.target.node}
        return frozenset(nodes)


def jitter_offset(url: str, interval_s: float, spread_fraction: float) -> float:
    """A stable offset in ``[0, interval_s * spread_fraction)`` for ``url``: targets spread over the
    interval instead of all firing at its start, and each keeps its slot across restarts (as Prometheus
    does), so its samples stay evenly spaced."""
    digest = hashlib.sha256(url.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * interval_s * spread_fraction


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
    ) -> None:
        self.config = config or ScrapeConfig()
        self.clock: Clock = clock or WallClock()
        if adapt is None:
            from collector.adapt import adapt_page

            self._adapt: AdaptFn = adapt_page
        else:
            self._adapt = adapt
        self._own_fetcher = fetcher is None
        self._fetcher = fetcher or FETCHERS[self.config.http_client](max_connections=self.config.max_concurrency)
        self._semaphore = asyncio.Semaphore(self.config.max_concurrency)
        self.health = HealthBook()

    async def __aenter__(self) -> Collector:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own_fetcher:
            await self._fetcher.aclose()

    async def scrape(self, target: TargetInfo) -> ScrapeResult:
        """Scrape one target; never raises for the target's faults (they become ``ok=False``)."""
        async with self._semaphore:
            started_ts = self.clock.now()
            t0 = time.perf_counter()
            body: bytes | None = None
            try:
                async with asyncio.timeout(self.config.timeout_s):
                    body, content_type = await self._fetcher.get(target.url, max_bytes=self.config.max_bytes)
                page = self._adapt(body, target, started_ts, content_type=content_type)
            except TimeoutError:
                return self._failed(target, started_ts, t0, f"timed out after {self.config.timeout_s:g} s", body)
            except ScrapeError as exc:
                return self._failed(target, started_ts, t0, str(exc), body)
            except OSError as exc:
                return self._failed(target, started_ts, t0, f"connection failed: {exc.strerror or exc}", body)
            except ValueError as exc:  # parse errors and pages no adapter recognises
                return self._failed(target, started_ts, t0, f"unreadable page: {exc}", body)
            except Exception as exc:  # an adapter bug must cost one target, not the whole tick
                log.exception("adapting the page of %s failed", target.url)
                return self._failed(target, started_ts, t0, f"adapter error: {type(exc).__name__}: {exc}", body)
            duration = time.perf_counter() - t0
            self.health.record(target.url, ok=True, started_ts=started_ts, duration_s=duration, body_bytes=len(body))
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

    def _failed(self, target: TargetInfo, started_ts: float, t0: float, error: str, body: bytes | None) -> ScrapeResult:
        duration = time.perf_counter() - t0
        size = len(body) if body is not None else None
        self.health.record(
            target.url, ok=False, started_ts=started_ts, duration_s=duration, error=error, body_bytes=size
        )
        return ScrapeResult(target=target, ok=False, timestamp=started_ts, duration_s=duration, error=error)

    async def collect_once(
        self, targets: Sequence[TargetInfo], *, spread_s: float = 0.0, sleep: Sleep = asyncio.sleep
    ) -> CollectResult:
        """Scrape every target once, concurrently (bounded); forget health of targets not listed.

        ``spread_s`` > 0 starts each target at its stable offset within that many seconds (see
        `jitter_offset`) instead of all at once, so a tick's load and the targets' see a steady trickle."""
        started = self.clock.now()
        if spread_s > 0:
            results = await asyncio.gather(*(self._scrape_after(t, spread_s, sleep) for t in _unique(targets)))
        else:
            results = await asyncio.gather(*(self.scrape(t) for t in _unique(targets)))
        self.health.retain(t.url for t in targets)
        return CollectResult(timestamp=started, results=tuple(results), health=self.health.snapshot())

    async def _scrape_after(self, target: TargetInfo, spread_s: float, sleep: Sleep) -> ScrapeResult:
        await sleep(jitter_offset(target.url, spread_s, 1.0))
        return await self.scrape(target)


def _unique(targets: Sequence[TargetInfo]) -> list[TargetInfo]:
    """One scrape per URL even if discovery lists a target twice."""
    seen: dict[str, TargetInfo] = {}
    for t in targets:
        seen.setdefault(t.url, t)
    return list(seen.values())


# -- running forever --------------------------------------------------------------------------------------


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
        self._waiters: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (self.clock.now() + seconds, next(self._seq), future))
        await future

    @property
    def sleepers(self) -> int:
        return sum(1 for _, _, f in self._waiters if not f.done())

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
            deadline, _, future = heapq.heappop(self._waiters)
            self.clock.set(max(deadline, self.clock.now()))
            if not future.done():
                future.set_result(None)
            for _ in range(3):
                await asyncio.sleep(0)
        self.clock.set(max(target, self.clock.now()))
        await asyncio.sleep(0)


TargetSource = Callable[[], Awaitable[Sequence[TargetInfo]]]
OnTick = Callable[[CollectResult], Awaitable[None]]


class ScrapeLoop:
    """Every ``interval_s``: ask discovery for targets, scrape each at its stable offset within the first
    ``spread_fraction`` of the interval, then hand the tick's `CollectResult` to ``on_tick``.

    A tick that ends after the next one should have started is an overrun: it is counted and the missed
    ticks are skipped (as Prometheus skips missed scrapes) rather than run back to back.
    """

    def __init__(
        self,
        collector: Collector,
        targets: TargetSource,
        on_tick: OnTick,
        *,
        interval_s: float = 5.0,
        spread_fraction: float = 0.5,
        clock: Clock | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"scrape loop: interval_s must be > 0, got {interval_s}")
        if not 0 <= spread_fraction < 1:
            raise ValueError(f"scrape loop: spread_fraction must be within [0, 1), got {spread_fraction}")
        self.collector = collector
        self._targets = targets
        self._on_tick = on_tick
        self.interval_s = interval_s
        self.spread_fraction = spread_fraction
        self.clock = clock or collector.clock
        self._sleep = sleep
        self.ticks = 0
        self.overruns = 0
        self.discovery_errors = 0
        self.last_targets: list[TargetInfo] = []

    def start(self, stop: asyncio.Event) -> asyncio.Task[None]:
        return spawn_guarded("kvpilot.scrape-loop", lambda: self.run(stop), stop, sleep=self._sleep)

    async def run(self, stop: asyncio.Event) -> None:
        next_tick = self.clock.now()
        while not stop.is_set():
            await self.tick(stop)
            now = self.clock.now()
            next_tick += self.interval_s
            if now > next_tick:
                missed = int((now - next_tick) // self.interval_s) + 1
                self.overruns += 1
                log.warning("scrape tick overran by %.2f s; skipping %d tick(s)", now - next_tick, missed)
                next_tick += missed * self.interval_s
            await self._sleep_unless_stopped(next_tick - now, stop)

    async def tick(self, stop: asyncio.Event | None = None) -> CollectResult:
        """One tick: discover, scrape all at their offsets, report."""
        started = self.clock.now()
        targets = await self._discover()
        collected = await self.collector.collect_once(
            targets, spread_s=self.interval_s * self.spread_fraction, sleep=self._sleep
        )
        result = CollectResult(timestamp=started, results=collected.results, health=collected.health)
        self.ticks += 1
        await self._on_tick(result)
        return result

    async def _discover(self) -> list[TargetInfo]:
        try:
            self.last_targets = list(await self._targets())
        except asyncio.CancelledError:
            raise
        except Exception:
            # Keep scraping what we knew: a discovery hiccup must not blank the fleet.
            self.discovery_errors += 1
            log.exception("target discovery failed; keeping the %d known targets", len(self.last_targets))
        return self.last_targets

    async def _sleep_unless_stopped(self, seconds: float, stop: asyncio.Event) -> None:
        if seconds <= 0 or stop.is_set():
            return
        sleeper = asyncio.ensure_future(self._sleep(seconds))
        stopper = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for f in (sleeper, stopper):
                f.cancel()
