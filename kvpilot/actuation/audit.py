"""Audit records: every step an actuator takes or skips, with its outcome, for the store's drain events."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Outcome(StrEnum):
    OK = "ok"
    DRY_RUN = "dry_run"  # would have been done
    SKIPPED = "skipped"  # nothing to do (DaemonSet pod, mirror pod, already cordoned)
    RETRY = "retry"  # temporary refusal (429 PDB, 409 conflict): retried after a backoff
    BLOCKED = "blocked"  # gave up after the deadline (PDB kept refusing)
    NOT_FOUND = "not_found"  # gone already (404)
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class AuditRecord:
    at: float
    node: str
    step: str  # cordon (the cordon and the taint, one node update) | list_pods | evict
    target: str  # node name or namespace/pod
    outcome: Outcome
    message: str
    dry_run: bool
    actor: str = "kvpilot"
    evidence: dict[str, str | float | None] = field(default_factory=dict)
