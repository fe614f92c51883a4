"""Alerts and dashboards are built from one mixin config (dashboards/mixin.py): a change there reaches both."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from alerts import rules
from dashboards.definitions import DASHBOARDS
from dashboards.mixin import CONFIG, MixinConfig, series

OTHER = MixinConfig(job="kvpilot-eu", rate_window="10m", runbook_base="https://runbooks.example/kvpilot")
_SERIES = re.compile(r"\bkvpilot_[a-z0-9_]+")


def _dashboard_exprs(c: MixinConfig) -> list[str]:
    out: list[str] = []
    for build in DASHBOARDS.values():
        board = build(c)
        out += [v.query for v in board.variables]
        out += [q.expr for p in board.panels() for q in p.queries]
    return out


def _alert_exprs(c: MixinConfig) -> list[str]:
    return [a.expr for a in rules.alerts(c=c)]


@pytest.mark.parametrize("exprs", [_dashboard_exprs, _alert_exprs], ids=["dashboards", "alerts"])
def test_every_kvpilot_series_is_selected_with_the_configured_job(exprs: Callable[[MixinConfig], list[str]]) -> None:
    # Each kvpilot series in a query is followed by the job selector: none is written out by hand without it, and
    # the job comes from the config (a second config gives a second job everywhere, the default's nowhere).
    for c in (CONFIG, OTHER):
        for expr in exprs(c):
            for m in _SERIES.finditer(expr):
                assert expr[m.end() :].startswith(f'{{job="{c.job}"'), f"{m.group()} in {expr!r} lacks {c.job_selector}"
    assert not any('job="kvpilot"' in e for e in exprs(OTHER))


def test_rate_window_and_runbooks_come_from_the_config() -> None:
    assert any("[10m]" in e for e in _dashboard_exprs(OTHER))
    assert not any("[5m]" in e for e in _dashboard_exprs(OTHER))
    assert all(a.runbook_url.startswith("https://runbooks.example/kvpilot/") for a in rules.alerts(c=OTHER))
    # ... and the promtool cases scrape kvpilot under the configured job, so they test the rules as configured
    case = rules.rule_tests(c=OTHER)["tests"][0]  # type: ignore[index]
    assert 'job="kvpilot-eu"' in case["input_series"][0]["series"]


def test_finding_alerts_share_one_shape() -> None:
    # Every alert on a finding fires on kvpilot_finding_active{kind, severity} after the detector's own wait, and
    # its promtool series carries exactly the labels the exporter declares for findings.
    on_findings = [a for a in rules.alerts() if a.finding is not None]
    assert len(on_findings) >= 6
    for a in on_findings:
        kind, severity = a.finding  # type: ignore[misc]
        selected = f'kvpilot_finding_active{{job="kvpilot",kind="{kind}",severity="{severity}"}}'
        assert a.expr == f"max without (instance, pod) ({selected}) > 0"  # one alert for every kvpilot pod's copy
        assert a.for_s == CONFIG.thresholds.for_seconds(kind)
        assert a.severity == severity
        assert tuple(a.labels) == series.FINDING_ACTIVE.labels
        assert (a.labels["kind"], a.labels["severity"]) == (kind, severity)


def test_select_refuses_a_suffix_on_a_gauge() -> None:
    assert (
        CONFIG.select(series.LOOP_TICK_SECONDS, suffix="_bucket") == 'kvpilot_loop_tick_seconds_bucket{job="kvpilot"}'
    )
    with pytest.raises(ValueError, match="gauge"):
        CONFIG.select(series.DESIRED_REPLICAS, suffix="_bucket")


def test_dashboard_tags_and_refresh_come_from_the_config() -> None:
    c = MixinConfig(dashboard_tags=("kvpilot", "llm"), dashboard_refresh="1m")
    for build in DASHBOARDS.values():
        doc = build(c).to_json()
        assert (doc["tags"], doc["refresh"]) == (["kvpilot", "llm"], "1m")
