"""Two kvpilots on one store racing every drain transition at once, on SQLite and a real PostgreSQL: an operator's
approve and cancel, kvpilot's re-approval (request then approve in a savepoint, as ``_request_drains``), the
re-check's withdrawal and hold-back (savepoints whose lost race is suppressed, as ``Actuator._still_wanted``), the
worker's claim, finish and requeue. Every action's audit trail is a legal chain that ends in its row's state, each
transition a writer saw succeed is in it exactly once, at most ``max_concurrent`` drains are ever approved or
executing, and a node never has two live actions."""

from __future__ import annotations

import contextlib
import itertools
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from store import repo
from store.db import make_engine, session_factory, transaction
from store.drain_states import ACTIVE, DrainState, can_transition
from store.errors import InvalidTransition, NotFound, RailFull
from store.models import DrainActionRow, DrainEventRow
from tests.reliability.conftest import Recorder, Store

MAX_CONCURRENT = 2
NODES = [f"gpu-{i}" for i in range(4)]
THREADS = 8
STEPS = 50  # each writer's: a count, not a time, so that a loaded machine runs as many races (3 s on an idle one)

pytestmark = pytest.mark.timeout(300)  # a hang guard only: 3 s on an idle machine


def _op(s: Session, rng: random.Random, node: str) -> tuple[str, int] | None:
    """One writer's step on ``node``'s latest action: the state it moved the action to, or None (nothing moved)."""
    now = time.time()
    row = repo.latest_drain_for_node(session=s, node=node)
    op = rng.choice(["request", "approve", "reapprove", "cancel", "withdraw", "hold", "claim", "finish", "requeue"])
    if op == "request" or row is None:  # opened, or the live one returned: the chain's first event either way
        repo.request_drain(session=s, node=node, requested_by="kvpilot", now=now, dry_run=False, finding_id="f")
        return None
    if op == "approve":  # POST /v1/drains/{id}/approve
        repo.approve_drain(session=s, action_id=row.id, actor="admin", now=now, max_concurrent=MAX_CONCURRENT)
        return "approved", row.id
    if op == "reapprove":
        live = repo.request_drain(session=s, node=node, requested_by="kvpilot", now=now, dry_run=False)
        with s.begin_nested():
            repo.approve_drain(session=s, action_id=live.id, actor="kvpilot", now=now, max_concurrent=MAX_CONCURRENT)
        return "approved", live.id
    if op in ("withdraw", "hold"):
        to = DrainState.CANCELLED if op == "withdraw" else DrainState.REQUESTED
        with contextlib.suppress(InvalidTransition), s.begin_nested():
            repo.transition_drain(session=s, action_id=row.id, to=to, actor="kvpilot", now=now, message=op)
            return to.value, row.id
        return None
    # requeue: the worker's (Actuation._requeue) of a drain it read executing in an earlier transaction (its list, or
    # the drain it ran), so by now in any state: moved from executing only (expect), else refused. Without expect, a
    # drain held back to requested meanwhile was approved past the rail (session 19): the peak check fails then.
    to = {
        "cancel": DrainState.CANCELLED,
        "claim": DrainState.EXECUTING,
        "requeue": DrainState.APPROVED,
        "finish": rng.choice([DrainState.DONE, DrainState.FAILED]),
    }[op]
    expect = DrainState.EXECUTING if op == "requeue" else None
    repo.transition_drain(session=s, action_id=row.id, to=to, actor="kvpilot", now=now, expect=expect)
    return to.value, row.id


def _writer(sessions: sessionmaker[Session], seed: int, record: Callable[[str, int], None]) -> Counter[str]:
    rng = random.Random(seed)
    errors: Counter[str] = Counter()
    for _ in range(STEPS):
        try:
            with transaction(sessions) as s:
                moved = _op(s, rng, rng.choice(NODES))
        except (InvalidTransition, RailFull, NotFound):
            continue  # a race lost, as the API answers 409
        except Exception as e:  # counted and shown: none is expected
            errors[f"{type(e).__name__}: {str(e)[:80]}"] += 1
            continue
        if moved is not None:
            record(*moved)
    return errors


