"""What `kvpilot run` does once its settings are loaded: wire the service, serve HTTP (uvicorn) and KEDA gRPC,
and shut all of it down in order on SIGTERM, SIGINT or SIGHUP (the tick in progress abandoned → store flushed → servers
stop)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
from collections.abc import Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from api import series as S  # noqa: N812 (the series catalogue, as api.exposition names it)
from api.auth import TokenAuth
from api.main import create_app
from collector.clock import Clock, WallClock
from kvpilot.runtime import sources as sources_mod
from kvpilot.runtime.event_loop import running_loop_name
from kvpilot.runtime.http_server import ApiServerConfig
from kvpilot.runtime.shards import ShardCoordinator
from kvpilot.runtime.stopping import in_daemon_thread
from kvpilot.runtime.wiring import advertised_address, build_service
from kvpilot.settings import Settings, SettingsError
from scaler.keda.reader import DecisionReader
from scaler.publish import DecisionBoard, DecisionSource

if TYPE_CHECKING:
    from scaler.keda.process import KedaProcess
    from scaler.keda.server import Endpoint, TlsFiles
    from scaler.keda.servicer import ServicerSettings

log = logging.getLogger("kvpilot")

# UvicornServer's housekeeping period, and what uvicorn counts for it (its own sleeps are 0.1 s: 10 to a second).
HOUSEKEEPING_S = 1.0
HOUSEKEEPING_TICKS = 10


class UvicornServer(uvicorn.Server):
    """uvicorn without its own signal handling: kvpilot's handler stops the loop first, then the server (the demo
    handles Ctrl-C itself the same way).

    Its housekeeping wakes once a second, and at once when ``should_exit`` is set, instead of uvicorn's poll every
    0.1 s: those ten wake-ups a second were most of an idle process's CPU (~10 ms per 5 s tick, in every instance
    alike, sharded or not; issue 17). What they do is per second anyway (the Date header), or waits for the flag."""

    def __init__(self, config: uvicorn.Config) -> None:
        self._exit_wake: asyncio.Event | None = None
        self._wake_loop: asyncio.AbstractEventLoop | None = None
        super().__init__(config)

    @property  # uvicorn's plain attribute, with a wake-up added
    def should_exit(self) -> bool:
        return self._should_exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._should_exit = value
        if value and self._exit_wake is not None and self._wake_loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nothing waits any more
                self._wake_loop.call_soon_threadsafe(self._exit_wake.set)

    async def main_loop(self) -> None:
        """uvicorn's ``main_loop``, one ``on_tick`` a second (``counter`` stepping by 10 keeps its once-a-second
        work on every call) and none in between unless ``should_exit`` wakes it."""
        self._wake_loop = asyncio.get_running_loop()
        self._exit_wake = asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + HOUSEKEEPING_TICKS) % 864000
            if not self.should_exit:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._exit_wake.wait(), HOUSEKEEPING_S)
            should_exit = await self.on_tick(counter)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One line per scrape request would drown everything else; scrape health is in /metrics and /v1/targets.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLevelName(level)))


def keda_reader(decisions: DecisionSource, settings: Settings, clock: Clock) -> DecisionReader:
    """The one reader of the loop's decisions for KEDA, gRPC and the metrics-api route alike (same board, clock and
    staleness limit from settings). ``decisions``: ``Service.decisions``, the loop's board (with sharding, and the
    stored decisions of a shard just taken: ``kvpilot.runtime.taken_answers``)."""
    return DecisionReader(decisions, clock, settings.decision_stale_after_s)


def _keda_security(settings: Settings) -> tuple[TlsFiles | None, ServicerSettings]:
    from scaler.keda.server import TlsFiles
    from scaler.keda.servicer import ServicerSettings

    k = settings.keda
    tls = None
    if k.tls_cert_file is not None and k.tls_key_file is not None:
        tls = TlsFiles(k.tls_cert_file, k.tls_key_file, k.tls_client_ca_file)
    return tls, ServicerSettings(tokens=frozenset(t.get_secret_value() for t in k.bearer_tokens))


def _not_served(e: Exception, settings: Settings) -> None:
    """A KEDA server that cannot serve: fatal when `scaler.mode` is keda (KEDA would poll a port that another
    process answers, or nothing), else logged."""
    if settings.scaler.mode == "keda":
        raise SettingsError(f"{e} (scaler.mode is keda: KEDA would have no scaler to ask)") from None
    log.error("%s; the KEDA external scaler is not served (HTTP, the loop and decisions go on)", e)


def _keda_endpoint(
    reader: DecisionReader, settings: Settings, shards: ShardCoordinator | None = None
) -> Endpoint | None:
    """The KEDA gRPC endpoint, bound but not started, answering through ``reader`` (the very object the metrics-api
    route reads); None where it cannot be served and the mode allows that.

    Raises SettingsError when `scaler.mode` is keda and the port cannot be bound or the TLS files read: KEDA
    would otherwise poll a port that another process answers, or nothing."""
    from scaler.keda.forward import Forwarding
    from scaler.keda.server import build_endpoint

    tls, servicer_settings = _keda_security(settings)
    address = f"{settings.bind_host}:{settings.api.grpc_port}"
    forwarding = None
    if shards is not None:
        forwarding = Forwarding(
            shards, reader.clock, reader.stale_after_s, timeout_s=settings.sharding.forward_timeout_s
        )
    try:
        endpoint = build_endpoint(address, reader, servicer_settings, tls=tls, forwarding=forwarding)
    except ValueError as e:
        _not_served(e, settings)
        return None
    if shards is not None and settings.sharding.advertise_address is None:
        shards.address = advertised_address(endpoint.port)  # the port actually bound (0 picks one)
    return endpoint


def keda_from_process(settings: Settings, clock: Clock, shards: ShardCoordinator | None) -> bool:
    """`keda.serve_from: process` where it can apply: its process reads staleness on the wall clock, so the loop
    must run on it; with sharding, forwarding needs the shard ownership the loop's process holds, so the server
    stays there (docs/keda.md)."""
    if settings.keda.serve_from != "process":
        return False
    if not isinstance(clock, WallClock) or shards is not None:
        why = "sharding is on" if shards is not None else "the loop does not run on the wall clock"
        log.info("keda.serve_from is process, but %s: KEDA is served from the loop's process", why)
        return False
    return True


async def _keda_process(board: DecisionBoard, reader: DecisionReader, settings: Settings) -> KedaProcess | None:
    """KEDA's own process, started and serving over a mirror of ``board``; None where it cannot be served and the
    mode allows that (raises SettingsError as ``_keda_endpoint`` does)."""
    from scaler.keda.process import ChildConfig, KedaProcess

    tls, servicer_settings = _keda_security(settings)
    config = ChildConfig(
        f"{settings.bind_host}:{settings.api.grpc_port}", servicer_settings, reader.stale_after_s, tls=tls,
        log_level=settings.log_level,
    )  # fmt: skip
    keda = KedaProcess(board, config)
    try:
        await keda.start()
    except (ValueError, RuntimeError, OSError) as e:
        _not_served(e, settings)
        return None
    return keda


class _KedaProcessMetrics(Collector):
    """``kvpilot_keda_server_up`` and ``kvpilot_keda_server_restarts_total`` of KEDA's own process."""

    def __init__(self, keda: KedaProcess) -> None:
        self._keda = keda

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(S.KEDA_SERVER_UP.name, S.KEDA_SERVER_UP.help, value=1 if self._keda.serving else 0)
        name = S.KEDA_SERVER_RESTARTS.name.removesuffix("_total")
        yield CounterMetricFamily(name, S.KEDA_SERVER_RESTARTS.help, value=self._keda.restarts_total)


