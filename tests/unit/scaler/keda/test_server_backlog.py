"""Thousands of KEDA calls at once, over real gRPC on loopback: every one is answered. grpc core keeps the calls it
has received but grpc.aio's loop has not yet taken up in a backlog, and with grpc's defaults (1,000 soft, 3,000 hard:
``grpc.server.max_pending_requests[_hard_limit]``) it cancelled the calls past them (561-601 of 3,000 sent at once,
836-1,974 of 5,000: bench/keda_burst.py; BENCHMARKS.md, "Thousands of KEDA calls at once"). KEDA counts a
cancelled call as a failure towards ``fallback``. kvpilot's server options raise the backlog to 5,000 and 10,000."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import grpc

from collector.clock import WallClock
from scaler.decision import Decision
from scaler.keda import externalscaler_pb2 as pb
from scaler.keda import externalscaler_pb2_grpc as pb_grpc
from scaler.keda.reader import DecisionReader
from scaler.keda.server import SERVER_OPTIONS, build_server, register_external_scaler
from scaler.keda.servicer import ExternalScalerServicer
from scaler.publish import DecisionBoard

CALLS = 3000
HANG_GUARD_S = 60.0


def test_kvpilots_backlog_is_above_grpcs_default() -> None:
    options = dict(SERVER_OPTIONS)
    assert options["grpc.server.max_pending_requests"] == 5000
    assert options["grpc.server.max_pending_requests_hard_limit"] == 10_000


@contextmanager
def _serving() -> Iterator[int]:
    """kvpilot's ExternalScaler with one decision, on a loop and thread of its own (as in `kvpilot run`, the client
    is someone else's)."""
    board = DecisionBoard()
    board.publish(Decision("team/model", WallClock().now(), 3, 3, 4, 1, "predictive", "test"))
    ready, stop = threading.Event(), threading.Event()
    box: dict[str, int] = {}

    async def serve() -> None:
        servicer = ExternalScalerServicer(DecisionReader(board, WallClock(), 0))
        server, box["port"] = build_server("127.0.0.1:0", [register_external_scaler(servicer)])
        await server.start()
        ready.set()
        await asyncio.to_thread(stop.wait, HANG_GUARD_S * 2)
        await server.stop(0)

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(HANG_GUARD_S), "the server never started"
    try:
        yield box["port"]
    finally:
        stop.set()
        thread.join(HANG_GUARD_S)


async def test_three_thousand_calls_at_once_are_all_answered() -> None:
    with _serving() as port:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.ExternalScalerStub(channel)
            request = pb.GetMetricsRequest(
                scaledObjectRef=pb.ScaledObjectRef(name="model", namespace="team"), metricName="kvpilot-replicas"
            )
            await stub.GetMetrics(request, timeout=HANG_GUARD_S)  # the connection up first

            async def one() -> str:
                try:
                    await stub.GetMetrics(request, timeout=HANG_GUARD_S)
                except grpc.aio.AioRpcError as e:
                    return e.code().name
                return "OK"

            codes = Counter(await asyncio.gather(*(one() for _ in range(CALLS))))
    assert codes == {"OK": CALLS}
