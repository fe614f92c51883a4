"""Is a drain kvpilot requested still wanted? Asked of a request waiting for approval each actuator pass, and of an
approved drain by the worker just before it claims it (review G, session 18).

With ``drains.require_approval`` on (the default) a request can wait hours for an operator; when it is approved,
the GPU may be back, or the node may now hold a deployment's last ready replica. Only drains kvpilot requested for
a finding (``requested_by`` kvpilot, a ``finding_id``) are asked: an operator's drain keeps the operator's word.

- *Withdrawn* (cancelled by kvpilot, the reason in its audit) when its finding's episode closed after the request
  and nothing flags the node any more: no open ``drain_node`` finding on it, in this instance's snapshot or in the
  store (the store is the one view of every instance's findings under sharding). A finding row not written yet, or
  one closed before the request (a new episode not stored yet), withdraws nothing.
- *Held back* (approved → requested, the reason in its audit) while the node holds the last ready replica of a
  deployment in the latest snapshot, off the nodes being drained (``detectors.drain_rails.last_ready_on``). Back in
  requested it no longer counts toward ``drains.max_concurrent`` or ``drains.budget`` (both count approved and
  executing drains), so a node that may hold the last replica for ever does not keep every other node's drain
  waiting; kept approved, it did (review G, round 8). Once another replica is ready, ``decide`` approves its node
  again and kvpilot re-approves it (``held_back``) through the store's rails, as it would a fresh request, whether or
  not ``drains.require_approval`` is on (an operator approved it once); it is withdrawn if its finding closes
  meanwhile. With sharding the snapshot holds only this instance's deployments, so this rail is blind to the
  others' (as the request's was).
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import select
from sqlalchemy.orm import Session

from detectors.drain_rails import Placement, last_ready_on
from kvpilot.runtime.snapshot import Snapshot
from store.drain_states import DrainState
from store.models import DrainActionRow, DrainEventRow, FindingRow
from store.repo.findings import CLOSED, LIVE


def placements(snap: Snapshot) -> list[Placement]:
    """Where each replica of the snapshot runs, and whether it is ready: what the rails read."""
    return [Placement(r.sample.deployment_key, r.sample.replica, r.sample.node, r.ready) for r in snap.replicas]


def flagged_nodes(snap: Snapshot | None) -> set[str]:
    """Nodes an open ``drain_node`` finding of the snapshot names."""
    if snap is None:
        return set()
    return {f.subject.node for f in snap.findings if f.action == "drain_node" and f.subject.node}


def withdrawn(session: Session, action: DrainActionRow, *, actor: str, flagged: Collection[str]) -> str | None:
    """Why ``action`` is no longer wanted (its finding closed, its node flagged by nothing), or None: an operator's
    drain, no finding recorded, the node still flagged, the finding's row not written yet or still open."""
    if action.requested_by != actor or not action.finding_id or action.node in flagged:
        return None
    row = session.get(FindingRow, action.finding_id)
    if row is None or row.state != CLOSED or row.closed_at is None or row.closed_at < action.requested_at:
        return None
    other = select(FindingRow.id).where(
        FindingRow.node == action.node, FindingRow.action == "drain_node", FindingRow.state.in_(LIVE)
    )
    if session.scalars(other.limit(1)).first() is not None:
        return None
    return (
        f"withdrawn by kvpilot: its finding {row.id} ({row.kind} on {row.node or action.node}) closed at "
        f"{row.closed_at:.0f} and nothing flags {action.node} any more"
    )


def held(action: DrainActionRow, snap: Snapshot | None, *, actor: str, draining: Collection[str]) -> str | None:
    """Why ``action`` (approved) must not run now, or None: the node holds a deployment's last ready replica."""
    if action.requested_by != actor or not action.finding_id:
        return None
    if snap is None:
        return "held: no fleet snapshot yet to check the last-ready-replica rail against"
    last = last_ready_on(action.node, placements(snap), draining=set(draining) - {action.node})
    if not last:
        return None
    return (
        f"held: {action.node} now holds the last ready replica of {', '.join(last)}; back to requested, freeing its "
        "drains.max_concurrent slot, and approved again by kvpilot when it no longer does"
    )


def held_back(session: Session, action: DrainActionRow, *, actor: str) -> bool:
    """True when ``action`` is requested because ``actor`` held it back after its approval (its latest transition
    is approved → requested by ``actor``): kvpilot approves it again once the rails allow, an operator need not."""
    if action.state != DrainState.REQUESTED:
        return False
    last = select(DrainEventRow).where(
        DrainEventRow.action_id == action.id, DrainEventRow.from_state != DrainEventRow.to_state
    )
    event = session.scalars(last.order_by(DrainEventRow.id.desc()).limit(1)).first()
    return (
        event is not None
        and event.from_state == DrainState.APPROVED
        and event.to_state == DrainState.REQUESTED
        and event.actor == actor
    )
