"""The KEDA `ExternalScaler` gRPC servicer: serves the latest published `Decision` to KEDA.

KEDA (pkg/scalers/external_scaler.go) asks `GetMetricSpec` once when it builds the HPA, then every
`pollingInterval` calls `GetMetrics` followed by `IsActive`; an `external-push` trigger additionally keeps
`StreamIsActive` open and acts at once on each message (activation 0 <-> 1 without waiting for the next poll).

Failures are status codes KEDA logs as they are: malformed metadata -> INVALID_ARGUMENT, a missing or wrong
bearer token (when tokens are configured) -> UNAUTHENTICATED, a deployment kvpilot has no decision for (never
decided, or deleted and forgotten) -> NOT_FOUND, a decision older than the reader's `stale_after_s` -> UNAVAILABLE
(so KEDA's `fallback` replicas apply instead of a frozen number), `StreamMetricSpec` -> UNIMPLEMENTED (KEDA then
keeps polling `GetMetricSpec`; the spec never changes while the metadata does not).

Staleness is the control loop's liveness: a deployment at zero replicas, or loading its first replicas after
scale-from-zero, still gets a fresh decision every tick, so its answer stays valid throughout.

On shutdown (`close`), open `StreamIsActive` streams end with OK: KEDA's client sees io.EOF, which resets its
reconnect backoff to 2 s (runStreamIsActive in kedacore/keda pkg/scalers/external_scaler.go, commit
067b4c6040e07ce1eca24c381cf1980741e90ea2); any other end doubles it, up to a minute.
"""

# ruff: noqa: N802 (the rpc method names are fixed by externalscaler.proto)
from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc

from scaler.keda import externalscaler_pb2 as pb
from scaler.keda import externalscaler_pb2_grpc as pb_grpc
from scaler.keda.forward import DECISION_AT, ForwardFailed, Forwarding, RouteView, incoming, was_forwarded
from scaler.keda.reader import DecisionReader, NoDecision, StaleDecision
from scaler.keda.target import BEARER_TOKEN_KEY, MetadataError, ScalerTarget, int_field, parse_target
from scaler.publish import DecisionSource, Published

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServicerSettings:
    heartbeat_s: float = 15.0  # StreamIsActive re-sends the current state this often, even without a change
    tokens: frozenset[str] = frozenset()  # non-empty: every call must carry one of these bearer tokens

    def __post_init__(self) -> None:
        if not self.heartbeat_s > 0:
            raise ValueError(f"error parsing KEDA servicer settings: heartbeat_s must be > 0, got {self.heartbeat_s}")


# gRPC refuses metadata over 16 KiB, a status message included: a refusal that echoed a 100 KB name reached KEDA as
# RESOURCE_EXHAUSTED "Stream removed" instead of saying what is wrong. Messages are clipped well below that.
MAX_MESSAGE_CHARS = 1024


def status_message(message: str) -> str:
    """``message`` as a status carries it: control and bidi characters escaped (KEDA logs it), the middle of a long
    one left out so that both what was refused and why are kept."""
    shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in message)
    if len(shown) <= MAX_MESSAGE_CHARS:
        return shown
    half = MAX_MESSAGE_CHARS // 2
    return f"{shown[:half]}...({len(shown) - 2 * half} characters left out)...{shown[-half:]}"


class _Refused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = status_message(message)


