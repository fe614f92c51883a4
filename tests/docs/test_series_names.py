"""Every Prometheus series the pages, dashboards and rules name is one that something exports: kvpilot's own
`/metrics` (api/series.py, the PromQL source's gauges), `kvpilot gpu-agent`'s page, a recording rule, or an engine or
dcgm-exporter family an adapter reads (../shared/ENGINES.md, `collector.adapt.WANTED_FAMILIES`). A renamed series
cannot leave a runbook, a dashboard panel or an alert querying a name nothing exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import yaml

from api.series import ALL
from collector.adapt import WANTED_FAMILIES
from collector.discovery.promql import _SourceMetrics
from collector.gpus.nvml_page import FAMILIES as NVML_PAGE
from collector.promql.expressions import PART_LABEL, SIGNAL_LABEL
from kvpilot.runtime.arrivals import TIME_LABEL

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
RULE_FILES = [REPO / "alerts" / "kvpilot-rules.yaml", REPO / "alerts" / "kvpilot-recording-rules.yaml"]
RULES = [r for f in RULE_FILES for g in yaml.safe_load(f.read_text())["groups"] for r in g["rules"]]
RECORDED = {r["record"] for r in RULES if "record" in r}
_SOURCE = SimpleNamespace(
    mode="aggregates", rules_in_use=True, deployments_read=1, last_answer_bytes=0, asked_offset_s=0.0
)
EXPORTED = (
    {s.name for s in ALL} | {m.name for m in _SourceMetrics(_SOURCE).collect()} | {f.name for f in NVML_PAGE} | RECORDED
)
# `kvpilot_…` words the pages write that are not series, and what they are.
NOT_SERIES = {
    SIGNAL_LABEL: "the label the PromQL source's queries tag each signal with",
    PART_LABEL: "the label that tags a query's parts",
    "kvpilot_config": "the key `kvpilot backtest --json` prints its configuration under",
    TIME_LABEL: "the label that tags the sample times collector.arrivals asks beside the gateway's counter",
}
_SUFFIX = re.compile(r"_(bucket|count|sum|total|created)$")


def _exported(name: str, also: frozenset[str] = frozenset()) -> bool:
    known = EXPORTED | also
    return name in known or _SUFFIX.sub("", name) in known


def _expand(text: str) -> str:
    """`kvpilot_cost_{usd_per_hour,power_watts}` and `kvpilot_forecast_arrival_rate{,_upper}` as the names they stand
    for (braces after a whole name hold its labels: `kvpilot_decisions_total{deployment,reason}`)."""

    def names(m: re.Match[str]) -> str:
        return " ".join(m.group(1) + part for part in m.group(2).split(","))

    return re.sub(r"\b(kvpilot_\w*_|kvpilot_\w+(?=\{,))\{([\w,]+)\}", names, text)


def _named(text: str) -> set[str]:
    return {n for n in re.findall(r"(?<![\w:/.{-])kvpilot_\w+", _expand(text)) if not n.endswith("_")}


def test_the_check_catches_a_name_nothing_exports() -> None:
    assert _named("`kvpilot_desired_replicas{deployment}`, `kvpilot_cost_{usd_per_hour,power_watts}`") == {
        "kvpilot_desired_replicas",
        "kvpilot_cost_usd_per_hour",
        "kvpilot_cost_power_watts",
    }
    assert _named("`kvpilot_forecast_arrival_rate{,_upper}`") == {
        "kvpilot_forecast_arrival_rate",
        "kvpilot_forecast_arrival_rate_upper",
    }
    assert _exported("kvpilot_ttft_seconds_bucket")
    assert _exported("kvpilot_promql_answer_bytes")
    assert _exported("kvpilot_nvml_xid_events_total")
    assert not _exported("kvpilot_desired_replica")


def test_every_series_the_pages_name_is_exported() -> None:
    named = {(page, n) for page in PAGES for n in _named(page.read_text())}
    assert len(named) > 40  # the pattern finds the pages' names at all
    missing = sorted(f"{p.relative_to(REPO)}: {n}" for p, n in named if n not in NOT_SERIES and not _exported(n))
    assert not missing, "series nothing exports (renamed? add to NOT_SERIES if not a series):\n" + "\n".join(missing)


def _exprs() -> list[tuple[str, str]]:
    """(file, PromQL) of every panel of the committed dashboards and every committed rule."""
    found = []
    for path in sorted((REPO / "dashboards" / "json").glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            found += [(path.name, t["expr"]) for t in panel.get("targets", []) if "expr" in t]
    found += [(r.get("alert") or r["record"], r["expr"]) for r in RULES]
    return found


# Words of PromQL that are not series: functions, aggregations and their modifiers, keywords.
_PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or"}
_PROMQL_WORDS |= {"unless", "inf", "nan"}


def _series(expr: str) -> set[str]:
    """The series names an expression selects: identifiers not called as functions, outside label matchers,
    grouping clauses and strings."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values, label_replace's arguments)
    expr = re.sub(r"\{[^}]*\}", "{}", expr)  # label matchers
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range and subquery windows
    names = re.findall(r"(?<![\w:.])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()", expr)
    return {n for n in names if n.lower() not in _PROMQL_WORDS and not re.fullmatch(r"\d\w*", n)}


def test_the_series_reader_skips_labels_functions_and_windows() -> None:
    expr = 'sum by (deployment) (rate(kvpilot_ttft_seconds_bucket{job="kvpilot", le="+Inf"}[5m])) or vector(0)'
    assert _series(expr) == {"kvpilot_ttft_seconds_bucket"}
    expr = 'label_replace(up{job=~"x"} == 0, "kvpilot_part", "down", "", "") and on (pod) DCGM_FI_DEV_FB_USED > 1'
    assert _series(expr) == {"up", "DCGM_FI_DEV_FB_USED"}


def test_every_series_a_dashboard_or_rule_reads_is_exported() -> None:
    exprs = _exprs()
    assert len(exprs) > 50  # the panels and rules were found at all
    # Prometheus' own `up` is the one series neither kvpilot nor an engine exports: the recording rules read it
    # for targets that stopped answering.
    engines = frozenset(WANTED_FAMILIES) | {"up"}
    missing = sorted({f"{f}: {n}" for f, e in exprs for n in _series(e) if not _exported(n, engines)})
    assert not missing, "series that neither kvpilot nor an adapted engine/exporter exports:\n" + "\n".join(missing)


def test_docs_api_md_lists_every_series_kvpilot_exports() -> None:
    # The other way round: a series added to api/series.py is listed where an operator looks for it (a family
    # written as `kvpilot_deployment_*` covers its members).
    text = _expand((REPO / "docs" / "api.md").read_text().split("## kvpilot's own series", 1)[1])
    listed = _named(text)
    families = re.findall(r"`(kvpilot_\w+_)\*`", text)
    missing = sorted(s.name for s in ALL if s.name not in listed and not s.name.startswith(tuple(families)))
    assert not missing, f'docs/api.md, "kvpilot\'s own series", does not list {missing}'
