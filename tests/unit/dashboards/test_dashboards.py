"""The generated dashboards are well-formed: every panel explains itself, has a unit, and fits the grid."""

from __future__ import annotations

import json
import re

import pytest

from api.series import ALL
from dashboards.definitions import DASHBOARDS
from dashboards.generate import files

BUILT = {name: build() for name, build in DASHBOARDS.items()}


@pytest.mark.parametrize("name", sorted(BUILT))
def test_every_panel_has_description_unit_and_query(name):
    for panel in BUILT[name].panels():
        assert panel.description.strip(), f"{name}: panel {panel.title!r} has no description"
        assert panel.unit, f"{name}: panel {panel.title!r} has no unit"
        assert panel.queries, f"{name}: panel {panel.title!r} has no query"


@pytest.mark.parametrize("name", sorted(BUILT))
def test_panels_fit_the_grid_without_overlap(name):
    doc = BUILT[name].to_json()
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for p in doc["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0, f"{p['title']} starts left of the grid"
        assert g["x"] + g["w"] <= 24, f"{p['title']} overflows the 24-column grid"
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps another panel at {(x, y)}"
                cells.add((x, y))


@pytest.mark.parametrize("name", sorted(BUILT))
def test_datasource_is_a_template_variable_used_by_every_query(name):
    doc = BUILT[name].to_json()
    names = [v["name"] for v in doc["templating"]["list"]]
    assert names[0] == "datasource"
    for p in doc["panels"]:
        for t in p.get("targets", []):
            assert t["datasource"]["uid"] == "${datasource}"


@pytest.mark.parametrize("name", sorted(BUILT))
def test_queries_only_use_declared_variables(name):
    doc = BUILT[name].to_json()
    declared = {v["name"] for v in doc["templating"]["list"]}
    for p in doc["panels"]:
        for t in p.get("targets", []):
            used = set(re.findall(r"\$(\w+)", t["expr"]))
            assert used <= declared, f"{p['title']}: {t['expr']} uses undeclared {used - declared}"


def test_generated_files_are_deterministic_json_and_configmaps():
    first, second = files(), files()
    assert first == second
    for path, content in first.items():
        if path.endswith(".json"):
            assert json.loads(content)["uid"].startswith("kvpilot-")
    configmaps = [p for p in first if p.startswith("deploy/base/dashboards/")]
    assert len(configmaps) == len(DASHBOARDS)


@pytest.mark.parametrize("name", sorted(BUILT))
def test_every_kvpilot_series_a_query_reads_is_in_the_catalogue(name):
    # The live test (tests/e2e/test_dashboards_live.py) cannot see a misspelt series in a query that falls back to
    # a constant (`... or vector(0)`, for panels that read 0 before their first event): this check can.
    known = {s.name for s in ALL}
    for panel in BUILT[name].panels():
        for q in panel.queries:
            for series in re.findall(r"\bkvpilot_[a-z0-9_]+", q.expr):
                base = re.sub(r"_(bucket|count|sum)$", "", series)
                assert series in known or base in known, f"{panel.title}: {series} is not in api/series.py"
