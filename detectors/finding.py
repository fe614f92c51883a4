"""What a detector reports: a Finding, with a stable identity that survives restarts."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum

from collector.urls import masked_in


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True, slots=True)
class Subject:
    """What a finding is about; unused parts stay empty strings (bounded label cardinality)."""

    deployment: str = ""  # "namespace/name"
    replica: str = ""
    node: str = ""
    gpu: str = ""  # GPU UUID or index

    def as_labels(self) -> dict[str, str]:
        return {"deployment": self.deployment, "replica": self.replica, "node": self.node, "gpu": self.gpu}


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str  # detector name, e.g. "kv_exhaustion"
    severity: Severity
    subject: Subject
    since: float  # when the condition was first seen (epoch seconds)
    summary: str  # one line an operator reads
    evidence: dict[str, float | str | None] = field(default_factory=dict)
    action: str = "none"  # none | notify | restart_workload | reset_gpu | drain_node | prefix_aware_routing | scale_out

    def __post_init__(self) -> None:
        # The summary is shown (API, CLI, logs, the store's rows): a replica on no pod is named by its page's URL, so
        # any URL in it is shown without a password or token (the subject, the finding's identity, keeps the name)
        if "://" in self.summary:
            object.__setattr__(self, "summary", masked_in(self.summary))

    @property
    def id(self) -> str:
        """Stable across restarts: the same condition on the same subject has the same id."""
        s = self.subject
        raw = "|".join((self.kind, s.deployment, s.replica, s.node, s.gpu))
        return hashlib.sha256(raw.encode()).hexdigest()[:16]

    def alert_labels(self) -> dict[str, str]:
        """deployment, replica, node and gpu for ``kvpilot_finding_active`` and alerts: the subject's, plus the
        deployment and replica (pod) a GPU finding names in its evidence, so an alert on a GPU says which workload
        it hurts. The subject, and so the id, stays the GPU alone: a pod moving does not make another finding."""
        labels = self.subject.as_labels()
        for key in ("deployment", "replica"):
            value = self.evidence.get(key)
            if not labels[key] and isinstance(value, str):
                labels[key] = value
        # a replica on no pod is named by its page's URL: shown without a password or token (/metrics, Alertmanager)
        labels["replica"] = masked_in(labels["replica"])
        return labels
