"""What the API reads from the running service, as a small interface: the API never imports the composition root
(``kvpilot.runtime.service`` implements ``Runtime``), so it can be tested against a hand-built one.

The loop publishes one immutable ``Snapshot`` per tick (``kvpilot.runtime.snapshot``, the one module of the runtime
the API imports); handlers read whichever is current, never a half-built one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from prometheus_client.registry import CollectorRegistry
from sqlalchemy.orm import Session, sessionmaker

from collector.samples import TargetInfo
from kvpilot.runtime.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class RuntimeHealth:
    first_tick_done: bool
    store_up: bool
    store_pending_writes: int
    store_dropped_writes: int
    store_last_error: str | None
    last_tick_at: float | None
    leader: bool
    keda_serving: bool | None = None  # keda.serve_from process: its server answers now; None: served in-process
    store_sqlite: bool = False  # the store is SQLite: a file of this host, which no other pod shares
    # Why this replica's store is not the one the Lease holder keeps (it campaigns, holds nothing, and its store is
    # its own SQLite), or None: /v1/findings and /v1/drains answer 503 with it rather than from an empty store.
    store_not_holders: str | None = None


class TargetRegistry(Protocol):
    """Static targets an operator adds and removes through the API (beside whatever discovery finds)."""

    def static_targets(self) -> list[TargetInfo]: ...

    def add(self, target: TargetInfo, *, by: str) -> bool:
        """Add ``target`` (``by``: who, for the audit); False when its URL is already present."""
        ...

    def remove(self, url: str, *, by: str) -> bool:
        """Remove the target with ``url`` (``by``: who, for the audit); False when there is none; ValueError when
        it cannot be removed here (it comes from the configuration file)."""
        ...

    def gone(self, target: TargetInfo) -> bool:
        """Whether ``target``, as the current snapshot lists it, was removed since (not to be listed)."""
        ...

    def refresh(self) -> None:
        """Take up the targets other instances on the same store added or removed (the service calls it each tick)."""
        ...


class Runtime(Protocol):
    settings_max_body_bytes: int
    drain_dry_run: bool
    drain_max_concurrent: int
    drain_budget: int | None  # drains.budget (None: no budget)
    drain_budget_window_s: float

    def snapshot(self) -> Snapshot | None: ...

    def health(self) -> RuntimeHealth: ...

    def now(self) -> float: ...

    @property
    def sessions(self) -> sessionmaker[Session]: ...

    @property
    def targets(self) -> TargetRegistry: ...

    @property
    def registry(self) -> CollectorRegistry: ...

    async def exposition(self) -> bytes:
        """The /metrics page, rendered off the event loop (``api.exposition.OwnMetrics.page``)."""
        ...
