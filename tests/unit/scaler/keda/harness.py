"""Test harness, no tests: a real grpc.aio KEDA external scaler on loopback and a client that calls it as KEDA does."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

import grpc

from collector.clock import VirtualClock
from scaler.decision import Decision
from scaler.keda import externalscaler_pb2 as pb
from scaler.keda import externalscaler_pb2_grpc as pb_grpc
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
    stale_after_s: float = DEFAULT_STALE_AFTER_S,
) -> AsyncIterator[Scaler]:
    board = DecisionBoard()
    clock = VirtualClock(NOW)
    reader = DecisionReader(board, clock, stale_after_s)
    servicer = ExternalScalerServicer(reader, settings)
    server, port = build_server("127.0.0.1:0", [register_external_scaler(servicer)], tls=tls)
    await server.start()
    target = f"localhost:{port}"
    channel = (
        grpc.aio.insecure_channel(target)
        if channel_credentials is None
        else grpc.aio.secure_channel(target, channel_credentials)
    )
    try:
        yield Scaler(board, clock, reader, pb_grpc.ExternalScalerStub(channel), channel, port)
    finally:
        await channel.close()
        await server.stop(None)


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
