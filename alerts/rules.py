"""Prometheus alerting rules over kvpilot's own series, generated from the mixin config and the detectors' thresholds.

Selectors, thresholds and series names come from ``dashboards.mixin.CONFIG`` (the one config the dashboards read
too); the `for` of every alert and every numeric threshold from its ``thresholds`` (``detectors.thresholds``), so
the alert and the finding it pages on agree. All but five alerts page on an open finding and share one shape
(``_on_finding``); the two on scrape health read the per-target series (a target down; a target's pages read in
part, whose `for` is the mixin's ``rate_window``: a partial page keeps the increase above 0 for one window, so
only pages read in part again and again fire it), two read kvpilot's own API (connections refused at
`api.max_connections`: any refusal at all, kept for ``API_REFUSALS_FOR_S``; API changes refused at SQLite's writer
gate, in every window for ``WRITES_REFUSED_FOR_S``), and one counts kvpilot's pods on SQLite
(two or more each keep a store of their own, for ``STORE_NOT_SHARED_FOR_S``). ``generate()`` (registered in
``kvpilot.generate.GENERATORS``) writes the rule file and its ``promtool test rules`` cases: for every alert,
silent before `for` elapses, firing after, and silent on healthy input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import yaml

from dashboards.mixin import CONFIG, MixinConfig, series
from detectors.thresholds import Thresholds

RULES_PATH = "alerts/kvpilot-rules.yaml"
TESTS_PATH = "alerts/kvpilot-rules.test.yaml"
TEST_INTERVAL_S = 5
TEST_INSTANCE = "kvpilot:8080"  # the promtool cases' instance label (an alert about one kvpilot pod)
# Two HA replicas (deploy/base with `replicas: 2` on PostgreSQL), as Prometheus labels them: each exports every
# series, and an alert about the fleet fires once for both (the promtool cases give it both copies).
TEST_PODS = (("kvpilot-0:8080", "kvpilot-0"), ("kvpilot-1:8080", "kvpilot-1"))
# A refusal at api.max_connections (1000 open at once, where kvpilot's clients open tens) is never routine: one keeps
# the rate window's increase above 0 for the window, so it fires this long after and stays firing for the rest of it.
API_REFUSALS_FOR_S = 60.0
# API changes refused at SQLite's writer gate are backpressure a retry gets through (Retry-After): a burst of them is
# routine, refusals in every rate window for this long are changes arriving faster than one SQLite writer takes them.
WRITES_REFUSED_FOR_S = 900.0
# A targets file caught mid-write is read again at the next tick (an editor, a ConfigMap update): minutes of one that
# does not read are a file left broken, whose changes kvpilot does not see.
TARGETS_FILE_UNREAD_FOR_S = 600.0
# Two pods with SQLite for a rolling update's surge (a minute or two with one replica) are no split store; longer is.
STORE_NOT_SHARED_FOR_S = 900.0


@dataclass(frozen=True, slots=True)
class Alert:
    name: str
    expr: str
    for_s: float
    severity: str
    summary: str
    description: str
    # For the promtool cases: one series (metric{labels}) whose `bad` value fires and `good` value does not.
    series: str
    bad: float
    good: float
    labels: dict[str, str] = field(default_factory=dict)  # the series' labels, expected on the alert
    finding: tuple[str, str] | None = None  # (kind, severity) of the finding it pages on
    runbook_base: str = CONFIG.runbook_base
    counter: bool = False  # `series` is a counter: the promtool cases grow it by `bad` (or `good`) a step
    per_pod: bool = False  # about one kvpilot pod (its `instance` kept); else one alert for all pods' copies

    @property
    def runbook_url(self) -> str:
        return f"{self.runbook_base}/{self.name}.md"


# The pod (replica) and deployment a GPU serves, when kvpilot knows them (Finding.alert_labels): "GPU GPU-1 on
# gpu-node-7 (replica chat-0 of ml/chat)" says whose requests suffer, not only which card.
_WORKLOAD = "{{ if $labels.replica }} (replica {{ $labels.replica }} of {{ $labels.deployment }}){{ end }}"

# Example labels of the finding series in the promtool cases (the rest of FINDING_ACTIVE's labels are empty).
_ON_GPU = {"node": "gpu-node-7", "gpu": "GPU-1"}
_ON_GPU_OF_REPLICA = {"deployment": "ml/chat", "replica": "chat-0", **_ON_GPU}
_ON_DEPLOYMENT = {"deployment": "ml/chat"}
_ON_REPLICA = {"deployment": "ml/chat", "replica": "chat-0"}


def _on_finding(
    c: MixinConfig,
    th: Thresholds,
    name: str,
    kind: str,
    severity: str,
    *,
    summary: str,
    description: str,
    example: dict[str, str],
) -> Alert:
    """The shape of every finding alert: fires while kvpilot_finding_active{kind, severity} is 1, after the same
    number of ticks the detector waits before opening the finding; tested on a finding with ``example``'s labels."""
    labels = {"kind": kind, "severity": severity}
    selected = c.select(series.FINDING_ACTIVE, *(f'{k}="{v}"' for k, v in labels.items()))
    return Alert(
        name=name,
        expr=f"{c.one_copy(selected)} > 0",
        for_s=th.for_seconds(kind),
        severity=severity,
        summary=summary,
        description=description,
        series=series.FINDING_ACTIVE.name,
        bad=1,
        good=0,
        labels={k: labels.get(k, example.get(k, "")) for k in series.FINDING_ACTIVE.labels},
        finding=(kind, severity),
        runbook_base=c.runbook_base,
    )


