"""A run's end does not close a drain another leader requeued and claimed again between the check that the run is
still the drain's and the write (session 25, A's review of 33f3355).

``Actuation._ours`` read the drain's latest claim, then ``transition_drain`` moved it on its state alone (executing):
on PostgreSQL (read committed) another leader's requeue and claim, committed in between, left the state executing
again (a different run of it), so the old run's end closed the new run while it drained the node. Now ``_ours`` holds
the drain's row (FOR UPDATE) while it reads the claim: the other leader's requeue waits for this end and then finds
the drain closed. SQLite takes its write lock at BEGIN (IMMEDIATE), so the other leader waits there already."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from collector.clock import VirtualClock
from detectors.drain_rails import DrainRails
from kvpilot.actuation import Actuation
from kvpilot.actuation.drain import DrainResult
from store import repo
from store.db import transaction
from store.drain_states import DrainState
from store.errors import InvalidTransition
from tests.helpers.drains import Pools


class _NoDrainer:
    def drain(self, node: str, **_: Any) -> DrainResult:
        raise AssertionError("not run here")

    def cordoned(self) -> set[str] | None:
        return set()


def test_an_end_does_not_close_a_run_claimed_between_its_check_and_its_write(
    pools: Pools, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_sessions, new_sessions = pools
    clock = VirtualClock(1000.0)
    with transaction(new_sessions) as s:
        a = repo.request_drain(session=s, node="n0", requested_by="kvpilot", now=clock.now(), dry_run=False).id
        repo.approve_drain(session=s, action_id=a, actor="kvpilot", now=clock.now(), max_concurrent=1)
    old = Actuation(sessions=old_sessions, clock=clock, rails=DrainRails(dry_run=False), drainer=_NoDrainer())
    attempt = old._claim(a)
    assert attempt is not None

    def new_leader_resumes() -> None:  # another leader (its own pool) requeues the drain and claims it again
        with transaction(new_sessions) as s:
            repo.transition_drain(session=s, action_id=a, to=DrainState.APPROVED, actor="kvpilot",
                                  now=clock.now(), message="resumed", expect=DrainState.EXECUTING)  # fmt: skip
        with transaction(new_sessions) as s:
            repo.transition_drain(session=s, action_id=a, to=DrainState.EXECUTING, actor="kvpilot",
                                  now=clock.now(), message="executing")  # fmt: skip

    resumed = threading.Event()

    def resume() -> None:
        try:
            new_leader_resumes()
            resumed.set()
        except InvalidTransition:  # the old run's end came first: nothing of it left to resume
            pass

    real: Callable[..., int | None] = repo.drain_attempt
    other = threading.Thread(target=resume, daemon=True)

    def attempt_then_the_other_leader(**kw: Any) -> int | None:
        found = real(**kw)
        if not other.is_alive() and not resumed.is_set():  # once: between the check and the write
            other.start()
            resumed.wait(2.0)  # done at once where nothing holds it back (a wait, not a speed assertion)
        return found

    monkeypatch.setattr(repo, "drain_attempt", attempt_then_the_other_leader)
    old._finish(a, attempt, DrainResult("n0", False, evicted=["ml/chat-0"]))
    monkeypatch.undo()
    other.join(60)  # a hang guard only
    assert not other.is_alive()

    with transaction(new_sessions) as s:
        state = repo.get_drain(session=s, action_id=a).state
        latest = repo.drain_attempt(session=s, action_id=a)
    # the drain is either still the new run's (executing, its claim the latest) or closed by the old run while
    # the old run's claim was the latest; before: done while the new run's claim was the latest (PostgreSQL)
    assert (state, latest == attempt) in {("executing", False), ("done", True)}