class ExternalScalerServicer(pb_grpc.ExternalScalerServicer):
    """Answers KEDA through a `DecisionReader`; holds no state of its own beyond settings."""

    def __init__(
        self,
        reader: DecisionReader,
        settings: ServicerSettings | None = None,
        *,
        forwarding: Forwarding | None = None,
    ):
        # `kvpilot run` hands the metrics-api route this same reader: one board, clock and staleness limit for both
        self.reader = reader
        self._source: DecisionSource = reader.source
        self._settings = settings or ServicerSettings()
        self._closing = asyncio.Event()
        self.forwarding = forwarding  # sharding: calls for another instance's deployments go to it

    def close(self) -> None:
        """Shutting down: open streams end cleanly (status OK) at once; new streams end after their first answer."""
        self._closing.set()

    async def IsActive(self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext) -> pb.IsActiveResponse:
        try:
            self._authorize(request, context)
            remote = await self._from_owner("IsActive", request, request, context)
            if remote is not None:
                return remote  # type: ignore[no-any-return]
            resolved = self._resolve_or_kept("IsActive", request, request, context)
        except _Refused as refused:
            await context.abort(refused.code, refused.message)
        if not isinstance(resolved[1], Published):
            return resolved[0]  # type: ignore[no-any-return]
        target, published = resolved
        response = pb.IsActiveResponse(result=target.is_active(published.decision))
        self._stamp(context, "IsActive", request, response, published)
        return response

    async def StreamIsActive(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.IsActiveResponse]:
        loop = asyncio.get_running_loop()
        last_sent: bool | None = None
        next_heartbeat = loop.time()
        try:
            self._authorize(request, context)
            route = self._remote_route(request, context)
        except _Refused as refused:
            await context.abort(refused.code, refused.message)
        if route is not None and self.forwarding is not None:
            try:
                async for message in self.forwarding.stream(route, request, incoming(context)):
                    yield message
            except ForwardFailed as failed:
                await context.abort(failed.code, status_message(failed.message))
            return
        while True:
            try:
                target, published = self._resolve(request)
            except _Refused as refused:
                if last_sent is not None and self._remote_route(request, context) is not None:
                    return  # its shard moved: status OK, KEDA reconnects and is forwarded to the new owner
                await context.abort(refused.code, refused.message)
            active = target.is_active(published.decision)
            if active != last_sent or loop.time() >= next_heartbeat:
                yield pb.IsActiveResponse(result=active)
                last_sent = active
                next_heartbeat = loop.time() + self._settings.heartbeat_s
            if self._closing.is_set() or await self._closed_while_waiting(
                target.deployment, published.version, next_heartbeat - loop.time()
            ):
                return  # status OK: KEDA reconnects to the next kvpilot with its backoff reset

    async def _closed_while_waiting(self, deployment: str, version: int, timeout_s: float) -> bool:
        """Waits for a new decision, the heartbeat or shutdown; True on shutdown."""
        change = asyncio.ensure_future(self._source.wait_for_change(deployment, version, timeout_s))
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            await asyncio.wait({change, closing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (change, closing):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        return self._closing.is_set()

    async def GetMetricSpec(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> pb.GetMetricSpecResponse:
        try:
            self._authorize(request, context)
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
            self._authorize(request.scaledObjectRef, context)
            remote = await self._from_owner("GetMetrics", request.scaledObjectRef, request, context)
            if remote is not None:
                return remote  # type: ignore[no-any-return]
            resolved = self._resolve_or_kept("GetMetrics", request.scaledObjectRef, request, context)
            if not isinstance(resolved[1], Published):
                return resolved[0]  # type: ignore[no-any-return]
            target, published = resolved
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
        response = pb.GetMetricsResponse(metricValues=[metric])
        self._stamp(context, "GetMetrics", request, response, published)
        return response

    async def StreamMetricSpec(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GetMetricSpecResponse]:
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            "kvpilot's metric spec only changes with the trigger metadata; KEDA polls GetMetricSpec instead",
        )
        yield pb.GetMetricSpecResponse()  # pragma: no cover - makes this an async generator, abort raises first

    def _authorize(self, ref: pb.ScaledObjectRef, context: grpc.aio.ServicerContext) -> None:
        tokens = self._settings.tokens
        if not tokens:
            return
        # White space at either end is no part of a token, on either side: a Secret written with echo keeps its
        # newline, which KEDA forwards in bearerTokenFromEnv as it read it from the scale target's environment, while
        # keda.bearer_tokens from the same Secret is stripped (comma-separated) - every call was refused
        offered = [ref.scalerMetadata[BEARER_TOKEN_KEY]] if BEARER_TOKEN_KEY in ref.scalerMetadata else []
        for key, value in context.invocation_metadata() or ():
            if key == "authorization" and isinstance(value, str) and value[:7].lower() == "bearer ":
                offered.append(value[7:])
        # compare against every configured token, so the time taken does not tell which one nearly matched
        matched = False
        for candidate in offered:
            for token in tokens:
                matched |= hmac.compare_digest(candidate.strip().encode(), token.strip().encode())
        if not matched:
            raise _Refused(
                grpc.StatusCode.UNAUTHENTICATED,
                f"scaledObject {ref.namespace}/{ref.name}: "
                + ("the bearer token is not one kvpilot accepts" if offered else "no bearer token")
                + f" (trigger metadata `{BEARER_TOKEN_KEY}` or an `authorization: Bearer` header; keda.bearer_tokens)",
            )

    # -- sharding: another instance's deployments ------------------------------------------------------------------

    def _remote_route(self, ref: pb.ScaledObjectRef, context: grpc.aio.ServicerContext) -> RouteView | None:
        """The owner's route when another instance owns the deployment; None: answer here (no sharding, ours,
        or a call already forwarded once)."""
        fw = self.forwarding
        if fw is None or was_forwarded(context):
            return None
        route = fw.router.route(_target(ref).deployment)
        return None if route.local else route

    async def _from_owner(
        self, method: str, ref: pb.ScaledObjectRef, request: Any, context: grpc.aio.ServicerContext
    ) -> Any | None:
        route = self._remote_route(ref, context)
        if route is None or self.forwarding is None:
            return None
        try:
            response, at = await self.forwarding.unary(
                method, _target(ref).deployment, route, request, incoming(context)
            )
        except ForwardFailed as failed:
            raise _Refused(failed.code, failed.message) from None
        if at is not None:
            context.set_trailing_metadata(((DECISION_AT, repr(at)),))
        return response

    def _resolve_or_kept(
        self, method: str, ref: pb.ScaledObjectRef, request: Any, context: grpc.aio.ServicerContext
    ) -> tuple[ScalerTarget, Published] | tuple[Any, float]:
        """This instance's decision; when it has none yet (a shard just taken over, before its first tick), the
        last answer relayed from the previous owner while its decision is within the staleness limit."""
        try:
            return self._resolve(ref)
        except _Refused as refused:
            kept = self.forwarding.kept(method, request) if self.forwarding is not None else None
            if refused.code != grpc.StatusCode.NOT_FOUND or kept is None:
                raise
            context.set_trailing_metadata(((DECISION_AT, repr(kept[1])),))
            return kept

    def _stamp(
        self, context: grpc.aio.ServicerContext, method: str, request: Any, response: Any, published: Published
    ) -> None:
        """The decision's time in trailing metadata, for an instance that forwarded this call (and kept here)."""
        if self.forwarding is None:
            return
        at = published.as_of  # a forwarder judges what it keeps by the age this instance judged
        context.set_trailing_metadata(((DECISION_AT, repr(at)),))
        self.forwarding.keep(method, request, response, at)

    def _resolve(self, ref: pb.ScaledObjectRef) -> tuple[ScalerTarget, Published]:
        target = _target(ref)
        try:
            published, _age = self.reader.read(target.deployment)
        except NoDecision as missing:
            raise _Refused(grpc.StatusCode.NOT_FOUND, f"{missing} (scaledObject {ref.namespace}/{ref.name})") from None
        except StaleDecision as stale:
            raise _Refused(grpc.StatusCode.UNAVAILABLE, str(stale)) from None
        return target, published


def _target(ref: pb.ScaledObjectRef) -> ScalerTarget:
    try:
        return parse_target(ref.name, ref.namespace, ref.scalerMetadata)
    except MetadataError as error:
        raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, str(error)) from None