def _audit_faults(
    events: list[DrainEventRow], rows: dict[int, DrainActionRow], seen: dict[int, Counter[str]]
) -> list[str]:
    chains: dict[int, list[DrainEventRow]] = defaultdict(list)
    for e in events:
        if e.from_state != e.to_state:  # notes (steps) keep the state
            chains[e.action_id].append(e)
    faults = []
    for action_id, chain in chains.items():
        if (chain[0].from_state, chain[0].to_state) != (None, "requested"):
            faults.append(f"{action_id}: opened {chain[0].from_state} -> {chain[0].to_state}")
        for a, b in itertools.pairwise(chain):
            if b.from_state != a.to_state or not can_transition(DrainState(a.to_state), DrainState(b.to_state)):
                faults.append(f"{action_id}: {a.from_state} -> {a.to_state}, then {b.from_state} -> {b.to_state}")
        if chain[-1].to_state != rows[action_id].state:
            faults.append(f"{action_id}: state {rows[action_id].state}, last event to {chain[-1].to_state}")
        audited = Counter(e.to_state for e in chain[1:])  # after the opening event
        if audited != seen[action_id]:
            faults.append(f"{action_id}: audited {dict(audited)}, done {dict(seen[action_id])}")
    return faults


def _peaks(events: list[DrainEventRow], rows: dict[int, DrainActionRow]) -> tuple[int, int]:
    """Replayed in commit order (the rail serialises approvals): the most approved or executing drains at once, and
    the most live actions one node had at once."""
    state: dict[int, str] = {}
    active = live = 0
    for e in events:
        if e.from_state == e.to_state:
            continue
        state[e.action_id] = e.to_state
        active = max(active, sum(v in (DrainState.APPROVED, DrainState.EXECUTING) for v in state.values()))
        per_node = Counter(rows[a].node for a, v in state.items() if v in ACTIVE)
        live = max(live, max(per_node.values(), default=0))
    return active, live


def test_two_instances_racing_every_drain_transition_keep_the_audit_whole(store: Store, record: Recorder) -> None:
    # two kvpilots: their own pools. Waits (a lock, a pooled connection) bounded by a minute, not 5 s: the test is
    # about the outcome, and a loaded machine must not fail it by slowing a writer (pytest's timeout guards a hang)
    engines = [make_engine(store.url, statement_timeout_s=60.0, pool_timeout_s=60.0) for _ in range(2)]
    sessions = [session_factory(e) for e in engines]
    seen: dict[int, Counter[str]] = defaultdict(Counter)
    lock = threading.Lock()

    def moved(to: str, action_id: int) -> None:
        with lock:
            seen[action_id][to] += 1

    results: list[Counter[str]] = []
    threads = [
        threading.Thread(target=lambda i=i: results.append(_writer(sessions[i % 2], i, moved))) for i in range(THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with transaction(sessions[0]) as s:
        rows = {r.id: r for r in s.scalars(select(DrainActionRow))}
        events = list(s.scalars(select(DrainEventRow).order_by(DrainEventRow.id)))
    for e in engines:
        e.dispose()
    errors = sum(results, Counter())
    faults = _audit_faults(events, rows, seen)
    active, live = _peaks(events, rows)
    done = sum(sum(c.values()) for c in seen.values())
    record(
        f"{THREADS} writers on 2 instances, {STEPS} steps each of every drain transition on {len(NODES)} nodes",
        f"legal chains, each success audited once, <= {MAX_CONCURRENT} active, 1 live a node, no error",
        f"{done} transitions on {len(rows)} actions, {len(faults)} fault(s) {faults[:3]}, peak {active} active, "
        f"{live} live a node, errors {dict(errors)}",
        done >= 20 and not faults and active <= MAX_CONCURRENT and live <= 1 and not errors,
    )
