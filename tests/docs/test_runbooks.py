"""docs/runbooks/ and the alert rules are one set: a runbook per alert and an alert per runbook, each titled with its
alert's name and severity, opening on the finding the alert pages on, and naming only thresholds that exist
(`KvThresholds.near_full`). tests/integration/test_alerts_rules.py checks each alert's own fields."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

import detectors.thresholds
from alerts import rules

REPO = Path(__file__).resolve().parents[2]
RUNBOOKS = {p.stem: p for p in sorted((REPO / "docs" / "runbooks").glob("*.md"))}
ALERTS = {a.name: a for a in rules.alerts()}


def test_a_runbook_for_every_alert_and_an_alert_for_every_runbook() -> None:
    assert set(RUNBOOKS) == set(ALERTS)
    for alert in ALERTS.values():
        assert alert.runbook_url.endswith(f"/docs/runbooks/{alert.name}.md")


def test_the_docs_index_lists_every_runbook() -> None:
    index = (REPO / "docs" / "README.md").read_text()
    missing = [name for name in RUNBOOKS if f"(runbooks/{name}.md)" not in index]
    assert not missing, f"docs/README.md does not link {missing}"


def _unknown_thresholds(text: str) -> list[str]:
    unknown = []
    for cls, attr in re.findall(r"`([A-Z]\w+)\.(\w+)`", text):
        klass = getattr(detectors.thresholds, cls, None)
        if not (dataclasses.is_dataclass(klass) and attr in {f.name for f in dataclasses.fields(klass)}):
            unknown.append(f"{cls}.{attr}")
    return unknown


def test_the_threshold_check_catches_a_renamed_one() -> None:
    assert _unknown_thresholds("`KvThresholds.near_full`, `KvThresholds.nearly_full`, `NoThresholds.x`") == [
        "KvThresholds.nearly_full",
        "NoThresholds.x",
    ]


@pytest.mark.parametrize("name", sorted(RUNBOOKS))
def test_each_runbook_is_its_alerts(name: str) -> None:
    text = RUNBOOKS[name].read_text()
    alert = ALERTS[name]
    assert text.startswith(f"# {name} ({alert.severity})\n"), "the title names the alert and its severity"
    first_paragraph = text.split("\n\n", 2)[1]
    if alert.finding is not None:
        kind, _ = alert.finding
        assert f"`{kind}`" in first_paragraph, f"the runbook opens on the finding the alert pages on: `{kind}`"
    else:
        assert f"`{alert.series}`" in first_paragraph, f"the runbook opens on the series it reads: `{alert.series}`"
    assert not _unknown_thresholds(text), "thresholds detectors/thresholds.py does not have"


def _wrong_settings(text: str) -> list[str]:
    """Settings a runbook names (`detectors.kv.near_full`) that detectors.thresholds.DEFAULT does not have, and
    defaults it states (`detectors.kv.near_full`, default 0.9) that are not the field's default."""
    wrong = []
    named = r"`detectors\.(\w+)\.(\w+)`(?:,? (?:default )?([0-9]+(?:\.[0-9]+)?))?"
    for section, attr, stated in re.findall(named, text):
        group = getattr(detectors.thresholds.DEFAULT, section, None)
        if not (dataclasses.is_dataclass(group) and attr in {f.name for f in dataclasses.fields(group)}):
            wrong.append(f"detectors.{section}.{attr}")
        elif stated and float(stated) != getattr(group, attr):
            wrong.append(f"detectors.{section}.{attr}: {stated} is not its default {getattr(group, attr)}")
    return wrong


def test_the_settings_check_catches_a_wrong_name_or_default() -> None:
    text = "`detectors.kv.near_full`, default 0.9; `detectors.kv.nearly_full`; `detectors.gpu.busy_utilisation`, 0.5"
    assert _wrong_settings(text) == [
        "detectors.kv.nearly_full",
        "detectors.gpu.busy_utilisation: 0.5 is not its default 0.95",
    ]


@pytest.mark.parametrize("name", sorted(RUNBOOKS))
def test_each_runbook_names_settings_an_operator_can_set(name: str) -> None:
    # an SRE cannot set `KvThresholds.near_full`; the runbooks name the setting and its default beside it
    assert not _wrong_settings(RUNBOOKS[name].read_text())
