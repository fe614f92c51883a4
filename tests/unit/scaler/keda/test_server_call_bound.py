"""The KEDA gRPC server's bound on calls served at once (``build_server``'s ``max_concurrent_calls``, grpc's
``maximum_concurrent_rpcs``), over real gRPC on loopback: while the bound's worth of calls are being served, one more
(of any method) is answered RESOURCE_EXHAUSTED at once rather than queued behind them until its deadline, those
being served are answered when they are done, and the server takes calls again as soon as they are. KEDA counts
either answer as a failure towards ``fallback`` (docs/keda.md); an early one holds no HPA sync."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from scaler.keda.server import build_server
from tests.helpers.poll import until

BOUND = 4
HANG_GUARD_S = 30.0


class Held:
    """A unary method whose calls wait until ``let_go`` is set; ``serving`` counts those inside it."""

    def __init__(self) -> None:
        self.let_go = asyncio.Event()
        self.serving = 0

    async def wait(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        self.serving += 1
        await self.let_go.wait()
        return request

    def register(self, server: grpc.aio.Server) -> None:
        handler = grpc.unary_unary_rpc_method_handler(self.wait)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Held", {"Wait": handler}),))


@asynccontextmanager
async def _serving(held: Held) -> AsyncIterator[grpc.aio.Channel]:
    def add_health(server: grpc.aio.Server) -> None:
        health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)

    server, port = build_server("127.0.0.1:0", [held.register, add_health], max_concurrent_calls=BOUND)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel
    finally:
        held.let_go.set()
        await server.stop(0)


async def _code(call: object) -> grpc.StatusCode:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as e:
        return e.code()
    return grpc.StatusCode.OK


async def test_calls_beyond_the_bound_are_refused_at_once_and_those_served_answered() -> None:
    held = Held()
    async with _serving(held) as channel:
        wait = channel.unary_unary("/test.Held/Wait")
        check = health_pb2_grpc.HealthStub(channel).Check
        served = [asyncio.ensure_future(_code(wait(b"x", timeout=HANG_GUARD_S))) for _ in range(BOUND)]
        await until(lambda: held.serving == BOUND, what=f"{BOUND} calls being served", timeout_s=HANG_GUARD_S)

        # while the bound's worth are held: more calls, of the held method and of another, each refused at once
        beyond = [_code(wait(b"y", timeout=HANG_GUARD_S)) for _ in range(3)]
        beyond.append(_code(check(health_pb2.HealthCheckRequest(), timeout=HANG_GUARD_S)))
        refused = await asyncio.gather(*beyond)
        assert not held.let_go.is_set()
        assert all(not f.done() for f in served)

        held.let_go.set()
        answered = await asyncio.gather(*served)
        after = await check(health_pb2.HealthCheckRequest(), timeout=HANG_GUARD_S)
    assert refused == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 4
    assert answered == [grpc.StatusCode.OK] * BOUND
    assert after.status == health_pb2.HealthCheckResponse.SERVING
