"""Every dashboard query is valid PromQL, as judged by the real `promtool`."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from dashboards.definitions import DASHBOARDS

pytestmark = pytest.mark.integration


def _exprs() -> list[str]:
    out = []
    for build in DASHBOARDS.values():
        for panel in build().panels():
            out += [q.expr for q in panel.queries]
    return out


def test_promtool_accepts_every_dashboard_query(tmp_path):
    # promtool validates expressions inside rule files; template variables become match-anything regexes.
    rules = [
        {"record": f"kvpilot:dashboard_query_{i}", "expr": expr.replace("$deployment", ".*").replace("$node", ".*")}
        for i, expr in enumerate(_exprs())
    ]
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout
