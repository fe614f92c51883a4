"""Builds and runs the grpc.aio server that KEDA's `scalerAddress` points at, with optional (m)TLS.

TLS: a server certificate and key; with a client CA as well, clients must present a certificate signed by
it (mTLS), which is what KEDA's `tlsClientCert`/`tlsClientKey` auth parameters provide.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import grpc

from scaler.keda import externalscaler_pb2_grpc as pb_grpc
from scaler.keda.servicer import ExternalScalerServicer

Registrar = Callable[[grpc.aio.Server], None]

# Keepalive settings that tolerate KEDA's long-lived StreamIsActive and its pooled, idle-between-polls channels.
SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.max_receive_message_length", 1 << 20),  # a ScaledObjectRef is tiny; refuse anything large
)


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
    address: str, registrars: Iterable[Registrar], *, tls: TlsFiles | None = None
) -> tuple[grpc.aio.Server, int]:
    """A server with `registrars`' services bound to `address` ("host:port"; port 0 picks one); returns its port.

    The benchmark builds its peer (grpc's health service) through this same function so both share settings.
    """
    credentials = tls.credentials() if tls is not None else None  # unreadable files fail before anything starts
    server = grpc.aio.server(options=list(SERVER_OPTIONS))
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
