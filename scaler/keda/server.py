"""Builds and runs the grpc.aio server that KEDA's `scalerAddress` points at, with optional (m)TLS.

TLS: a server certificate and key; with a client CA as well, clients must present a certificate signed by
it (mTLS), which is what KEDA's `tlsClientCert`/`tlsClientKey` auth parameters provide.

`build_endpoint` is what `kvpilot run` serves: the ExternalScaler plus grpc's standard health service
(`grpc.health.v1.Health`, for `grpc_health_probe` and kubelet gRPC probes), SERVING until shutdown. Shutdown
turns health to NOT_SERVING, ends open `StreamIsActive` streams with OK, then stops the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from scaler.keda import externalscaler_pb2 as pb
from scaler.keda import externalscaler_pb2_grpc as pb_grpc
from scaler.keda.forward import Forwarding
from scaler.keda.reader import DecisionReader
from scaler.keda.servicer import ExternalScalerServicer, ServicerSettings

Registrar = Callable[[grpc.aio.Server], None]

MAX_REQUEST_BYTES = 8 << 10

# Keepalive settings that tolerate KEDA's long-lived StreamIsActive and its pooled, idle-between-polls channels.
SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    # A ScaledObjectRef is tiny (KEDA's: some hundreds of bytes); a call past 8 KiB is refused RESOURCE_EXHAUSTED
    # ("Received message larger than max (N vs. 8192)") before it is read whole. It was 1 MiB (session 28: one
    # client's 3,000 concurrent calls of 0.9 MB each took the server to 1.96 GB at its peak), then 64 KiB.
    ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
    # What a call not yet taken up may send ahead of being read: HTTP/2's window per stream, 8 KiB (a whole call
    # of the largest size taken), not grown by grpc's bandwidth probe. With grpc's 64 KiB window grown by the probe,
    # the backlog below held each call's bytes whole: 5,000 calls of 60 KB at once took the server to 297 MB at its
    # peak (median of 3), 102 MB with these three settings; small calls as before (bench/keda_burst.py; BENCHMARKS.md,
    # "A large call's memory in the backlog").
    ("grpc.http2.lookahead_bytes", MAX_REQUEST_BYTES),
    ("grpc.http2.bdp_probe", 0),
    # gRPC core sets SO_REUSEPORT by default, so a second kvpilot on the same port would bind beside the first and
    # share its connections; off, a taken port is a bind error.
    ("grpc.so_reuseport", 0),
    # As the HTTP API's `api.header_timeout_s` and `api.max_connections` (kvpilot/runtime/http_server.py): a
    # connection that has not finished its HTTP/2 (and TLS) handshake in 10 s is closed (gRPC's default: 60 s after
    # it opened), and past 1000 open connections a new one is closed at once (default: no bound). KEDA keeps one
    # channel per scaler address; sharding peers, one per peer.
    ("grpc.server_handshake_timeout_ms", 10_000),
    ("grpc.max_allowed_incoming_connections", 1000),
    # Calls received but not yet taken up by grpc.aio's loop (it takes them one at a time): past the first number
    # grpc core cancels new ones at random, past the second every one (the client reads CANCELLED). grpc's 1000 and
    # 3000 cancelled 561-601 of 3,000 calls sent at once and 836-1,974 of 5,000; at 5000 and 10000 none were, for
    # ~15 MB more at the peak (bench/keda_burst.py; BENCHMARKS.md, "Thousands of KEDA calls at once").
    ("grpc.server.max_pending_requests", 5000),
    ("grpc.server.max_pending_requests_hard_limit", 10_000),
)


# Calls served at once (grpc's ``maximum_concurrent_rpcs``), open StreamIsActive streams included; one more is
# answered RESOURCE_EXHAUSTED at once. None (grpc's default): every call is taken, however many. Decided by
# bench/keda_burst.py (BENCHMARKS.md, "Thousands of calls at once"); docs/keda.md says what KEDA does with the answer.
MAX_CONCURRENT_CALLS: int | None = None


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None  # set -> mutual TLS: a client certificate signed by this CA is required

    def credentials(self) -> grpc.ServerCredentials:
        def read(what: str, path: Path) -> bytes:
            try:
                return path.read_bytes()
            except OSError as error:
                raise ValueError(f"error reading KEDA server TLS {what} {path}: {error.strerror}") from None

        cert, key = read("certificate", self.cert_file), read("key", self.key_file)
        ca = read("client CA", self.client_ca_file) if self.client_ca_file is not None else None
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)


# The generated stubs are untyped; this is the one signature kvpilot relies on.
_add_external_scaler: Callable[[ExternalScalerServicer, grpc.aio.Server], None] = (
    pb_grpc.add_ExternalScalerServicer_to_server
)


def register_external_scaler(servicer: ExternalScalerServicer) -> Registrar:
    return lambda server: _add_external_scaler(servicer, server)


def build_server(
    address: str,
    registrars: Iterable[Registrar],
    *,
    tls: TlsFiles | None = None,
    max_concurrent_calls: int | None = MAX_CONCURRENT_CALLS,
) -> tuple[grpc.aio.Server, int]:
    """A server with `registrars`' services bound to `address` ("host:port"; port 0 picks one); returns its port.
    ``max_concurrent_calls``: calls served at once; one more is answered RESOURCE_EXHAUSTED at once (None: no bound).

    The benchmark builds its peer (grpc's health service) through this same function so both share settings.
    """
    credentials = tls.credentials() if tls is not None else None  # unreadable files fail before anything starts
    server = grpc.aio.server(options=list(SERVER_OPTIONS), maximum_concurrent_rpcs=max_concurrent_calls)
    for register in registrars:
        register(server)
    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError as error:
        raise ValueError(f"cannot bind the KEDA gRPC server to {address!r}: {error}") from None
    if port == 0:
        raise ValueError(f"cannot bind the KEDA gRPC server to {address!r}")
    return server, port


async def serve(server: grpc.aio.Server, stop: asyncio.Event, *, grace_s: float = 5.0) -> None:
    """Runs `server` until `stop` is set (SIGTERM), then lets in-flight calls finish for `grace_s`."""
    await server.start()
    try:
        await stop.wait()
    finally:
        await server.stop(grace_s)


SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["ExternalScaler"].full_name  # "externalscaler.ExternalScaler"


@dataclass
class Endpoint:
    """The ExternalScaler and the health service on one bound (not yet started) server."""

    server: grpc.aio.Server
    port: int
    servicer: ExternalScalerServicer
    health: Any = field(repr=False)  # grpc_health.v1.health.aio.HealthServicer

    async def serve(
        self, stop: asyncio.Event, *, grace_s: float = 5.0, on_serving: Callable[[], None] | None = None
    ) -> None:
        """Serves until `stop` is set, then: health NOT_SERVING, streams end with OK, in-flight calls finish.
        ``on_serving`` is called once the server answers (the KEDA process tells its parent so)."""
        from grpc_health.v1 import health_pb2

        await self.server.start()
        try:
            for service in ("", SERVICE_NAME):
                await self.health.set(service, health_pb2.HealthCheckResponse.SERVING)
            if on_serving is not None:
                on_serving()
            await stop.wait()
        finally:
            await self.health.enter_graceful_shutdown()
            self.servicer.close()
            await self.server.stop(grace_s)
            if self.servicer.forwarding is not None:
                await self.servicer.forwarding.close()


def build_endpoint(
    address: str,
    reader: DecisionReader,
    settings: ServicerSettings,
    *,
    tls: TlsFiles | None = None,
    forwarding: Forwarding | None = None,
) -> Endpoint:
    """The KEDA endpoint `kvpilot run` serves; raises ValueError naming the address when it cannot bind. ``reader``
    is the loop's decisions with its clock (a VirtualClock in tests) and staleness limit, the one the metrics-api
    route reads too. ``forwarding`` (sharding): calls for deployments another instance owns are forwarded to it."""
    from grpc_health.v1 import health, health_pb2_grpc

    servicer = ExternalScalerServicer(reader, settings, forwarding=forwarding)
    health_servicer = health.aio.HealthServicer()

    def add_health(server: grpc.aio.Server) -> None:
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)

    server, port = build_server(address, [register_external_scaler(servicer), add_health], tls=tls)
    return Endpoint(server, port, servicer, health_servicer)
