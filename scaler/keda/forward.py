"""KEDA calls for a deployment another kvpilot instance owns (sharding, ``kvpilot.runtime.shards``): forwarded to
the owner.

KEDA's ScaledObject names one ``scalerAddress`` (the kvpilot Service) and its gRPC client keeps one connection,
which kube-proxy pins to one pod; KEDA cannot follow a redirect, and an error only triggers its ``fallback``. So
the instance that receives the call forwards it to the owner's address (published in the shard's Lease) and
relays the answer: unary calls as they are, ``StreamIsActive`` message by message.

The owner's answer carries its decision's timestamp (trailing metadata ``kvpilot-decision-at``); the forwarding
instance keeps the last answer per request and serves it while the owner cannot be reached — between an instance's
death and the takeover of its shards, and on the new owner until its first tick decides — as long as that
decision is within the staleness limit, the same limit the owner would apply. A call that was forwarded once is
never forwarded again (``kvpilot-forwarded-by``), so two instances with different views cannot bounce it.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import grpc

from collector.clock import Clock
from scaler.keda.reader import CLOCK_STEP_S

log = logging.getLogger(__name__)

MAX_CHANNELS = 64
FORWARDED_BY = "kvpilot-forwarded-by"
DECISION_AT = "kvpilot-decision-at"
_HOP_HEADERS = frozenset({"user-agent", "grpc-accept-encoding", "grpc-encoding", "grpc-timeout", "te", "content-type"})


class RouteView(Protocol):
    """``kvpilot.runtime.shards.Route``: where a deployment's calls are answered."""

    @property
    def shard(self) -> int: ...
    @property
    def local(self) -> bool: ...
    @property
    def owner(self) -> str | None: ...
    @property
    def address(self) -> str | None: ...


class Router(Protocol):
    """``kvpilot.runtime.shards.ShardCoordinator``."""

    identity: str

    def route(self, deployment: str) -> RouteView: ...


