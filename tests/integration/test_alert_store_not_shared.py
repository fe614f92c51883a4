"""KvpilotStoreNotShared with real promtool, on the cases the generated ones (every pod's copy alike) do not cover:
it counts kvpilot's pods on SQLite, so one pod (deploy/base's default), a pod beside one on PostgreSQL, and a
rolling update's second pod for a few minutes are silent; two pods on SQLite for 15 minutes fire once, for the job."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from alerts import rules

pytestmark = pytest.mark.integration

NAME = "KvpilotStoreNotShared"


def _pod(i: int, values: str) -> dict[str, str]:
    return {
        "series": f'kvpilot_store_sqlite{{job="kvpilot",instance="10.0.0.{i}:8080",pod="kvpilot-{i}"}}',
        "values": values,
    }


def _case(series: list[dict[str, str]], fires_at_20m: bool) -> dict[str, object]:
    alert = next(a for a in rules.alerts() if a.name == NAME)
    expected = {
        "exp_labels": {"job": "kvpilot", "severity": "warning"},
        "exp_annotations": {
            "summary": alert.summary,
            "description": alert.description,
            "runbook_url": alert.runbook_url,
        },
    }
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {"eval_time": "14m", "alertname": NAME, "exp_alerts": []},
            {"eval_time": "20m", "alertname": NAME, "exp_alerts": [expected] if fires_at_20m else []},
        ],
    }


def test_the_alert_counts_pods_on_sqlite(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not installed: run `make system-deps`")
    (tmp_path / "kvpilot-rules.yaml").write_text(rules.generate()[rules.RULES_PATH])
    cases = [
        _case([_pod(1, "1x30")], fires_at_20m=False),  # one replica on SQLite: right
        _case([_pod(1, "1x30"), _pod(2, "0x30")], fires_at_20m=False),  # a pod on PostgreSQL beside it
        _case([_pod(1, "1x30"), _pod(2, "_x5 1x3 _x22")], fires_at_20m=False),  # a surge pod for 3 minutes
        _case([_pod(1, "1x30"), _pod(2, "1x30")], fires_at_20m=True),  # two stores, one alert
        _case([_pod(1, "0x30"), _pod(2, "0x30"), _pod(3, "0x30")], fires_at_20m=False),  # PostgreSQL: silent
    ]
    doc = {"rule_files": ["kvpilot-rules.yaml"], "evaluation_interval": "1m", "tests": cases}
    (tmp_path / "cases.yaml").write_text(yaml.safe_dump(doc, sort_keys=False, width=1000))
    test = subprocess.run([promtool, "test", "rules", str(tmp_path / "cases.yaml")], capture_output=True, text=True)
    assert test.returncode == 0, test.stdout + test.stderr
