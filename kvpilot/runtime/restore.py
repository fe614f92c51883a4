"""What a previous run left in the store, read once at start: open findings (so hysteresis does not flap them), the
last decision of every deployment (published again at once, so KEDA keeps its target) and the per-minute arrival
rates that warm each deployment's forecaster. ``kvpilot.runtime.service.Service.start`` resumes from it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from detectors.finding import Finding
from kvpilot.runtime.loop import Decide, Remembers
from scaler.decision import Decision
from store import repo
from store.db import transaction
from store.errors import driver_words
from store.fields import is_deployment_key
from store.repo.rollups import RollupPoint

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Restored:
    """What a previous run left in the store."""

    findings: list[Finding] = field(default_factory=list)
    decisions: dict[str, Decision] = field(default_factory=dict)
    rollups: list[RollupPoint] = field(default_factory=list)


def restore(sessions: sessionmaker[Session], *, now: float, history_s: float) -> Restored:
    """Read the resumable state; an unreachable store means starting empty (and saying so), not failing. It only
    reads, so on SQLite it does not wait for another kvpilot's write lock (``store.db.transaction``'s
    ``reads_only``)."""
    try:
        with transaction(sessions, reads_only=True) as s:
            return Restored(
                findings=repo.open_findings(session=s),
                decisions=repo.latest_decisions(session=s),
                rollups=repo.load_rollups(session=s, since=now - history_s),
            )
    except SQLAlchemyError as e:
        log.error("store unreachable at start, starting without history: %s", driver_words(e))
        return Restored()


def publishable(decisions: dict[str, Decision]) -> dict[str, Decision]:
    """The restored decisions that can be published again; a row an older version stored for a name that is not
    ``namespace/name`` (``probe/a/b``) is skipped with an error naming it, so that it can never stop a start."""
    good: dict[str, Decision] = {}
    for key, d in decisions.items():
        if is_deployment_key(key):
            good[key] = d
        else:
            log.error("stored decision for %r skipped: not a Kubernetes namespace/name; it is not published", key)
    return good


def warm_start(planner: Decide, rollups: list[RollupPoint]) -> int:
    """Feed the stored per-minute arrival rates to each deployment's forecaster; returns points fed.

    Works with planners that keep per-deployment models (``kvpilot.runtime.loop.Remembers``); others are skipped.
    """
    if not isinstance(planner, Remembers):
        return 0
    fed = 0
    for p in rollups:
        rate = p.values.get("arrival_rate")
        if rate is not None:
            planner.warm(p.deployment, p.t + 30.0, rate)  # the minute's midpoint
            fed += 1
    return fed
