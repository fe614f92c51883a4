"""A GPU finding's alert names the replica (pod) and deployment it serves, not only "GPU GPU-14a2… on node-0": on
/metrics (`kvpilot_finding_active`) and in the rule's summary."""

from __future__ import annotations

from alerts.rules import alert_for_finding, expand
from api.exposition import snapshot_families
from detectors.finding import Finding, Severity, Subject
from kvpilot.runtime.snapshot import Snapshot

GPU = Subject(node="node-0", gpu="GPU-14a2")
SERVING = Finding(
    "stuck_gpu", Severity.CRITICAL, GPU, 0.0, "GPU 0 on node-0: XID 79", {"deployment": "ml/chat", "replica": "chat-0"}
)
UNPLACED = Finding("stuck_gpu", Severity.WARNING, GPU, 0.0, "GPU 0 on node-0: XID 31", {"replica": None})


def test_labels_take_the_replica_from_the_evidence_and_the_id_stays_the_gpus() -> None:
    assert SERVING.alert_labels() == {"deployment": "ml/chat", "replica": "chat-0", "node": "node-0", "gpu": "GPU-14a2"}
    assert UNPLACED.alert_labels() == {"deployment": "", "replica": "", "node": "node-0", "gpu": "GPU-14a2"}
    assert SERVING.id == UNPLACED.id  # which pod runs on the GPU does not make it another finding


def test_finding_active_carries_them() -> None:
    (family,) = [f for f in snapshot_families(Snapshot(tick=1, t=0.0, findings=[SERVING])) if "finding" in f.name]
    (sample,) = family.samples
    assert sample.labels["replica"] == "chat-0"
    assert sample.labels["deployment"] == "ml/chat"
    assert sample.labels["gpu"] == "GPU-14a2"


def test_the_rule_summary_names_the_workload_when_known() -> None:
    alert = alert_for_finding("stuck_gpu", "critical")
    assert alert is not None
    served = expand(alert.summary, SERVING.alert_labels())
    assert served == "GPU GPU-14a2 on node-0 (replica chat-0 of ml/chat) needs its node drained"
    assert expand(alert.summary, UNPLACED.alert_labels()) == "GPU GPU-14a2 on node-0 needs its node drained"
