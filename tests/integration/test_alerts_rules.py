"""The generated alert rules: complete, in step with the detectors' thresholds, and valid for real promtool."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from alerts import rules
from detectors.thresholds import DEFAULT, HysteresisPolicy, KvThresholds, Thresholds

REPO = Path(__file__).resolve().parents[2]


def test_committed_files_are_what_the_code_generates():
    # A threshold changed in code without `make generate` leaves a stale committed rule file.
    for rel, content in rules.generate().items():
        assert (REPO / rel).read_text() == content, f"{rel} is stale: run `make generate`"


@pytest.mark.parametrize("alert", rules.alerts(), ids=lambda a: a.name)
def test_every_alert_is_complete_and_has_a_runbook(alert):
    # Each alert carries summary, description, runbook_url, a severity and a `for`, and its runbook exists.
    assert alert.summary
    assert alert.description
    assert alert.severity in ("critical", "warning")
    assert alert.for_s > 0
    assert (REPO / "docs" / "runbooks" / f"{alert.name}.md").is_file()


def test_thresholds_flow_into_the_rules():
    # The same constants drive the alert: change the detector's threshold and the expression and `for` follow.
    th = Thresholds(
        kv=KvThresholds(warn_time_to_exhaustion_s=240.0), tick_s=10.0, hysteresis={"kv_exhaustion": HysteresisPolicy(4)}
    )
    (imminent,) = [a for a in rules.alerts(th) if a.name == "KvpilotKvCacheExhaustionImminent"]
    assert "within 240 s" in imminent.description
    assert imminent.for_s == 40.0
    # It pages on the finding (projection and a pool still filling), never on the raw projection alone.
    selected = 'kvpilot_finding_active{job="kvpilot",kind="kv_exhaustion",severity="warning"}'
    assert imminent.expr == f"max without (instance, pod) ({selected}) > 0"  # once for every kvpilot pod's copy
    assert rules.alert_for_finding("kv_exhaustion", "warning", th) == imminent
    default = {r["alert"]: r for r in rules.rule_groups(DEFAULT)["groups"][0]["rules"]}  # type: ignore[index]
    assert default["KvpilotKvCacheExhaustionImminent"]["for"] == "10s"


@pytest.mark.parametrize(
    ("kv", "says", "never_says"),
    [
        # The default: the demand rule warns with no usage projection yet, so the page says both rules and that
        # the summary may carry no time to exhaustion, not "projected full within 180 s" alone.
        (KvThresholds(), ["still rising, reaches 80% of what the ready replicas serve", "full within 180 s",
                          "projects none yet", "No preemptions measured yet"], ["Little's law"]),
        # Little's law in place of the demand rule (the runbook's option): that rule named, the demand's not.
        (KvThresholds(demand_load=None, projected_usage=0.6), ["hold 60% of the pool or more (Little's law)",
                                                               "full within 180 s"], ["ready replicas serve"]),
        # The demand rule without its rise gate: not "still rising".
        (KvThresholds(demand_min_rise=None), ["demand reaches 80%"], ["still rising"]),
    ],
)  # fmt: skip
def test_the_kv_warning_says_every_rule_that_opens_it(kv, says, never_says):
    (imminent,) = [a for a in rules.alerts(Thresholds(kv=kv)) if a.name == "KvpilotKvCacheExhaustionImminent"]
    for text in says:
        assert text in imminent.description
    for text in never_says:
        assert text not in imminent.description


@pytest.mark.integration
def test_promtool_check_and_test_rules(tmp_path):
    # Real promtool: the rules parse; every alert is silent before `for`, fires after, stays silent when healthy.
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not installed: run `make system-deps`")
    for rel, content in rules.generate().items():
        (tmp_path / Path(rel).name).write_text(content)
    check = subprocess.run(
        [promtool, "check", "rules", str(tmp_path / "kvpilot-rules.yaml")], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"{len(rules.alerts())} rules found" in check.stdout
    test = subprocess.run(
        [promtool, "test", "rules", str(tmp_path / "kvpilot-rules.test.yaml")], capture_output=True, text=True
    )
    assert test.returncode == 0, test.stdout + test.stderr


@pytest.mark.integration
def test_promtool_catches_a_wrong_for(tmp_path):
    # The promtool cases can fail: rules whose `for` is shorter than the tests expect are caught.
    docs = rules.generate()
    broken = yaml.safe_load(docs[rules.RULES_PATH])
    broken["groups"][0]["rules"][0]["for"] = "0s"
    (tmp_path / "kvpilot-rules.yaml").write_text(yaml.safe_dump(broken))
    (tmp_path / "kvpilot-rules.test.yaml").write_text(docs[rules.TESTS_PATH])
    test = subprocess.run(
        ["promtool", "test", "rules", str(tmp_path / "kvpilot-rules.test.yaml")], capture_output=True, text=True
    )
    assert test.returncode != 0


@pytest.mark.parametrize("alert", rules.alerts(), ids=lambda a: a.name)
def test_alerts_use_the_labels_the_exporter_exports(alert):
    # The promtool cases use exactly the series and labels api/series.py declares, so they test what is exported.
    from api import series

    declared = {s.name: set(s.labels) for s in series.ALL}
    assert alert.series in declared
    assert set(alert.labels) <= declared[alert.series]
