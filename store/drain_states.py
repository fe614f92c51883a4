"""The drain action state machine: requested → approved → executing → done | failed, and cancelled from any
state before execution finishes; executing → approved when the drain worker stops mid-drain (SIGTERM, a crash
found at the next start), so that the next leader resumes it; approved → requested when the worker holds back a drain
kvpilot requested (its node holds a deployment's last ready replica), so that it frees its ``drains.max_concurrent``
slot and budget until kvpilot approves it again through the rails. Pure, so the API, the service and the tests agree
on one table."""

from __future__ import annotations

from enum import StrEnum


class DrainState(StrEnum):
    REQUESTED = "requested"
    APPROVED = "approved"
    EXECUTING = "executing"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


TRANSITIONS: dict[DrainState, frozenset[DrainState]] = {
    DrainState.REQUESTED: frozenset({DrainState.APPROVED, DrainState.CANCELLED}),
    # Back to requested: held back by the drain worker (kvpilot.actuation.recheck), re-approved when the rails allow.
    DrainState.APPROVED: frozenset({DrainState.EXECUTING, DrainState.CANCELLED, DrainState.REQUESTED}),
    # Cancelling while executing stops further evictions; the actuator reports what it already did.
    # Back to approved: interrupted by a shutdown, resumed by the next leader (cordon and evictions are idempotent).
    DrainState.EXECUTING: frozenset({DrainState.DONE, DrainState.FAILED, DrainState.CANCELLED, DrainState.APPROVED}),
    DrainState.DONE: frozenset(),
    DrainState.FAILED: frozenset(),
    DrainState.CANCELLED: frozenset(),
}

ACTIVE: frozenset[DrainState] = frozenset({DrainState.REQUESTED, DrainState.APPROVED, DrainState.EXECUTING})


def can_transition(current: DrainState, wanted: DrainState) -> bool:
    return wanted in TRANSITIONS[current]
