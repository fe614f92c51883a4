"""Drain actions and their audit trail. Every transition goes through ``transition_drain``, which enforces the
state machine in ``store.drain_states`` as a conditional update (compare-and-set on the state, so of two racing
approvals or cancels exactly one wins) and writes one ``drain_events`` row.

Requests and approvals first claim the ``drain_rail`` row: PostgreSQL holds its row lock and SQLite its write lock
until commit, so "one live action per node" (also a partial unique index) and "at most K approved or executing"
are checked and claimed in one transaction, never counted in one and written in another."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from store.drain_states import ACTIVE, DrainState, can_transition
from store.errors import BudgetSpent, InvalidTransition, NotFound, RailFull
from store.fields import fit
from store.models import DrainActionRow, DrainEventRow, DrainRailRow
from store.repo.page import Page, paginate

_NODE_WIDTH = 253
# A reason or an audit message: text read from pages (a GPU exporter's Hostname label, as a stuck GPU's summary
# quotes it) made storable, as a finding's summary is (``store.repo.findings``); PostgreSQL refuses NUL in text.
_TEXT_WIDTH = 10_000


def claim_rail(*, session: Session) -> None:
    """Take the drain rail for the rest of this transaction (see the module docstring)."""
    done = session.execute(
        update(DrainRailRow).where(DrainRailRow.id == 1).values(claims=DrainRailRow.claims + 1),
        execution_options={"synchronize_session": False},
    )
    if getattr(done, "rowcount", 1) == 0:  # a schema made without the migration's row: make it, once
        with session.begin_nested():
            session.add(DrainRailRow(id=1, claims=1))


def request_drain(
    *,
    session: Session,
    node: str,
    requested_by: str,
    now: float,
    dry_run: bool,
    reason: str = "",
    finding_id: str | None = None,
    evidence: dict[str, Any] | None = None,
) -> DrainActionRow:
    """Open a drain request, unless one for the same node is already in flight (then that one is returned)."""
    if not node:
        raise ValueError("node must not be empty")
    node, reason = fit(node, _NODE_WIDTH), fit(reason, _TEXT_WIDTH)
    claim_rail(session=session)
    existing = _live_for_node(session, node)
    if existing is not None:
        return existing
    row = DrainActionRow(
        node=node,
        state=DrainState.REQUESTED.value,
        dry_run=dry_run,
        requested_by=requested_by,
        requested_at=now,
        updated_at=now,
        reason=reason,
        finding_id=finding_id,
        evidence=evidence or {},
    )
    try:
        with session.begin_nested():  # the unique index is the last word if a writer bypassed the rail
            session.add(row)
            session.flush()
    except IntegrityError:
        existing = _live_for_node(session, node)
        if existing is None:
            raise
        return existing
    session.add(
        DrainEventRow(action_id=row.id, at=now, from_state=None, to_state=row.state, actor=requested_by, message=reason)
    )
    return row


def _live_for_node(session: Session, node: str) -> DrainActionRow | None:
    return session.scalars(
        select(DrainActionRow).where(DrainActionRow.node == node, DrainActionRow.state.in_(list(ACTIVE)))
    ).first()


def approve_drain(
    *, session: Session, action_id: int, actor: str, now: float, max_concurrent: int, message: str = "",
    budget: int | None = None, budget_window_s: float = 86400.0, over_budget: bool = False,
    cordoned: Collection[str] = (),
) -> DrainActionRow:  # fmt: skip
    """requested → approved, unless ``max_concurrent`` actions are already approved or executing (``RailFull``), or
    ``budget`` drains already count within ``budget_window_s`` (``BudgetSpent``, see ``count_budget_drains``; None:
    no budget): counted and claimed under the rail, so parallel approvals can never exceed either.

    ``over_budget``: an operator's explicit approval past the budget (never max_concurrent): approved, and its audit
    event says so (its actor is who approved). Only the API passes it; kvpilot's own approval never does.
    ``cordoned``: nodes the caller read as still cordoned by kvpilot, counted against the budget too (real drains)."""
    claim_rail(session=session)
    row = get_drain(session=session, action_id=action_id)
    if row.state != DrainState.REQUESTED.value:
        raise InvalidTransition("drain action", action_id, row.state, DrainState.APPROVED.value)
    active = count_active_drains(session=session)
    if active >= max_concurrent:
        raise RailFull(max_concurrent, active)
    if budget is not None:
        out = () if row.dry_run else cordoned
        spent = count_budget_drains(session=session, since=now - budget_window_s, dry_run=row.dry_run, cordoned=out)
        if spent >= budget:
            if not over_budget:
                raise BudgetSpent(budget, spent, budget_window_s)
            note = (
                f"approved over drains.budget: {spent} drain(s) started or approved in the last "
                f"{budget_window_s:.0f} s or node(s) still cordoned by kvpilot, the budget is {budget}"
            )
            message = f"{note}; {message}" if message else note
    return transition_drain(session=session, action_id=action_id, to=DrainState.APPROVED, actor=actor, now=now,
                            message=message)  # fmt: skip


def get_drain(*, session: Session, action_id: int, lock: bool = False) -> DrainActionRow:
    """``lock``: the row read again and held (FOR UPDATE on PostgreSQL; SQLite's transaction holds the write lock from
    its start) until the transaction ends, so that no other transition of it lands between a check and a write."""
    row = session.get(DrainActionRow, action_id, with_for_update=True if lock else None, populate_existing=lock)
    if row is None:
        raise NotFound("drain action", action_id)
    return row


def transition_drain(
    *,
    session: Session,
    action_id: int,
    to: DrainState,
    actor: str,
    now: float,
    message: str = "",
    expect: DrainState | None = None,
) -> DrainActionRow:
    """Move ``action_id`` to ``to`` if the state machine allows it from the state it is in *now*: the update is
    conditional on the state read, so a racing transition makes this one fail (``InvalidTransition``).

    ``expect``: the only state to move from (any other raises ``InvalidTransition``). The drain worker's requeue of a
    drain it ran passes executing: approved is reachable from requested too, and a drain another worker requeued and
    held back meanwhile (executing → approved → requested, its slot given to another drain) was approved again with
    no rail check (session 19). Requested → approved is ``approve_drain``'s, under the rail lock."""
    message = fit(message, _TEXT_WIDTH)
    row = get_drain(session=session, action_id=action_id)
    try:
        current = DrainState(row.state)
    except ValueError:  # a state another (newer) version wrote: this one knows no way out of it
        raise InvalidTransition("drain action", action_id, row.state, to.value) from None
    if (expect is not None and current != expect) or not can_transition(current, to):
        raise InvalidTransition("drain action", action_id, current.value, to.value)
    done = session.execute(
        update(DrainActionRow)
        .where(DrainActionRow.id == action_id, DrainActionRow.state == current.value)
        .values(state=to.value, updated_at=now),
        execution_options={"synchronize_session": False},
    )
    if getattr(done, "rowcount", 1) != 1:
        session.refresh(row)
        raise InvalidTransition("drain action", action_id, row.state, to.value)
    session.refresh(row)
    session.add(
        DrainEventRow(
            action_id=row.id, at=now, from_state=current.value, to_state=to.value, actor=actor, message=message
        )
    )
    return row