def _imminent_description(th: Thresholds) -> str:
    """What opens a KV warning, every rule that is on: the usage trend always; the planner's demand against what the
    ready replicas serve (the default) and the Little's-law projection where their settings are set. A warning from
    the demand alone comes with no time to exhaustion yet, and the description must not promise one."""
    kv = th.kv
    rules = []
    if kv.demand_load is not None:
        still_rising = "" if kv.demand_min_rise is None else ", still rising,"
        rules.append(
            f"the planner's forecast demand{still_rising} reaches {kv.demand_load:.0%} of what the ready replicas "
            f"serve on a pool that peaked at {kv.demand_min_usage:.0%} or more within the minute"
        )
    if kv.projected_usage is not None:
        rules.append(
            f"the forecast arrivals would hold {kv.projected_usage:.0%} of the pool or more (Little's law) on a pool "
            f"that peaked at {kv.projected_min_usage:.0%} or more"
        )
    rules.append(
        f"its usage trend projects it full within {kv.warn_time_to_exhaustion_s:g} s "
        "(kvpilot_kv_time_to_exhaustion_seconds) while requests arrive faster than they finish or wait for blocks"
    )
    return (
        "The KV cache of replica {{ $labels.replica }} is filling towards exhaustion: "
        + ", or ".join(rules)
        + ". No preemptions measured yet; once full, vLLM preempts running requests and new ones queue. The "
        "finding's summary (kvpilot's API: GET /v1/findings?kind=kv_exhaustion) gives the projected time to "
        "exhaustion, or says the usage trend projects none yet. A warning can open less than a minute ahead, too "
        "late for a new replica's cold start but not for shedding load: scale out, and shed load if the pool fills "
        "first."
    )


