"""store.repo.drains_in: the runtime's per-tick drain reads (issue 17) — the rows of the states asked for, newest
first, up to the limit, however many finished actions the history holds."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from store import repo
from store.db import transaction
from store.drain_states import ACTIVE, DrainState


def _drain(factory: sessionmaker[Session], node: str, now: float, path: list[DrainState]) -> int:
    with transaction(factory) as s:
        action_id = repo.request_drain(session=s, node=node, requested_by="op", now=now, dry_run=True).id
    for to in path:
        with transaction(factory) as s:
            repo.transition_drain(session=s, action_id=action_id, to=to, actor="op", now=now)
    return action_id


def test_only_the_states_asked_for_newest_first(factory: sessionmaker[Session]) -> None:
    for i in range(5):  # a history of finished actions on one node
        _drain(factory, "old", i, [DrainState.CANCELLED])
    requested = _drain(factory, "a", 10, [])
    approved = _drain(factory, "b", 11, [DrainState.APPROVED])
    executing = _drain(factory, "c", 12, [DrainState.APPROVED, DrainState.EXECUTING])
    live = {a.value for a in ACTIVE}
    with transaction(factory) as s:
        assert [r.id for r in repo.drains_in(session=s, states=live, limit=1000)] == [executing, approved, requested]
        assert [r.id for r in repo.drains_in(session=s, states=live, limit=2)] == [executing, approved]
        only = repo.drains_in(session=s, states=(DrainState.APPROVED.value,), limit=100)
        assert [(r.id, r.node, r.state) for r in only] == [(approved, "b", "approved")]
        # what list_drains pages for one state, without its total
        paged = repo.list_drains(session=s, state=DrainState.APPROVED.value, limit=100).items
        assert [r.id for r in paged] == [r.id for r in only]


def test_a_live_action_behind_a_long_history_is_found(factory: sessionmaker[Session]) -> None:
    """The live-drain map read the newest 1,000 actions of every state and kept the live ones: behind 1,000 finished
    ones, an older live action was not seen. Reading the live states alone finds it."""
    live_id = _drain(factory, "stuck", 0, [DrainState.APPROVED])
    for i in range(3):
        _drain(factory, f"n{i}", 1 + i, [DrainState.CANCELLED])
    live = {a.value for a in ACTIVE}
    with transaction(factory) as s:
        newest_of_any = repo.list_drains(session=s, limit=3).items  # stands for the 1,000 newest
        assert live_id not in {r.id for r in newest_of_any}
        assert [r.id for r in repo.drains_in(session=s, states=live, limit=3)] == [live_id]