# SIGHUP as well: its default action killed kvpilot with no word and no shutdown (status 129), whether an operator
# sent it to reload the settings, as Prometheus and Alertmanager take it, or the terminal it ran in closed.
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


async def run(settings: Settings, *, config_file: Path | None = None) -> int:
    _configure_logging(settings.log_level)
    if not settings.auth_enabled:
        log.warning(
            "no API tokens configured: the API is open (development only; set KVPILOT_ADMIN_TOKENS)%s",
            "" if settings.api.host is not None else ", so it listens on 127.0.0.1 only (api.host to change it)",
        )
    # SIGTERM and SIGINT are handled from here on: one arriving while the store is prepared (migrations, the restore
    # reads, which a large or slow store makes long) ends the run with 0 and a log line, not the signal's default
    # (killed with no word, status 143) or a KeyboardInterrupt once the preparation ended.
    loop = asyncio.get_running_loop()
    signalled = asyncio.Event()

    def stop_requested(signame: str) -> None:
        if signame == signal.SIGHUP.name:
            log.warning("SIGHUP: kvpilot does not read its settings again on SIGHUP; restart it to apply them")
        log.info("%s: abandoning the tick in progress, flushing the store, stopping", signame)
        signalled.set()

    for sig in _STOP_SIGNALS:
        loop.add_signal_handler(sig, stop_requested, sig.name)
    # The sources first: a bad targets file or kubeconfig is told before anything listens (it was hidden behind
    # "cannot listen" when the port was taken); then the port, before the store is prepared.
    srcs = sources_mod.build(settings)
    try:
        sock = _listen(settings.bind_host, settings.api.http_port)
    except OSError as e:
        with srcs:  # closed on the way out (the embedded simulator stops)
            log.error(
                "cannot listen on %s:%d (api.http_port: --port or KVPILOT_HTTP_PORT): %s",
                settings.bind_host, settings.api.http_port, e.strerror or e,
            )  # fmt: skip
        return 1
    http_port = sock.getsockname()[1]
    with sock, srcs:
        board = DecisionBoard()
        # In a daemon thread: a stop meanwhile abandons it (as a kill would: each migration is one transaction).
        building = in_daemon_thread(partial(build_service, settings, srcs, board=board), name="build-service")
        stop_signal = asyncio.ensure_future(signalled.wait())
        either: set[asyncio.Future[Any]] = {building, stop_signal}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        stop_signal.cancel()
        if not building.done():
            building.cancel()
            log.info("stopping while the store was prepared (migrations, restore): abandoned, nothing was started")
            log.info("kvpilot stopped")
            return 0
        service, restored = building.result()
        reader = keda_reader(service.decisions, settings, service.clock)
        keda_endpoint: Endpoint | None = None
        keda_process: KedaProcess | None = None
        try:
            shards = service.leadership if isinstance(service.leadership, ShardCoordinator) else None
            if keda_from_process(settings, service.clock, shards):
                keda_process = await _keda_process(board, reader, settings)
            else:
                keda_endpoint = _keda_endpoint(reader, settings, shards)
        except SettingsError as e:
            log.error("%s", e)
            service.engine.dispose()
            return 1
        auth = TokenAuth(
            [t.get_secret_value() for t in settings.api.read_tokens],
            [t.get_secret_value() for t in settings.api.admin_tokens],
            anonymous_read=settings.api.anonymous_read,
        )
        # the metrics-api route reads what gRPC reads: the same reader object, so the same limit
        app = create_app(service, auth, keda_reader=reader, request_timeout_s=settings.api.request_timeout_s)
        server = UvicornServer(
            ApiServerConfig(
                app, host=settings.bind_host, port=settings.api.http_port,
                header_timeout_s=settings.api.header_timeout_s, max_connections=settings.api.max_connections,
                registry=service.registry,
            )
        )  # fmt: skip

        def stop_now() -> None:
            service.stop.set()
            server.should_exit = True

        def shutdown(signame: str) -> None:
            stop_requested(signame)
            stop_now()

        for sig in _STOP_SIGNALS:
            loop.add_signal_handler(sig, shutdown, sig.name)
        if signalled.is_set():  # a signal since the service was built, before this handler
            stop_now()
        fleet = f"the embedded simulator at {srcs.simulator_url}" if srcs.simulator_url else "the configured fleet"
        log.info(
            "kvpilot running: API on http://%s:%d (docs at /docs), store %s, watching %s; event loop %s",
            settings.bind_host, http_port, _redact(settings.database_url), fleet, running_loop_name(),
        )  # fmt: skip
        keda: asyncio.Task[None] | asyncio.Task[bool]
        if keda_process is not None and keda_process.port is not None:
            serving = keda_process
            service.keda_serving = lambda: serving.serving
            service.registry.register(_KedaProcessMetrics(keda_process))
            keda = asyncio.create_task(keda_process.run(service.stop), name="keda-process")
            log.info(
                "KEDA external scaler (gRPC%s, own process %s) on %s:%d; decisions older than %g s are refused",
                ", TLS" if settings.keda.tls_cert_file else "", keda_process.pid, settings.bind_host,
                keda_process.port, reader.stale_after_s,
            )  # fmt: skip
        elif keda_endpoint is not None:
            keda = asyncio.create_task(keda_endpoint.serve(service.stop), name="keda-grpc")
            log.info(
                "KEDA external scaler (gRPC%s) on %s:%d; decisions older than %g s are refused",
                ", TLS" if settings.keda.tls_cert_file else "", settings.bind_host, keda_endpoint.port,
                reader.stale_after_s,
            )  # fmt: skip
        else:
            keda = asyncio.create_task(service.stop.wait(), name="keda-grpc-absent")
        http = asyncio.create_task(server.serve(sockets=[sock]), name="http-api")
        # Served before the service starts: its warm start (the forecasters' stored day) takes ~0.15 s of CPU per
        # deployment in a thread, and /healthz (the liveness probe), /readyz (503 until the first tick) and KEDA
        # (the restored decisions until stale, as before any tick) answer meanwhile.
        try:
            await service.start(restored)
        except BaseException:
            service.stop.set()
            server.should_exit = True
            await asyncio.gather(http, keda, return_exceptions=True)
            raise
        done, _ = await asyncio.wait({http, asyncio.ensure_future(service.stop.wait())}, return_when="FIRST_COMPLETED")
        if http in done and not service.stop.is_set():
            log.error("the HTTP server stopped on its own; shutting down")
            service.stop.set()
        await service.wait()
        server.should_exit = True
        await asyncio.gather(http, keda, return_exceptions=True)
        service.engine.dispose()
        log.info("kvpilot stopped")
        # The heap (an hour of FleetState history) is garbage now; collecting it at interpreter exit took 6-17 s
        # after this line on a loaded machine, past a pod's grace period. Frozen objects are never collected.
        gc.freeze()
    return 0


def _listen(host: str, port: int) -> socket.socket:
    """Bind the HTTP socket before anything else starts, so a port in use fails at once with a clear message."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and accepted
    # connections inherit this. Without it a keep-alive client waited ~40 ms per answer (Nagle's algorithm holding
    # the body behind the headers until the client's delayed ACK).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _redact(url: str) -> str:
    """The database URL without its password, for logs."""
    from store.db import url_shown

    return url_shown(url)