def count_active_drains(*, session: Session) -> int:
    stmt = (
        select(func.count())
        .select_from(DrainActionRow)
        .where(DrainActionRow.state.in_([DrainState.APPROVED.value, DrainState.EXECUTING.value]))
    )
    return int(session.scalar(stmt) or 0)


def count_budget_drains(*, session: Session, since: float, dry_run: bool, cordoned: Collection[str] = ()) -> int:
    """Drains that count against the budget: approved or executing now, or started (executing) at or after ``since``
    whatever they became, done, failed or cancelled midway: each took its node out of the pool, and a done drain
    leaves it cordoned until an operator uncordons it. An approval cancelled before it ran does not count. Dry runs
    count among dry runs only, so a dry run shows where the budget would refuse.

    And each node of ``cordoned`` (the nodes kvpilot cordoned that are still cordoned, read from the API server by
    the caller) that none of those drains is about: a node cordoned for days still counts after the window, since the
    budget is about capacity out of the fleet (session 19; before, it counted from the store's window only)."""
    started = select(DrainEventRow.action_id).where(
        DrainEventRow.to_state == DrainState.EXECUTING.value, DrainEventRow.at >= since
    )
    stmt = select(DrainActionRow.node).where(
        DrainActionRow.dry_run == dry_run,
        DrainActionRow.state.in_([DrainState.APPROVED.value, DrainState.EXECUTING.value])
        | DrainActionRow.id.in_(started),
    )
    nodes = list(session.scalars(stmt))
    return len(nodes) + len(set(cordoned) - set(nodes))


