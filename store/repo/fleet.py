"""With sharding, the fleet's nodes in one place: each instance's node set (``instance_nodes``), and the nodes every
shard's findings flag for a drain (``findings``, which every instance writes): the drain circuit breaker's share."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from store.fields import fit
from store.models import FindingRow, InstanceNodesRow
from store.repo.conflict import insert_or_skip
from store.repo.findings import LIVE


def refresh_instance_nodes(*, session: Session, instance: str, nodes: Collection[str], now: float) -> None:
    """Store ``instance``'s node set, refreshed at ``now``."""
    instance = fit(instance, 253)
    row = session.get(InstanceNodesRow, instance)
    if row is None:  # its first refresh, unless it raced itself (store.repo.conflict)
        first = insert_or_skip(session, InstanceNodesRow, [InstanceNodesRow.instance])
        session.execute(first.values(instance=instance, nodes=[], refreshed_at=now))
        row = session.scalars(select(InstanceNodesRow).where(InstanceNodesRow.instance == instance)).one()
    row.nodes = sorted(set(nodes))
    row.refreshed_at = now


def live_instance_nodes(*, session: Session, now: float, stale_after_s: float) -> dict[str, set[str]]:
    """Instance -> its node set, of the instances whose stored refresh is within ``stale_after_s`` of ``now`` (the
    breaker's count; read only: rows are deleted by ``forget_instances``, once a reader watched them unchanged)."""
    stmt = select(InstanceNodesRow.instance, InstanceNodesRow.nodes).where(
        InstanceNodesRow.refreshed_at >= now - stale_after_s
    )
    rows = session.execute(stmt)
    return {i: {n for n in (nodes or ()) if isinstance(n, str) and n} for i, nodes in rows}


def instance_node_sets(*, session: Session) -> dict[str, tuple[set[str], float]]:
    """Instance -> (its node set, its stored refresh), of every row: the reader judges which are live
    (``kvpilot.actuation.Actuation._fleet_nodes``)."""
    rows = session.execute(select(InstanceNodesRow.instance, InstanceNodesRow.nodes, InstanceNodesRow.refreshed_at))
    return {i: ({n for n in (nodes or ()) if isinstance(n, str) and n}, float(at)) for i, nodes, at in rows}


def instance_refreshes(*, session: Session, instances: Collection[str] | None = None) -> dict[str, float]:
    """Instance -> its stored refresh (``refreshed_at``, on its own host's wall clock), of ``instances`` (all if
    None): what a reader watches change (``kvpilot.actuation.heartbeats.Heartbeats``)."""
    stmt = select(InstanceNodesRow.instance, InstanceNodesRow.refreshed_at)
    if instances is not None:
        stmt = stmt.where(InstanceNodesRow.instance.in_([fit(i, 253) for i in instances]))
    return {i: float(at) for i, at in session.execute(stmt)}


def forget_instances(*, session: Session, refreshed: Mapping[str, float]) -> None:
    """Delete the rows of the instances gone: each only while it still holds the refresh the reader watched (a row
    refreshed meanwhile is kept)."""
    for instance, at in refreshed.items():
        session.execute(
            delete(InstanceNodesRow).where(InstanceNodesRow.instance == instance, InstanceNodesRow.refreshed_at == at)
        )


def drain_flagged_nodes(*, session: Session) -> set[str]:
    """The nodes a live (open or acknowledged) finding of any instance asks to drain."""
    rows = session.scalars(
        select(FindingRow.node)
        .where(FindingRow.state.in_(LIVE), FindingRow.action == "drain_node", FindingRow.node != "")
        .distinct()
    )
    return set(rows)
