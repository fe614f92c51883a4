"""A small builder for Grafana dashboards (schema 39, Grafana 10/11).

Why our own and not grafana-foundation-sdk: we use a handful of panel types, we want every query reachable as plain
data (the tests run each one against a real Prometheus), and a 60-line builder is easier to review than a
generated SDK whose versions move with Grafana's. Output is deterministic (stable ids, sorted keys) so the committed
JSON can be compared byte for byte with what the code generates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from dashboards.mixin import CONFIG

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"  # timeseries | stat | table | bargauge
    width: int = 12
    height: int = 8
    min: float | None = None
    max: float | None = None
    thresholds: tuple[tuple[float, str], ...] = ()  # (value, colour) steps above the base green

    def to_json(self, panel_id: int, x: int, y: int) -> dict[str, Any]:
        steps: list[dict[str, Any]] = [{"color": "green", "value": None}]
        steps += [{"color": colour, "value": value} for value, colour in self.thresholds]
        defaults: dict[str, Any] = {"unit": self.unit, "thresholds": {"mode": "absolute", "steps": steps}}
        if self.min is not None:
            defaults["min"] = self.min
        if self.max is not None:
            defaults["max"] = self.max
        targets = [
            {
                "datasource": DATASOURCE,
                "expr": q.expr,
                "legendFormat": q.legend or "__auto",
                "instant": q.instant or self.kind in ("stat", "table", "bargauge"),
                "range": not (q.instant or self.kind in ("stat", "table", "bargauge")),
                "refId": chr(ord("A") + i),
            }
            for i, q in enumerate(self.queries)
        ]
        return {
            "id": panel_id,
            "type": self.kind,
            "title": self.title,
            "description": self.description,
            "datasource": DATASOURCE,
            "gridPos": {"h": self.height, "w": self.width, "x": x, "y": y},
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": _options(self.kind),
            "targets": targets,
        }


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Variable:
    name: str
    label: str
    query: str  # label_values(...) for a query variable
    multi: bool = True
    include_all: bool = True


@dataclass
class Dashboard:
    uid: str
    title: str
    description: str
    rows: list[Row]
    variables: list[Variable] = field(default_factory=list)
    tags: tuple[str, ...] = CONFIG.dashboard_tags
    refresh: str = CONFIG.dashboard_refresh

    def panels(self) -> list[Panel]:
        return [p for row in self.rows for p in row.panels]

    def to_json(self) -> dict[str, Any]:
        panels: list[dict[str, Any]] = []
        next_id, y = 1, 0
        for row in self.rows:
            panels.append(
                {
                    "id": next_id,
                    "type": "row",
                    "title": row.title,
                    "collapsed": False,
                    "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                    "panels": [],
                }
            )
            next_id, y, x, row_h = next_id + 1, y + 1, 0, 0
            for panel in row.panels:
                if x + panel.width > 24:
                    x, y, row_h = 0, y + row_h, 0
                panels.append(panel.to_json(next_id, x, y))
                next_id, x, row_h = next_id + 1, x + panel.width, max(row_h, panel.height)
            y += row_h
        templating = [
            {
                "name": "datasource",
                "label": "Data source",
                "type": "datasource",
                "query": "prometheus",
                "current": {},
                "hide": 0,
            }
        ] + [
            {
                "name": v.name,
                "label": v.label,
                "type": "query",
                "datasource": DATASOURCE,
                "query": {"query": v.query, "refId": f"var-{v.name}"},
                "definition": v.query,
                "refresh": 2,
                "multi": v.multi,
                "includeAll": v.include_all,
                "allValue": ".*",
                "current": {},
                "sort": 1,
                "hide": 0,
            }
            for v in self.variables
        ]
        return {
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": list(self.tags),
            "timezone": "browser",
            "editable": True,
            "graphTooltip": 1,
            "refresh": self.refresh,
            "schemaVersion": 39,
            "time": {"from": "now-1h", "to": "now"},
            "templating": {"list": templating},
            "annotations": {"list": []},
            "panels": panels,
        }

    def render(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"


def _options(kind: str) -> dict[str, Any]:
    if kind == "timeseries":
        return {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]}}
    if kind == "stat":
        return {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}, "colorMode": "value"}
    if kind == "bargauge":
        return {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}, "orientation": "horizontal"}
    if kind == "table":
        return {"showHeader": True}
    raise ValueError(f"unknown panel kind {kind!r}")