def alerts(th: Thresholds | None = None, c: MixinConfig = CONFIG) -> list[Alert]:
    """Every alert, in the order they appear in the rule file (``th``: the detectors' thresholds, by default the
    config's)."""
    th = c.thresholds if th is None else th
    return [
        _on_finding(
            c,
            th,
            "KvpilotGpuDrainRequired",
            "stuck_gpu",
            "critical",
            summary=f"GPU {{{{ $labels.gpu }}}} on {{{{ $labels.node }}}}{_WORKLOAD} needs its node drained",
            description=(
                "kvpilot flagged GPU {{ $labels.gpu }} on node {{ $labels.node }} as stuck: a drain-class XID, "
                "a hang (pinned busy with no token progress) or a GPU gone from its exporter. Cordon and drain the "
                "node, then reset the GPU."
            ),
            example=_ON_GPU_OF_REPLICA,
        ),
        _on_finding(
            c,
            th,
            "KvpilotGpuDegraded",
            "stuck_gpu",
            "warning",
            summary=f"GPU {{{{ $labels.gpu }}}} on {{{{ $labels.node }}}}{_WORKLOAD} is degraded",
            description=(
                "kvpilot flagged GPU {{ $labels.gpu }} on node {{ $labels.node }}: a watch-class XID, an idle GPU "
                "while requests run, or an XID outside the triage table. Schedule a reset at the next idle window."
            ),
            example=_ON_GPU,
        ),
        _on_finding(
            c,
            th,
            "KvpilotKvCacheExhaustionImminent",
            "kv_exhaustion",
            "warning",
            # The finding, not the raw projection: a projection alone warns on every ramp that is about to level
            # off; the finding also needs the pool to be still filling (requests arriving faster than they finish,
            # or waiting for blocks), which is what keeps plateaus quiet (bench/detectors.py, BENCHMARKS.md).
            summary="KV cache of {{ $labels.replica }} ({{ $labels.deployment }}) projected full soon",
            description=_imminent_description(th),
            example=_ON_REPLICA,
        ),
        _on_finding(
            c,
            th,
            "KvpilotKvCacheExhausted",
            "kv_exhaustion",
            "critical",
            summary="KV cache of {{ $labels.replica }} ({{ $labels.deployment }}) is exhausted",
            description=(
                "Replica {{ $labels.replica }} is preempting requests with its KV cache at or above "
                f"{th.kv.near_full:.0%} within the last minute, or is at or above {th.kv.near_full:.0%} with "
                "requests waiting for blocks, or is projected full within "
                f"{th.kv.critical_time_to_exhaustion_s:g} s with requests waiting. Latency is already suffering: "
                "scale out now. The finding's summary (kvpilot's API: GET /v1/findings?kind=kv_exhaustion) gives "
                "the measured preemption rate and the projected time to exhaustion."
            ),
            example=_ON_REPLICA,
        ),
        _on_finding(
            c,
            th,
            "KvpilotKvTransferStall",
            "kv_transfer_stall",
            "warning",
            summary="KV from the prefill pool is not reaching {{ $labels.deployment }}",
            description=(
                "The decode pool {{ $labels.deployment }} takes in under half of the requests its prefill pool "
                "finished over the rate window: their KV is stuck between the pools and their clients wait for a "
                "first token. Check the KV-transfer link (NIXL/UCX) and the decode workers' connector."
            ),
            example=_ON_DEPLOYMENT,
        ),
        _on_finding(
            c,
            th,
            "KvpilotPrefixCacheMiss",
            "prefix_cache_miss",
            "warning",
            summary="Prefix-cache hit ratio of {{ $labels.deployment }} collapsed: routing spreads shared prefixes",
            description=(
                "The prefix-cache hit ratio of {{ $labels.deployment }} fell by more than "
                f"{th.prefix.relative_drop:.0%} against its own baseline on all replicas together"
                + (
                    ""
                    if th.prefix.lost_affinity_drop is None
                    else f" (by more than {th.prefix.lost_affinity_drop:.0%} where the replicas' ratios also became "
                    "alike: the router no longer keeps prefixes together)"
                )
                + ", while shared prefixes remain. Use prefix-aware or sticky routing."
            ),
            example=_ON_DEPLOYMENT,
        ),
        _on_finding(
            c,
            th,
            "KvpilotTtftErrorBudgetBurn",
            "ttft_slo_burn",
            "critical",
            summary="{{ $labels.deployment }} burns its TTFT error budget fast",
            description=(
                f"Both the long and the short window of {{{{ $labels.deployment }}}} burn the TTFT error budget "
                f"({th.ttft.objective:.1%} of requests within {th.ttft.target_s:g} s) faster than "
                f"{th.ttft.windows[0].factor:g}x. Users feel it now."
            ),
            example=_ON_DEPLOYMENT,
        ),
        _on_finding(
            c,
            th,
            "KvpilotTtftErrorBudgetBurnSlow",
            "ttft_slo_burn",
            "warning",
            summary="{{ $labels.deployment }} burns its TTFT error budget",
            description=(
                "{{ $labels.deployment }} burns its TTFT error budget steadily (a slower window pair). "
                "Look at capacity before the budget is gone."
            ),
            example=_ON_DEPLOYMENT,
        ),
        _on_finding(
            c,
            th,
            "KvpilotRolloutRisky",
            "rollout",
            "warning",
            summary="Rollout of {{ $labels.deployment }} is too wide or burning TTFT",
            description=(
                "Deployment {{ $labels.deployment }} serves two versions at once (a rollout) and either more than "
                f"{th.rollout.max_replaced_fraction:.0%} of its replicas are not ready at once, or TTFT burns its "
                f"error budget faster than {th.rollout.burn_factor:g}x over {th.rollout.ttft_window_s:g} s. Slow "
                "the rollout (smaller waves) or surge replicas ahead of each wave."
            ),
            example=_ON_DEPLOYMENT,
        ),
        _on_finding(
            c,
            th,
            "KvpilotRolloutHurtingUsers",
            "rollout",
            "critical",
            summary="Rollout of {{ $labels.deployment }} is hurting users",
            description=(
                "Deployment {{ $labels.deployment }} is rolling out with more than "
                f"{th.rollout.max_replaced_fraction:.0%} of its replicas not ready at once while TTFT burns its "
                f"error budget faster than {th.rollout.burn_factor:g}x. Pause the rollout, or add capacity now."
            ),
            example=_ON_DEPLOYMENT,
        ),
        Alert(
            name="KvpilotScrapeTargetDown",
            # min: a target any kvpilot pod cannot scrape (that pod's detectors are blind to it), said once
            expr=f"{c.one_copy(c.select(series.SCRAPE_UP), 'min')} == 0",
            for_s=th.target.down_after_s,
            severity="warning",
            summary="kvpilot cannot scrape {{ $labels.target }}",
            description=(
                "kvpilot has failed to scrape {{ $labels.target }} for "
                f"{th.target.down_after_s:g} s: the detectors are blind to it."
            ),
            series=series.SCRAPE_UP.name,
            bad=0,
            good=1,
            labels={"target": "http://10.0.0.7:8000/metrics"},
            runbook_base=c.runbook_base,
        ),
        Alert(
            # Pages that keep arriving in part for a whole window; a one-off garbled page is over before `for`.
            name="KvpilotScrapeTargetPartial",
            expr=f"{c.one_copy(f'increase({c.select(series.SCRAPE_PARTIAL_PAGES)}[{c.rate_window}])')} > 0",
            for_s=_window_s(c.rate_window),
            severity="warning",
            summary="kvpilot reads only part of {{ $labels.target }}'s page",
            description=(
                f"For {c.rate_window}, pages of {{{{ $labels.target }}}} have kept losing a family to a bad sample "
                "line: kvpilot reads the rest and the target stays up, but the signals that family carries are "
                "unknown. /v1/targets' last_error names the family and the line."
            ),
            series=series.SCRAPE_PARTIAL_PAGES.name,
            bad=1,
            good=0,
            labels={"target": "http://10.0.0.7:8000/metrics"},
            runbook_base=c.runbook_base,
            counter=True,
        ),
        Alert(
            name="KvpilotApiConnectionsRefused",
            expr=f"increase({c.select(series.API_CONNECTIONS_REFUSED)}[{c.rate_window}]) > 0",
            for_s=API_REFUSALS_FOR_S,
            severity="warning",
            summary="kvpilot {{ $labels.instance }} refuses HTTP connections: api.max_connections are open",
            description=(
                f"Within {c.rate_window}, kvpilot {{{{ $labels.instance }}}} has answered new HTTP connections 503 "
                "and closed them, because api.max_connections were already open. The refused may be Prometheus' "
                "scrapes of /metrics, KEDA's metrics-api trigger or the kubelet's probes as well as whoever holds "
                "the connections: kvpilot_api_connections_open shows how many are open."
            ),
            series=series.API_CONNECTIONS_REFUSED.name,
            bad=1,
            good=0,
            runbook_base=c.runbook_base,
            counter=True,
            per_pod=True,
        ),
        Alert(
            name="KvpilotApiWritesRefused",
            expr=f"increase({c.select(series.API_WRITES_REFUSED)}[{c.rate_window}]) > 0",
            for_s=WRITES_REFUSED_FOR_S,
            severity="warning",
            summary="kvpilot {{ $labels.instance }} keeps refusing API changes: SQLite's one writer cannot keep up",
            description=(
                f"In every {c.rate_window} for {WRITES_REFUSED_FOR_S / 60:g} minutes, kvpilot "
                "{{ $labels.instance }} has answered API changes 503 with Retry-After before they reached its "
                "SQLite store (reason {{ $labels.reason }}): changes arrive faster than its one writer takes "
                "them. Nothing of a refused change is applied; the loop's own writes go first and are not refused."
            ),
            series=series.API_WRITES_REFUSED.name,
            bad=1,
            good=0,
            labels={"reason": "pace"},
            runbook_base=c.runbook_base,
            counter=True,
            per_pod=True,
        ),
        Alert(
            name="KvpilotTargetsFileUnread",
            expr=f"{c.select(series.TARGETS_FILE_UNREAD)} == 1",
            for_s=TARGETS_FILE_UNREAD_FOR_S,
            severity="warning",
            summary="kvpilot {{ $labels.instance }} cannot read its targets file: it scrapes an earlier list",
            description=(
                f"For {TARGETS_FILE_UNREAD_FOR_S / 60:g} minutes the targets file of kvpilot "
                "{{ $labels.instance }} (collector.discovery.static_file) has been empty, unparsable or no regular "
                "file. kvpilot keeps scraping the targets it last read; targets added or removed since are not seen. "
                "Its log says why "
                '("keeping the previous N targets: ...").'
            ),
            series=series.TARGETS_FILE_UNREAD.name,
            bad=1,
            good=0,
            runbook_base=c.runbook_base,
            per_pod=True,
        ),
        Alert(
            name="KvpilotStoreNotShared",
            expr=f"{c.one_copy(c.select(series.STORE_SQLITE) + ' == 1', 'count')} > 1",
            for_s=STORE_NOT_SHARED_FOR_S,
            severity="warning",
            summary="kvpilot's pods each keep their own SQLite store",
            description=(
                "Two or more kvpilot pods of one job run with SQLite (no KVPILOT_DATABASE_URL), each store a file "
                "of its own pod: only the Lease holder's has the findings and drains, the others answer "
                "/v1/findings and /v1/drains 503, and a failover starts from a store without them. Give every "
                "replica one PostgreSQL (KVPILOT_DATABASE_URL in the Secret), or run one replica."
            ),
            series=series.STORE_SQLITE.name,
            bad=1,
            good=0,
            runbook_base=c.runbook_base,
        ),
    ]