def list_drains(
    *, session: Session, state: str | None = None, node: str | None = None, limit: int = 100, offset: int = 0
) -> Page[DrainActionRow]:
    stmt = select(DrainActionRow)
    if state is not None:
        stmt = stmt.where(DrainActionRow.state == state)
    if node is not None:
        stmt = stmt.where(DrainActionRow.node == node)
    stmt = stmt.order_by(DrainActionRow.id.desc())
    rows, total = paginate(session, stmt, limit=limit, offset=offset)
    return Page(rows, total, limit, offset)


def drains_in(*, session: Session, states: Collection[str], limit: int) -> list[DrainActionRow]:
    """The newest ``limit`` actions in ``states``, newest first: what ``list_drains`` pages, without the total it
    counts (a second query) and without the rows of other states; for the runtime's reads each tick (the live
    drains' map, the approved drains to execute)."""
    stmt = select(DrainActionRow).where(DrainActionRow.state.in_(list(states)))
    return list(session.scalars(stmt.order_by(DrainActionRow.id.desc()).limit(limit)))


def list_drain_events(*, session: Session, action_id: int) -> list[DrainEventRow]:
    get_drain(session=session, action_id=action_id)
    return list(
        session.scalars(select(DrainEventRow).where(DrainEventRow.action_id == action_id).order_by(DrainEventRow.id))
    )


def drain_claim(*, session: Session, action_id: int) -> DrainEventRow | None:
    """The last event that moved ``action_id`` into executing (a claim: its message says by whom, with sharding),
    None if none did."""
    stmt = (
        select(DrainEventRow)
        .where(
            DrainEventRow.action_id == action_id,
            DrainEventRow.to_state == DrainState.EXECUTING.value,
            DrainEventRow.from_state != DrainState.EXECUTING.value,
        )
        .order_by(DrainEventRow.id.desc())
        .limit(1)
    )
    return session.scalars(stmt).first()


def drain_attempt(*, session: Session, action_id: int) -> int | None:
    """Which run of ``action_id`` its executing state belongs to: the id of its claim (``drain_claim``), None if none.
    A drain requeued and claimed again (another leader resuming it) is another attempt, though its state reads
    executing as before."""
    claim = drain_claim(session=session, action_id=action_id)
    return None if claim is None else claim.id


def note_drain(*, session: Session, action_id: int, actor: str, now: float, message: str) -> None:
    """Audit one step inside the current state (a cordon, an eviction, a retry) without changing the state."""
    row = get_drain(session=session, action_id=action_id)
    message = fit(message, _TEXT_WIDTH)
    session.add(
        DrainEventRow(action_id=row.id, at=now, from_state=row.state, to_state=row.state, actor=actor, message=message)
    )


def latest_drain_for_node(*, session: Session, node: str) -> DrainActionRow | None:
    """``node`` as ``request_drain`` stores it (a name no column holds was a query PostgreSQL refused)."""
    stmt = (
        select(DrainActionRow)
        .where(DrainActionRow.node == fit(node, _NODE_WIDTH))
        .order_by(DrainActionRow.id.desc())
        .limit(1)
    )
    return session.scalars(stmt).first()
