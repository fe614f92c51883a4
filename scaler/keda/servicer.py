"""The KEDA `ExternalScaler` gRPC servicer: serves the latest published `Decision` to KEDA.

KEDA (pkg/scalers/external_scaler.go) asks `GetMetricSpec` once when it builds the HPA, then every
`pollingInterval` calls `GetMetrics` followed by `IsActive`; an `external-push` trigger additionally keeps
`StreamIsActive` open and acts at once on each message (activation 0 <-> 1 without waiting for the next poll).

Failures are status codes KEDA logs as they are: malformed metadata -> INVALID_ARGUMENT, a deployment kvpilot
has no decision for -> NOT_FOUND, a decision older than `stale_after_s` -> UNAVAILABLE (so KEDA's `fallback`
replicas apply instead of a frozen number), `StreamMetricSpec` -> UNIMPLEMENTED (KEDA then keeps polling
`GetMetricSpec`; the spec never changes while the metadata does not).
"""

# ruff: noqa: N802 (the rpc method names are fixed by externalscaler.proto)
from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc

from collector.clock import Clock, WallClock
from scaler.keda import externalscaler_pb2 as pb
from scaler.keda import externalscaler_pb2_grpc as pb_grpc
from scaler.keda.target import MetadataError, ScalerTarget, int_field, parse_target
from scaler.publish import DecisionSource, Published

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServicerSettings:
    heartbeat_s: float = 15.0  # StreamIsActive re-sends the current state this often, even without a change
    stale_after_s: float = 120.0  # a decision older than this is refused (UNAVAILABLE); 0 disables the check

    def __post_init__(self) -> None:
        if not self.heartbeat_s > 0:
            raise ValueError(f"error parsing KEDA servicer settings: heartbeat_s must be > 0, got {self.heartbeat_s}")
        if not self.stale_after_s >= 0:
            raise ValueError(
                f"error parsing KEDA servicer settings: stale_after_s must be >= 0, got {self.stale_after_s}"
            )


class _Refused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ExternalScalerServicer(pb_grpc.ExternalScalerServicer):
    """Answers KEDA from a `DecisionSource`; holds no state of its own beyond settings."""

    def __init__(self, source: DecisionSource, settings: ServicerSettings | None = None, clock: Clock | None = None):
        self._source = source
        self._settings = settings or ServicerSettings()
        self._clock = clock or WallClock()

    async def IsActive(self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext) -> pb.IsActiveResponse:
        try:
            target, published = self._resolve(request)
        except _Refused as refused:
            await context.abort(refused.code, refused.message)
        return pb.IsActiveResponse(result=target.is_active(published.decision))

    async def StreamIsActive(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.IsActiveResponse]:
        loop = asyncio.get_running_loop()
        last_sent: bool | None = None
        next_heartbeat = loop.time()
        while True:
            try:
                target, published = self._resolve(request)
            except _Refused as refused:
                await context.abort(refused.code, refused.message)
            active = target.is_active(published.decision)
            if active != last_sent or loop.time() >= next_heartbeat:
                yield pb.IsActiveResponse(result=active)
                last_sent = active
                next_heartbeat = loop.time() + self._settings.heartbeat_s
            await self._source.wait_for_change(target.deployment, published.version, next_heartbeat - loop.time())

    async def GetMetricSpec(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> pb.GetMetricSpecResponse:
        try:
            target = _target(request)
        except _Refused as refused:
            await context.abort(refused.code, refused.message)
        spec = pb.MetricSpec(
            metricName=target.metric_name,
            targetSize=max(1, round(target.target_size)),
            targetSizeFloat=target.target_size,
        )
        return pb.GetMetricSpecResponse(metricSpecs=[spec])

    async def GetMetrics(
        self, request: pb.GetMetricsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetMetricsResponse:
        try:
            target, published = self._resolve(request.scaledObjectRef)
            if request.metricName and request.metricName != target.metric_name:
                raise _Refused(
                    grpc.StatusCode.NOT_FOUND,
                    f"metric {request.metricName!r} is not served for {target.deployment}; "
                    f"GetMetricSpec announced {target.metric_name!r}",
                )
        except _Refused as refused:
            await context.abort(refused.code, refused.message)
        value = target.metric_value(published.decision)
        metric = pb.MetricValue(metricName=target.metric_name, metricValue=int_field(value), metricValueFloat=value)
        return pb.GetMetricsResponse(metricValues=[metric])

    async def StreamMetricSpec(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GetMetricSpecResponse]:
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            "kvpilot's metric spec only changes with the trigger metadata; KEDA polls GetMetricSpec instead",
        )
        yield pb.GetMetricSpecResponse()  # pragma: no cover - makes this an async generator, abort raises first

    def _resolve(self, ref: pb.ScaledObjectRef) -> tuple[ScalerTarget, Published]:
        target = _target(ref)
        published = self._source.latest(target.deployment)
        if published is None:
            known = self._source.deployments()
            listing = ", ".join(known[:10]) + (" …" if len(known) > 10 else "") if known else "none yet"
            raise _Refused(
                grpc.StatusCode.NOT_FOUND,
                f"kvpilot has no decision for deployment {target.deployment} "
                f"(scaledObject {ref.namespace}/{ref.name}); deployments with decisions: {listing}",
            )
        limit = self._settings.stale_after_s
        age = self._clock.now() - published.decision.timestamp
        if limit and age > limit:
            raise _Refused(
                grpc.StatusCode.UNAVAILABLE,
                f"the decision for {target.deployment} is {age:.0f} s old (limit {limit:g} s): "
                "kvpilot's control loop is not keeping up; KEDA's fallback applies",
            )
        return target, published


def _target(ref: pb.ScaledObjectRef) -> ScalerTarget:
    try:
        return parse_target(ref.name, ref.namespace, ref.scalerMetadata)
    except MetadataError as error:
        raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, str(error)) from None