_WINDOW = re.compile(r"(\d+)([smh])")


def _window_s(window: str) -> float:
    """A PromQL duration such as ``5m`` in seconds (the forms the mixin's ``rate_window`` takes)."""
    m = _WINDOW.fullmatch(window)
    if m is None:
        raise ValueError(f"a window such as 30s, 5m or 1h, got {window!r}")
    return float(int(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)])


def _duration(seconds: float) -> str:
    s = round(seconds)
    if s != seconds or s < 0:
        raise ValueError(f"alert durations must be whole non-negative seconds, got {seconds}")
    return f"{s // 60}m" if s % 60 == 0 and s else f"{s}s"


def rule_groups(th: Thresholds | None = None, c: MixinConfig = CONFIG) -> dict[str, object]:
    rules = [
        {
            "alert": a.name,
            "expr": a.expr,
            "for": _duration(a.for_s),
            "labels": {"severity": a.severity},
            "annotations": {"summary": a.summary, "description": a.description, "runbook_url": a.runbook_url},
        }
        for a in alerts(th, c)
    ]
    return {"groups": [{"name": "kvpilot", "rules": rules}]}


def _example_labels(a: Alert, c: MixinConfig) -> dict[str, str]:
    """The labels of the alert the promtool cases expect: as Prometheus scrapes kvpilot, then the alert's own."""
    return {"job": c.job, **({"instance": TEST_INSTANCE} if a.per_pod else {}), **a.labels}


