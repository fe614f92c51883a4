"""Where published scaling decisions live between the control loop and the things that serve them.

The control loop (one thread or event loop) publishes the latest `Decision` per deployment; the KEDA gRPC
servicer and the HTTP metrics-api endpoint both read it through one `scaler.keda.reader.DecisionReader`.
`StreamIsActive` must push as soon as a decision changes, so readers can await a change without polling.
Publishing is thread-safe and may happen from any thread; waiters are woken on their own event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from scaler.decision import Decision


@dataclass(frozen=True, slots=True)
class Published:
    """A decision and its version: strictly increasing across all publishes (0 means "no decision")."""

    decision: Decision
    version: int
    # When the decision was last known to be still the one in force, where that is later than its own time: a stored
    # decision answered after a takeover, which its writer would have stored again had it changed by then
    # (``kvpilot.runtime.taken_answers``). None: its own time.
    current_at: float | None = None

    @property
    def as_of(self) -> float:
        """The time KEDA's staleness limit measures this decision's age from."""
        at = self.decision.timestamp
        return at if self.current_at is None else max(at, self.current_at)


def scale_target(decision: Decision, *, include_warm_pool: bool = True) -> int:
    """The replica count to run now: desired, which already holds the warm pool loading for the demand at the
    horizon; without the warm pool, only what today's arrivals and queue need (no pre-warming).

    Negative counts from a confused policy are read as 0.
    """
    desired = max(decision.desired_replicas, 0)
    if include_warm_pool:
        return desired
    return max(desired - max(decision.warm_pool, 0), 0)


class DecisionSource(Protocol):
    """What the KEDA gRPC servicer reads from."""

    def latest(self, deployment: str) -> Published | None:
        """The newest decision for `deployment` ("namespace/name"), or None if none was published."""
        ...

    def deployments(self) -> list[str]:
        """Every deployment with a published decision, sorted (for error messages and listings)."""
        ...

    async def wait_for_change(self, deployment: str, seen_version: int, timeout_s: float) -> Published | None:
        """Returns as soon as `deployment` has a version other than `seen_version`, or after `timeout_s`.

        Version 0 stands for "no decision". Returns the newest decision either way (None if there is none).
        """
        ...


# What a mirrored board hands its sink, in order: ("reset", [Published, ...]) first, then ("publish", Published) and
# ("forget", deployment) as they happen (``scaler.keda.process`` sends them to the KEDA server's own process).
MirrorOp: TypeAlias = tuple[str, object]
MirrorSink: TypeAlias = Callable[[MirrorOp], None]


class DecisionBoard:
    """In-memory `DecisionSource`: latest decision per deployment, with change notification.

    Waiters register an `asyncio.Event` together with their loop; `publish` sets it through
    `loop.call_soon_threadsafe`, so a publisher on another thread (the control loop, a test) never touches
    another loop's objects directly.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sequence = 0
        self._latest: dict[str, Published] = {}
        self._waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self._mirror: MirrorSink | None = None

    def publish(self, decision: Decision) -> Published:
        """Stores `decision` as the newest for its deployment and wakes everyone waiting on it."""
        _check_key(decision.deployment)
        with self._lock:
            self._sequence += 1
            published = Published(decision, self._sequence)
            self._latest[decision.deployment] = published
            waiters = list(self._waiters.get(decision.deployment, ()))
            if self._mirror is not None:
                self._mirror(("publish", published))
        _wake(waiters)
        return published

    def forget(self, deployment: str) -> None:
        """Drops a deployment that kvpilot no longer manages; its readers (and open streams) get NOT_FOUND."""
        with self._lock:
            self._latest.pop(deployment, None)
            waiters = list(self._waiters.get(deployment, ()))
            if self._mirror is not None:
                self._mirror(("forget", deployment))
        _wake(waiters)

    def mirror_to(self, sink: MirrorSink | None) -> None:
        """From now on `sink` gets every change, in order, starting with a reset to what the board holds (None:
        stop mirroring). It is called under the board's lock, so it must only hand the change on (a queue put)."""
        with self._lock:
            self._mirror = sink
            if sink is not None:
                sink(("reset", list(self._latest.values())))

    def apply(self, op: MirrorOp) -> None:
        """A mirror's side: applies one change another board's `mirror_to` handed on, keeping its versions (so a
        version seen here is the one the original board gave)."""
        kind, payload = op
        with self._lock:
            if kind == "publish":
                assert isinstance(payload, Published)
                changed = [payload.decision.deployment]
                self._latest[payload.decision.deployment] = payload
                self._sequence = max(self._sequence, payload.version)
            elif kind == "forget":
                assert isinstance(payload, str)
                changed = [payload]
                self._latest.pop(payload, None)
            elif kind == "reset":
                assert isinstance(payload, list)
                latest = {p.decision.deployment: p for p in _published(payload)}
                changed = [d for d in self._latest.keys() | latest.keys() if self._latest.get(d) != latest.get(d)]
                self._latest = latest
                self._sequence = max([self._sequence, *(p.version for p in latest.values())])
            else:
                raise ValueError(f"unknown decision board change {kind!r}")
            waiters = [w for d in changed for w in self._waiters.get(d, ())]
        _wake(waiters)

    def latest(self, deployment: str) -> Published | None:
        with self._lock:
            return self._latest.get(deployment)

    def deployments(self) -> list[str]:
        with self._lock:
            return sorted(self._latest)

    async def wait_for_change(self, deployment: str, seen_version: int, timeout_s: float) -> Published | None:
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        waiter = (loop, event)
        with self._lock:
            current = self._latest.get(deployment)
            if (current.version if current is not None else 0) != seen_version:
                return current
            self._waiters.setdefault(deployment, set()).add(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout=max(timeout_s, 0.0))
        finally:
            with self._lock:
                waiters = self._waiters.get(deployment)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._waiters[deployment]
        return self.latest(deployment)


def _published(items: Iterable[object]) -> Iterable[Published]:
    for item in items:
        assert isinstance(item, Published)
        yield item


def _wake(waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]) -> None:
    for loop, event in waiters:
        if not loop.is_closed():
            loop.call_soon_threadsafe(event.set)


def _check_key(deployment: str) -> None:
    namespace, sep, name = deployment.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise ValueError(f"decision deployment {deployment!r} is not of the form namespace/name")
