"""The KEDA gRPC server's connections are bounded as the HTTP API's are: a connection that never finishes its HTTP/2
handshake is closed at the handshake deadline (gRPC's default held it 60 s), and past the bound a new connection is
closed at once while those open are served (gRPC's default accepted every one). Real sockets on loopback; the
deadline and the bound are shortened here, the options are kvpilot's own (``SERVER_OPTIONS``)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from scaler.keda import server as server_mod
from scaler.keda.server import SERVER_OPTIONS, build_server

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def test_kvpilots_options_bound_the_handshake_and_the_connections() -> None:
    options = dict(SERVER_OPTIONS)
    assert options["grpc.server_handshake_timeout_ms"] == 10_000
    assert options["grpc.max_allowed_incoming_connections"] == 1000


@asynccontextmanager
async def _serving(monkeypatch: pytest.MonkeyPatch, **shorter: int) -> AsyncIterator[int]:
    options = {**dict(SERVER_OPTIONS), **{f"grpc.{k}": v for k, v in shorter.items()}}
    monkeypatch.setattr(server_mod, "SERVER_OPTIONS", tuple(options.items()))

    def add_health(server: grpc.aio.Server) -> None:
        health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)

    server, port = build_server("127.0.0.1:0", [add_health])
    await server.start()
    try:
        yield port
    finally:
        await server.stop(0)


def _closed_after(s: socket.socket, limit_s: float) -> float | None:
    """Seconds until the server closes ``s`` (what it sends first, its SETTINGS, is read and dropped); None: open."""
    s.settimeout(limit_s)
    t0 = time.monotonic()
    try:
        while s.recv(4096):
            pass
    except TimeoutError:
        return None
    except OSError:
        pass
    return time.monotonic() - t0


async def test_an_unfinished_handshake_is_closed_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    async with _serving(monkeypatch, server_handshake_timeout_ms=1000) as port:

        def probe() -> tuple[float | None, float | None]:
            with (
                socket.create_connection(("127.0.0.1", port)) as silent,
                socket.create_connection(("127.0.0.1", port)) as partial,
            ):
                partial.sendall(PREFACE[:10])  # a preface that stops halfway
                return _closed_after(silent, 5), _closed_after(partial, 5)

        silent_s, partial_s = await asyncio.to_thread(probe)
    assert silent_s is not None
    assert silent_s < 3
    assert partial_s is not None
    assert partial_s < 3


async def test_past_the_bound_a_connection_is_closed_and_those_open_are_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bound = 3
    async with _serving(monkeypatch, max_allowed_incoming_connections=bound) as port:
        own_connection = [("grpc.use_local_subchannel_pool", 1)]  # channels alike would share one connection
        channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=own_connection) for _ in range(bound)]
        request = health_pb2.HealthCheckRequest()
        for channel in channels:
            await health_pb2_grpc.HealthStub(channel).Check(request, timeout=5)

        def extra() -> float | None:
            with socket.create_connection(("127.0.0.1", port)) as s:
                return _closed_after(s, 5)

        refused_s = await asyncio.to_thread(extra)
        served = [(await health_pb2_grpc.HealthStub(c).Check(request, timeout=5)).status for c in channels]
        for channel in channels:
            await channel.close()
    assert refused_s is not None
    assert refused_s < 1
    assert served == [health_pb2.HealthCheckResponse.SERVING] * bound