class ForwardFailed(Exception):
    """The owner could not answer and no fresh answer is kept: the status and message to give KEDA."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Forwarding:
    """Channels to the other instances and the last answer relayed for each request."""

    router: Router
    clock: Clock
    stale_after_s: float
    timeout_s: float = 2.0
    _channels: dict[str, grpc.aio.Channel] = field(default_factory=dict)
    _kept: dict[tuple[str, bytes], tuple[Any, float]] = field(default_factory=dict)
    _closing: set[asyncio.Future[None]] = field(default_factory=set)
    forwarded_total: int = 0
    served_kept_total: int = 0

    def channel(self, address: str) -> grpc.aio.Channel:
        """One channel per owner address, the least recently used closed past ``MAX_CHANNELS`` (pods that died
        leave addresses nobody forwards to again)."""
        ch = self._channels.pop(address, None)
        if ch is None:
            ch = grpc.aio.insecure_channel(address)
            if len(self._channels) >= MAX_CHANNELS:
                oldest = next(iter(self._channels))
                closing = asyncio.ensure_future(self._channels.pop(oldest).close(grace=1.0))
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
        self._channels[address] = ch  # most recently used last
        return ch

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()
        await asyncio.gather(*self._closing, return_exceptions=True)

    def keep(self, method: str, request: Any, response: Any, decision_at: float | None) -> None:
        """Keep the answer, its decision's time no later than now on this instance's clock: an owner whose clock runs
        ahead (or steps forward) stamps its decisions in our future, and they were served as fresh, after its death,
        for as long as it was ahead (an hour ahead: an hour); NaN compares false, so it was served forever."""
        if decision_at is not None and math.isfinite(decision_at):
            at = min(decision_at, self.clock.now())
            self._kept[(method, request.SerializeToString(deterministic=True))] = (response, at)

    def kept(self, method: str, request: Any) -> tuple[Any, float] | None:
        """The last answer to this request and its decision's time, if that is within the staleness limit. An age
        below -CLOCK_STEP_S (this instance's clock stepped back since it kept it) is no age: not served either."""
        found = self._kept.get((method, request.SerializeToString(deterministic=True)))
        if found is None:
            return None
        response, decision_at = found
        age = self.clock.now() - decision_at
        if self.stale_after_s and not -CLOCK_STEP_S <= age <= self.stale_after_s:
            return None
        self.served_kept_total += 1
        return response, decision_at

    async def unary(
        self, method: str, deployment: str, route: RouteView, request: Any, metadata: Sequence[tuple[str, str]]
    ) -> tuple[Any, float | None]:
        """The owner's answer and its decision's time, else the kept ones; raises ForwardFailed saying who owns
        what and why."""
        if route.address is None:
            kept = self.kept(method, request)
            if kept is not None:
                return kept
            raise ForwardFailed(
                grpc.StatusCode.UNAVAILABLE,
                f"deployment {deployment} is in shard {route.shard}, which has no live holder now (its kvpilot "
                "stopped; another takes it over within one lease period): KEDA's fallback applies meanwhile",
            )
        call = self.channel(route.address).unary_unary(
            f"/externalscaler.ExternalScaler/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=type(_response_type(method)).FromString,
        )
        try:
            pending = call(request, metadata=self._outgoing(metadata), timeout=self.timeout_s)
            response = await pending
            trailing = await pending.trailing_metadata()
        except grpc.aio.AioRpcError as e:
            kept = self.kept(method, request)
            if kept is not None:
                return kept
            raise ForwardFailed(
                e.code(),
                f"deployment {deployment} is in shard {route.shard}, owned by kvpilot {route.owner} at "
                f"{route.address}: {e.details() or e.code().name}",
            ) from None
        self.forwarded_total += 1
        at = _decision_at(trailing)
        self.keep(method, request, response, at)
        return response, at

    async def stream(self, route: RouteView, request: Any, metadata: Sequence[tuple[str, str]]) -> AsyncIterator[Any]:
        """``StreamIsActive`` from the owner, message by message. Ends (status OK, so KEDA reconnects with its
        backoff reset and is routed anew) when the owner's stream ends or breaks after at least one message;
        raises ForwardFailed when the owner refuses the stream outright."""
        if route.address is None:
            raise ForwardFailed(
                grpc.StatusCode.UNAVAILABLE,
                f"shard {route.shard} has no live holder now; another kvpilot takes it over within one lease period",
            )
        call = self.channel(route.address).unary_stream(
            "/externalscaler.ExternalScaler/StreamIsActive",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=type(_response_type("IsActive")).FromString,
        )
        sent = 0
        try:
            async for message in call(request, metadata=self._outgoing(metadata)):
                sent += 1
                yield message
        except grpc.aio.AioRpcError as e:
            if sent == 0:
                raise ForwardFailed(
                    e.code(),
                    f"shard {route.shard} is owned by kvpilot {route.owner} at {route.address}: "
                    f"{e.details() or e.code().name}",
                ) from None

    def _outgoing(self, metadata: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
        kept = tuple((k, v) for k, v in metadata if k not in _HOP_HEADERS and not k.startswith(":"))
        return (*kept, (FORWARDED_BY, self.router.identity))


def was_forwarded(context: grpc.aio.ServicerContext) -> bool:
    return any(k == FORWARDED_BY for k, _ in context.invocation_metadata() or ())


def incoming(context: grpc.aio.ServicerContext) -> list[tuple[str, str]]:
    return [(k, v) for k, v in context.invocation_metadata() or () if isinstance(v, str)]


def _decision_at(trailing: Any) -> float | None:
    for key, value in trailing or ():
        if key == DECISION_AT:
            try:
                at = float(value)
            except (TypeError, ValueError):
                return None
            return at if math.isfinite(at) else None
    return None


def _response_type(method: str) -> Any:
    from scaler.keda import externalscaler_pb2 as pb

    return {"IsActive": pb.IsActiveResponse(), "GetMetrics": pb.GetMetricsResponse()}[method]
