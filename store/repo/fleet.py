"""With sharding, the fleet's nodes in one place: each instance's node set (``instance_nodes``), and the nodes every
shard's findings flag for a drain (``findings``, which every instance writes): the drain circuit breaker's share."""

from __future__ import annotations

from collections.abc import Collection

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
    """Instance -> its node set, of the instances that refreshed theirs within ``stale_after_s``; the rows of the
    others (an instance gone, or holding no shard any more) are deleted."""
    session.execute(delete(InstanceNodesRow).where(InstanceNodesRow.refreshed_at < now - stale_after_s))
    rows = session.execute(select(InstanceNodesRow.instance, InstanceNodesRow.nodes))
    return {i: {n for n in (nodes or ()) if isinstance(n, str) and n} for i, nodes in rows}


def live_instances(*, session: Session, now: float, stale_after_s: float) -> set[str]:
    """The instances that refreshed their node set within ``stale_after_s``: the live ones holding shards (read
    only, unlike ``live_instance_nodes``)."""
    stmt = select(InstanceNodesRow.instance).where(InstanceNodesRow.refreshed_at >= now - stale_after_s)
    return set(session.scalars(stmt))


def drain_flagged_nodes(*, session: Session) -> set[str]:
    """The nodes a live (open or acknowledged) finding of any instance asks to drain."""
    rows = session.scalars(
        select(FindingRow.node)
        .where(FindingRow.state.in_(LIVE), FindingRow.action == "drain_node", FindingRow.node != "")
        .distinct()
    )
    return set(rows)
