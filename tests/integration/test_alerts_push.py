"""Direct push of findings to a real Alertmanager's v2 API (for users without kvpilot's Prometheus rules)."""

from __future__ import annotations

import dataclasses
import time

import pytest

from detectors.finding import Finding, Severity, Subject
from kvpilot.actuators.alertmanager import AlertmanagerPusher
from tests.services.alertmanager import run_alertmanager, run_webhook

XID = Finding("stuck_gpu", Severity.CRITICAL, Subject(node="gpu-7", gpu="GPU-1"), 1_700_000_000.0, "XID 79 on GPU-1",
              action="drain_node")  # fmt: skip
INFO = Finding("stuck_gpu", Severity.INFO, Subject(node="gpu-8", gpu="GPU-2"), 1_700_000_000.0, "XID 13",
               action="restart_workload")  # fmt: skip


def test_payload_mirrors_the_rule_alerts():
    # The pushed alert has the rule's name, severity and runbook, the finding's subject as labels (empty ones
    # dropped) and its expanded description; findings no rule pages on are skipped.
    body, skipped = AlertmanagerPusher("http://am:9093").payload([XID, INFO], [], now=1_700_000_100.0)
    assert skipped == 1
    (alert,) = body
    assert alert["labels"] == {
        "alertname": "KvpilotGpuDrainRequired",
        "severity": "critical",
        "kind": "stuck_gpu",
        "node": "gpu-7",
        "gpu": "GPU-1",
    }
    assert "GPU-1 on node gpu-7" in alert["annotations"]["description"]
    assert alert["annotations"]["runbook_url"].endswith("/KvpilotGpuDrainRequired.md")
    assert alert["endsAt"] > alert["startsAt"]


def test_bad_url_is_refused_by_name():
    # A URL without a scheme names itself.
    with pytest.raises(ValueError, match="am:9093"):
        AlertmanagerPusher("am:9093")


@pytest.mark.integration
def test_push_is_delivered_by_a_real_alertmanager(tmp_path):
    # Pushed through the v2 API, the alert is routed and delivered to the webhook like a rule's alert.
    with run_webhook() as hook, run_alertmanager(tmp_path, webhook_url=hook.url) as am:
        # Alertmanager judges endsAt against its own wall clock: push a finding that is open now.
        now = time.time()
        live = dataclasses.replace(XID, since=now - 60)
        result = AlertmanagerPusher(am.url).push([live, INFO], now=now)
        assert (result.sent, result.skipped) == (1, 1)
        alert = hook.wait_for("KvpilotGpuDrainRequired", timeout_s=30)
        assert alert["labels"]["node"] == "gpu-7"
        assert alert["annotations"]["runbook_url"].endswith("/KvpilotGpuDrainRequired.md")
