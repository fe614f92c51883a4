"""SQLAlchemy 2.x tables of kvpilot's store. Kept apart from the API's Pydantic schemas and from the domain types;
the repository functions in ``store.repo`` convert between them. The schema changes only through Alembic
(``migrations/``): never call ``create_all`` outside a throwaway test.

Timestamps are epoch seconds (floats), as everywhere in kvpilot, so virtual and wall clocks store alike.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Index, Integer, MetaData, String, Text, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Named constraints so that Alembic migrations are stable across SQLite and PostgreSQL.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON}


class DeploymentRow(Base):
    """A deployment kvpilot has seen; the anchor operators browse from."""

    __tablename__ = "deployments"
    key: Mapped[str] = mapped_column(String(253), primary_key=True)  # "namespace/name"
    namespace: Mapped[str] = mapped_column(String(63))
    name: Mapped[str] = mapped_column(String(189))
    engine: Mapped[str | None] = mapped_column(String(32))
    model: Mapped[str | None] = mapped_column(String(255))
    first_seen: Mapped[float] = mapped_column(Float)
    last_seen: Mapped[float] = mapped_column(Float)


class DecisionRow(Base):
    __tablename__ = "decisions"
    __table_args__ = (Index("ix_decisions_deployment_timestamp", "deployment", "timestamp"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    deployment: Mapped[str] = mapped_column(String(253))
    timestamp: Mapped[float] = mapped_column(Float, index=True)
    current_replicas: Mapped[int] = mapped_column(Integer)
    ready_replicas: Mapped[int] = mapped_column(Integer)
    desired_replicas: Mapped[int] = mapped_column(Integer)
    warm_pool: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)
    predictive_replicas: Mapped[int | None] = mapped_column(Integer)
    reactive_replicas: Mapped[int | None] = mapped_column(Integer)
    forecast: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class FindingRow(Base):
    """One finding episode per stable ``Finding.id``: open → acknowledged → closed, reopened when it recurs."""

    __tablename__ = "findings"
    __table_args__ = (Index("ix_findings_state_kind", "state", "kind"),)
    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    kind: Mapped[str] = mapped_column(String(64))
    severity: Mapped[str] = mapped_column(String(16))
    deployment: Mapped[str] = mapped_column(String(253), default="")
    replica: Mapped[str] = mapped_column(String(253), default="")
    node: Mapped[str] = mapped_column(String(253), default="")
    gpu: Mapped[str] = mapped_column(String(64), default="")
    since: Mapped[float] = mapped_column(Float)
    summary: Mapped[str] = mapped_column(Text)
    evidence: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    action: Mapped[str] = mapped_column(String(32), default="none")
    state: Mapped[str] = mapped_column(String(16))  # open | acknowledged | closed
    last_seen: Mapped[float] = mapped_column(Float)
    closed_at: Mapped[float | None] = mapped_column(Float)
    acknowledged_at: Mapped[float | None] = mapped_column(Float)
    acknowledged_by: Mapped[str | None] = mapped_column(String(128))
    acknowledge_note: Mapped[str | None] = mapped_column(Text)


# The states of a live drain action (store.drain_states.ACTIVE), spelled out for the partial unique index below.
LIVE_DRAIN_STATES_SQL = "state IN ('requested', 'approved', 'executing')"


class DrainActionRow(Base):
    """A drain of one node, from request to outcome; every transition is audited in ``drain_events``."""

    __tablename__ = "drain_actions"
    __table_args__ = (
        # One live action per node, whoever asks and however many ask at once.
        Index(
            "uq_drain_actions_live_node",
            "node",
            unique=True,
            sqlite_where=text(LIVE_DRAIN_STATES_SQL),
            postgresql_where=text(LIVE_DRAIN_STATES_SQL),
        ),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node: Mapped[str] = mapped_column(String(253), index=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    dry_run: Mapped[bool] = mapped_column(Boolean)
    requested_by: Mapped[str] = mapped_column(String(128))
    requested_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(Text, default="")
    finding_id: Mapped[str | None] = mapped_column(String(16))
    evidence: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class DrainRailRow(Base):
    """One row that every drain transition updates first: holding its row lock (PostgreSQL) or the write lock
    (SQLite) while counting is what makes "at most K drains at once" a claim, not a count-then-write race."""

    __tablename__ = "drain_rail"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    claims: Mapped[int] = mapped_column(Integer, default=0)


class DrainEventRow(Base):
    __tablename__ = "drain_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    action_id: Mapped[int] = mapped_column(ForeignKey("drain_actions.id", ondelete="CASCADE"), index=True)
    at: Mapped[float] = mapped_column(Float)
    from_state: Mapped[str | None] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    actor: Mapped[str] = mapped_column(String(128))
    message: Mapped[str] = mapped_column(Text, default="")


class CapacityProfileRow(Base):
    """What one replica of a deployment sustains within the SLO, learned or configured."""

    __tablename__ = "capacity_profiles"
    deployment: Mapped[str] = mapped_column(String(253), primary_key=True)
    requests_per_s: Mapped[float | None] = mapped_column(Float)
    tokens_per_s: Mapped[float | None] = mapped_column(Float)
    source: Mapped[str] = mapped_column(String(16))  # observed | configured
    observations: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[float] = mapped_column(Float)


class RollupRow(Base):
    """Per-minute means of one deployment's signals: the forecaster's training data and warm start."""

    __tablename__ = "rollups"
    deployment: Mapped[str] = mapped_column(String(253), primary_key=True)
    minute: Mapped[int] = mapped_column(Integer, primary_key=True)  # epoch seconds // 60
    samples: Mapped[int] = mapped_column(Integer)
    arrival_rate: Mapped[float | None] = mapped_column(Float)
    requests_waiting: Mapped[float | None] = mapped_column(Float)
    requests_running: Mapped[float | None] = mapped_column(Float)
    kv_usage_mean: Mapped[float | None] = mapped_column(Float)
    kv_usage_max: Mapped[float | None] = mapped_column(Float)
    prompt_tokens_rate: Mapped[float | None] = mapped_column(Float)
    generation_tokens_rate: Mapped[float | None] = mapped_column(Float)
    prefix_hit_ratio: Mapped[float | None] = mapped_column(Float)
    preemptions_rate: Mapped[float | None] = mapped_column(Float)
    ready_replicas: Mapped[float | None] = mapped_column(Float)
    # What the planner read as arrivals (requests/s): a gateway's rate where it had one (collector.arrivals, or the
    # scale source's router), else the engines' estimate (arrival_rate); the warm start feeds the forecasters this
    # series, the one they then read. gateway_arrival_share: the share of the minute's samples whose rate was a
    # gateway's (0 engines throughout, 1 a gateway throughout). Both NULL in rows written before revision 0005.
    planner_arrival_rate: Mapped[float | None] = mapped_column(Float)
    gateway_arrival_share: Mapped[float | None] = mapped_column(Float)


ROLLUP_SIGNALS: tuple[str, ...] = (
    "arrival_rate",
    "requests_waiting",
    "requests_running",
    "kv_usage_mean",
    "kv_usage_max",
    "prompt_tokens_rate",
    "generation_tokens_rate",
    "prefix_hit_ratio",
    "preemptions_rate",
    "ready_replicas",
    "planner_arrival_rate",
    "gateway_arrival_share",
)


class StaticTargetRow(Base):
    """A scrape target an operator added through the API: kept across restarts, beside discovery's own."""

    __tablename__ = "static_targets"
    url: Mapped[str] = mapped_column(String(2048), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    engine: Mapped[str | None] = mapped_column(String(32))
    namespace: Mapped[str] = mapped_column(String(63))
    deployment: Mapped[str] = mapped_column(String(253), default="")
    pod: Mapped[str] = mapped_column(String(253), default="")
    node: Mapped[str] = mapped_column(String(253), default="")
    added_by: Mapped[str] = mapped_column(String(128))
    added_at: Mapped[float] = mapped_column(Float)


class AuditEventRow(Base):
    """Who changed what, when, through the API (targets added or removed); drains keep theirs in drain_events."""

    __tablename__ = "audit_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float, index=True)
    actor: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(64))
    subject: Mapped[str] = mapped_column(String(2048))
    message: Mapped[str] = mapped_column(Text, default="")


class InstanceNodesRow(Base):
    """With sharding: the nodes one kvpilot instance's snapshot holds (its replicas' nodes and their GPUs'), so that
    the drain circuit breaker's share is of the fleet's nodes (``kvpilot.actuation.FleetShare``). Refreshed by its
    instance while it holds shards; a row not refreshed for ``stale_after_s`` is ignored by the breaker, and deleted
    by a reader that watched it unchanged that long on its own monotonic clock (``kvpilot.actuation.heartbeats``)."""

    __tablename__ = "instance_nodes"
    instance: Mapped[str] = mapped_column(String(253), primary_key=True)  # the instance's identity (its pod name)
    nodes: Mapped[list[str]] = mapped_column(JSON, default=list)
    refreshed_at: Mapped[float] = mapped_column(Float)
