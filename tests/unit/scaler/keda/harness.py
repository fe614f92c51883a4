"""Test harness, no tests: a real grpc.aio KEDA external scaler on loopback and a client that calls it as KEDA does;
served from the test's process, or (``serve_from="process"``) from KEDA's own process over a mirror of the board."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc

from collector.clock import VirtualClock
from scaler.decision import Decision
from scaler.keda import externalscaler_pb2 as pb
from scaler.keda import externalscaler_pb2_grpc as pb_grpc
from scaler.keda.process import ChildConfig, KedaProcess
from scaler.keda.reader import DEFAULT_STALE_AFTER_S, DecisionReader
from scaler.keda.server import TlsFiles, build_server, register_external_scaler
from scaler.keda.servicer import ExternalScalerServicer, ServicerSettings
from scaler.publish import DecisionBoard

NOW = 1_700_000_000.0


def decision(deployment: str = "llm/chat", desired: int = 3, warm: int = 0, timestamp: float = NOW) -> Decision:
    """``desired``: what today's load needs; the decision's desired count holds the warm pool on top."""
    return Decision(
        deployment=deployment,
        timestamp=timestamp,
        current_replicas=desired,
        ready_replicas=desired,
        desired_replicas=desired + max(warm, 0),
        warm_pool=warm,
        reason="predictive",
        message=f"{desired} replicas for the forecast load",
        forecast={"arrival_rate": 4.5},
    )


def ref(name: str = "chat", namespace: str = "llm", **metadata: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=metadata)


@dataclass
class Scaler:
    board: DecisionBoard
    clock: VirtualClock
    reader: DecisionReader  # what the servicer answers through (the metrics-api route can be handed it too)
    stub: pb_grpc.ExternalScalerStub
    channel: grpc.aio.Channel
    port: int


@asynccontextmanager
async def running_scaler(
    settings: ServicerSettings | None = None,
    tls: TlsFiles | None = None,
    channel_credentials: grpc.ChannelCredentials | None = None,
    *,
    stale_after_s: float | None = None,
    serve_from: str = "loop",
) -> AsyncIterator[Scaler]:
    """``serve_from="process"``: KEDA's own process (``scaler.keda.process``) serves over a mirror of ``board``, and
    every call waits until it has applied what was published before; staleness is off there (decisions carry the
    virtual ``NOW``, the process reads the wall clock: test_process.py tests it)."""
    board = DecisionBoard()
    clock = VirtualClock(NOW)
    reader = DecisionReader(board, clock, DEFAULT_STALE_AFTER_S if stale_after_s is None else stale_after_s)
    if serve_from == "process":
        if stale_after_s is not None:
            raise ValueError("staleness in KEDA's own process runs on the wall clock: test it in test_process.py")
        keda = KedaProcess(board, ChildConfig("127.0.0.1:0", settings or ServicerSettings(), 0.0, tls=tls, grace_s=1.0))
        port = await keda.start()
        stop: Callable[[], Any] = keda.stop
    else:
        servicer = ExternalScalerServicer(reader, settings)
        server, port = build_server("127.0.0.1:0", [register_external_scaler(servicer)], tls=tls)
        await server.start()
        stop = lambda: server.stop(None)  # noqa: E731
    target = f"localhost:{port}"
    channel = (
        grpc.aio.insecure_channel(target)
        if channel_credentials is None
        else grpc.aio.secure_channel(target, channel_credentials)
    )
    stub: Any = pb_grpc.ExternalScalerStub(channel)
    if serve_from == "process":
        stub = _Synced(stub, keda)
    try:
        yield Scaler(board, clock, reader, stub, channel, port)
    finally:
        await channel.close()
        await stop()


class _Synced:
    """The stub, each call made once KEDA's process has caught up with the board (the in-loop server sees a publish
    at once; the process a pipe later, as KEDA would on its next poll)."""

    def __init__(self, stub: Any, keda: KedaProcess) -> None:
        self._stub, self._keda = stub, keda

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._stub, name)
        if name.startswith("Stream"):
            return lambda *args, **kwargs: _SyncedStream(lambda: method(*args, **kwargs), self._keda)

        async def call(*args: Any, **kwargs: Any) -> Any:
            await self._keda.synced()
            return await method(*args, **kwargs)

        return call


class _SyncedStream:
    """A server stream opened at its first read, once the process has caught up."""

    def __init__(self, start: Callable[[], Any], keda: KedaProcess) -> None:
        self._start, self._keda, self._call = start, keda, None

    async def read(self) -> Any:
        if self._call is None:
            await self._keda.synced()
            self._call = self._start()
        return await self._call.read()

    def cancel(self) -> bool:
        return bool(self._call.cancel()) if self._call is not None else False


async def keda_poll(stub: pb_grpc.ExternalScalerStub, so: pb.ScaledObjectRef) -> tuple[int, bool, float, float]:
    """One KEDA polling cycle plus what the HPA does with it.

    Mirrors pkg/scalers/external_scaler.go: the spec's float target when > 0 else the int64 one; GetMetrics with
    the announced metric name, reading metricValueFloat when > 0 else metricValue; then IsActive. Both numbers
    become milli-quantities, truncated as Go's int64(x * 1000) does; the HPA (AverageValue target) then asks
    for ceil(value / target) in those milli-units. Returns (hpa replicas, active, value, target).
    """
    spec = (await stub.GetMetricSpec(so)).metricSpecs[0]
    target = spec.targetSizeFloat if spec.targetSizeFloat > 0 else float(spec.targetSize)
    metrics = await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so, metricName=spec.metricName))
    metric = metrics.metricValues[0]
    value = metric.metricValueFloat if metric.metricValueFloat > 0 else float(metric.metricValue)
    active = (await stub.IsActive(so)).result
    return hpa_replicas(value, target), active, value, target


def hpa_replicas(value: float, target: float) -> int:
    """ceil(value / target) as the HPA computes it on KEDA's truncated milli-quantities."""
    value_milli, target_milli = math.trunc(value * 1000), math.trunc(target * 1000)
    return -(-value_milli // target_milli)


def metadata_of(so: pb.ScaledObjectRef) -> Mapping[str, str]:
    return dict(so.scalerMetadata)