def _series_selectors(a: Alert, c: MixinConfig) -> list[str]:
    """The promtool cases' input series: one pod's for an alert about that pod, else every pod's copy."""
    pods = [{"instance": TEST_INSTANCE}] if a.per_pod else [{"instance": i, "pod": p} for i, p in TEST_PODS]
    out = []
    for pod in pods:
        inner = ",".join(f'{k}="{v}"' for k, v in {"job": c.job, **pod, **a.labels}.items())
        out.append(f"{a.series}{{{inner}}}")
    return out


_IF_LABEL = re.compile(r"\{\{ if \$labels\.(\w+) \}\}(.*?)\{\{ end \}\}")


def expand(template: str, labels: dict[str, str]) -> str:
    """The template as Prometheus renders it, for the subset used here: ``{{ $labels.x }}`` and
    ``{{ if $labels.x }}…{{ end }}`` (kept when the label is set and not empty)."""
    out = _IF_LABEL.sub(lambda m: m.group(2) if labels.get(m.group(1)) else "", template)
    for k, v in labels.items():
        out = out.replace(f"{{{{ $labels.{k} }}}}", v)
    return out


def _test_case(a: Alert, c: MixinConfig, *, value: float, fires: bool) -> dict[str, object]:
    steps = int(2 * a.for_s // TEST_INTERVAL_S) + 4
    before = max(TEST_INTERVAL_S, int(a.for_s) - TEST_INTERVAL_S)
    after = int(a.for_s) + TEST_INTERVAL_S
    labels = _example_labels(a, c)
    expected = {
        # Prometheus drops empty labels (an empty value is no label at all).
        "exp_labels": {k: v for k, v in {**labels, "severity": a.severity}.items() if v},
        "exp_annotations": {
            "summary": expand(a.summary, labels),
            "description": expand(a.description, labels),
            "runbook_url": a.runbook_url,
        },
    }
    return {
        "interval": f"{TEST_INTERVAL_S}s",
        # a counter grows by `value` every step (0+0x… stays at 0): its increase is what the alert reads
        "input_series": [
            {"series": s, "values": f"0+{value:g}x{steps}" if a.counter else f"{value:g}x{steps}"}
            for s in _series_selectors(a, c)
        ],
        "alert_rule_test": [
            # silent while pending: the condition has not yet held for `for`
            {"eval_time": f"{before}s", "alertname": a.name, "exp_alerts": []},
            # firing once it has (or still silent on healthy input)
            {"eval_time": f"{after}s", "alertname": a.name, "exp_alerts": [expected] if fires else []},
        ],
    }


def rule_tests(th: Thresholds | None = None, c: MixinConfig = CONFIG) -> dict[str, object]:
    tests: list[dict[str, object]] = []
    for a in alerts(th, c):
        tests.append(_test_case(a, c, value=a.bad, fires=True))
        tests.append(_test_case(a, c, value=a.good, fires=False))
    return {"rule_files": ["kvpilot-rules.yaml"], "evaluation_interval": f"{TEST_INTERVAL_S}s", "tests": tests}


_HEADER = "# Generated by alerts/rules.py (`make generate`); do not edit by hand.\n"


def _dump(doc: object) -> str:
    return _HEADER + yaml.safe_dump(doc, sort_keys=False, width=1000, allow_unicode=True)


def generate() -> dict[str, str]:
    return {RULES_PATH: _dump(rule_groups()), TESTS_PATH: _dump(rule_tests())}


def alert_for_finding(kind: str, severity: str, th: Thresholds | None = None) -> Alert | None:
    """The alert that pages on findings of ``kind`` at ``severity`` (None: that combination does not page)."""
    return next((a for a in alerts(th) if a.finding == (kind, severity)), None)
