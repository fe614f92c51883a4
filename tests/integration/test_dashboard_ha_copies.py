"""The dashboards read one copy of each kvpilot series, however many kvpilot pods export it.

deploy/base runs two HA replicas, and each runs the whole loop and exports every series; the ServiceMonitor scrapes
both. A panel that summed them showed twice the fleet's cost, GPUs, findings and decisions, and every unsummed panel
drew each line twice. Here real promtool evaluates every fleet-level query over two pods' identical copies and over
one pod's: the answers must be the same series with the same values. The per-pod panels of "kvpilot itself" (each
process's own loop, store and connections) are left per pod.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from api import series as S  # noqa: N812  (the catalogue reads best as S.NAME)
from dashboards.definitions import DASHBOARDS
from dashboards.mixin import CONFIG

pytestmark = pytest.mark.integration

PODS = (("kvpilot-0:8080", "kvpilot-0"), ("kvpilot-1:8080", "kvpilot-1"))
SUBSTITUTIONS = {"$deployment": ".*", "$node": ".*"}  # Grafana's "All"
# Panels about one kvpilot process each (legend or meaning per pod), not about the fleet.
PER_POD = {
    ("kvpilot-self", "Scrape failures"),
    ("kvpilot-self", "Tick duration"),
    ("kvpilot-self", "Tick overruns"),
    ("kvpilot-self", "Store"),
    ("kvpilot-self", "Writes dropped and stage errors"),
    ("kvpilot-self", "Leader"),
    ("kvpilot-self", "API connections"),
    ("kvpilot-self", "API connections refused and timed out"),
}
_SELECTOR = re.compile(r"(kvpilot_[a-z_]+)\{([^}]*)\}")
_EQUAL = re.compile(r'([a-z_]+)="([^"]*)"')
_CATALOGUE = {s.name: s for s in S.ALL}


def _fleet_queries() -> list[tuple[str, str, str]]:
    out = []
    for name, build in DASHBOARDS.items():
        for panel in build().panels():
            if (name, panel.title) in PER_POD:
                continue
            for q in panel.queries:
                expr = q.expr
                for var, value in SUBSTITUTIONS.items():
                    expr = expr.replace(var, value)
                if CONFIG.job_selector in expr:
                    out.append((name, panel.title, expr))
    return out


def _input(queries: list[tuple[str, str, str]]) -> list[dict[str, str]]:
    """Every series a query selects, with the labels its equality matchers name (the others set), once per pod."""
    wanted: dict[str, dict[str, str]] = {}
    for _, _, expr in queries:
        for name, matchers in _SELECTOR.findall(expr):
            s = _CATALOGUE[name]
            labels = {label: f"{label}-1" for label in s.labels} | dict(_EQUAL.findall(matchers))
            key = name + repr(sorted(labels.items()))
            wanted[key] = {"__name__": name, **labels}
    out = []
    for labels in wanted.values():
        s = _CATALOGUE[labels["__name__"]]
        values = "0+3x60" if s.type == "counter" else "2x60"
        for instance, pod in PODS:
            text = ",".join(f'{k}="{v}"' for k, v in {**labels, "instance": instance, "pod": pod}.items())
            out.append({"series": "{" + text + "}", "values": values})
    return out


def _one_pod(expr: str) -> str:
    return expr.replace(CONFIG.job_selector, f'{CONFIG.job_selector},instance="{PODS[0][0]}"')


def test_every_fleet_panel_reads_one_copy_of_two_pods_series(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is installed by scripts/install-system-deps.sh"
    queries = _fleet_queries()
    assert len(queries) > 30
    checks: list[dict[str, Any]] = []
    for _, _, expr in queries:
        one = _one_pod(expr)
        assert one != expr
        checks += [
            {"expr": f"absent({one})", "eval_time": "10m", "exp_samples": []},  # the query reads something
            {"expr": f"({expr}) != ({one})", "eval_time": "10m", "exp_samples": []},  # the same values
            {"expr": f"count({expr}) != count({one})", "eval_time": "10m", "exp_samples": []},  # no line twice
        ]
    tests = {
        "rule_files": [],
        "evaluation_interval": "15s",
        "tests": [{"interval": "15s", "input_series": _input(queries), "promql_expr_test": checks}],
    }
    path = tmp_path / "ha-copies.test.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False, width=10_000))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
