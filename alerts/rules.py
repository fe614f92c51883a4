"""Prometheus alerting rules over kvpilot's own series, generated from the detectors' thresholds.

The `for` of every alert and every numeric threshold come from ``detectors.thresholds``, so the alert and
the finding it pages on agree. ``generate()`` (registered in ``kvpilot.generate.GENERATORS``) writes the
rule file and its ``promtool test rules`` cases: for every alert, silent before `for` elapses, firing
after, and silent on healthy input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import yaml

from api import series
from detectors.thresholds import DEFAULT, Thresholds

RULES_PATH = "alerts/kvpilot-rules.yaml"
TESTS_PATH = "alerts/kvpilot-rules.test.yaml"
RUNBOOK_BASE = "https://github.com/kvpilot/kvpilot/blob/main/docs/runbooks"
# Every query selects kvpilot's own series with this (kubernetes-mixin style: one place to change it).
SELECTOR = 'job="kvpilot"'
TEST_INTERVAL_S = 5


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
    finding: tuple[str, str] | None = None  # (kind, severity) of the finding it pages on, for the direct push

    @property
    def runbook_url(self) -> str:
        return f"{RUNBOOK_BASE}/{self.name}.md"


def _finding(kind: str, severity: str) -> str:
    return f'{series.FINDING_ACTIVE.name}{{{SELECTOR},kind="{kind}",severity="{severity}"}}'


# The pod (replica) and deployment a GPU serves, when kvpilot knows them (Finding.alert_labels): "GPU GPU-1 on
# gpu-node-7 (replica chat-0 of ml/chat)" says whose requests suffer, not only which card.
_WORKLOAD = "{{ if $labels.replica }} (replica {{ $labels.replica }} of {{ $labels.deployment }}){{ end }}"


def _gpu_labels(kind: str, severity: str, *, replica: str = "", deployment: str = "") -> dict[str, str]:
    return {
        "kind": kind,
        "severity": severity,
        "deployment": deployment,
        "replica": replica,
        "node": "gpu-node-7",
        "gpu": "GPU-1",
    }


def _deployment_labels(kind: str, severity: str) -> dict[str, str]:
    return {"kind": kind, "severity": severity, "deployment": "ml/chat", "replica": "", "node": "", "gpu": ""}


def alerts(th: Thresholds = DEFAULT) -> list[Alert]:
    """Every alert, in the order they appear in the rule file."""
    return [
        Alert(
            name="KvpilotGpuDrainRequired",
            expr=f"{_finding('stuck_gpu', 'critical')} > 0",
            for_s=th.for_seconds("stuck_gpu"),
            severity="critical",
            summary=f"GPU {{{{ $labels.gpu }}}} on {{{{ $labels.node }}}}{_WORKLOAD} needs its node drained",
            description=(
                "kvpilot flagged GPU {{ $labels.gpu }} on node {{ $labels.node }} as stuck: a drain-class XID, "
                "a hang (pinned busy with no token progress) or a GPU gone from its exporter. Cordon and drain the "
                "node, then reset the GPU."
            ),
            series=series.FINDING_ACTIVE.name,
            bad=1,
            good=0,
            labels=_gpu_labels("stuck_gpu", "critical", replica="chat-0", deployment="ml/chat"),
            finding=("stuck_gpu", "critical"),
        ),
        Alert(
            name="KvpilotGpuDegraded",
            expr=f"{_finding('stuck_gpu', 'warning')} > 0",
            for_s=th.for_seconds("stuck_gpu"),
            severity="warning",
            summary=f"GPU {{{{ $labels.gpu }}}} on {{{{ $labels.node }}}}{_WORKLOAD} is degraded",
            description=(
                "kvpilot flagged GPU {{ $labels.gpu }} on node {{ $labels.node }}: a watch-class XID, an idle GPU "
                "while requests run, or an XID outside the triage table. Schedule a reset at the next idle window."
            ),
            series=series.FINDING_ACTIVE.name,
            bad=1,
            good=0,
            labels=_gpu_labels("stuck_gpu", "warning"),
            finding=("stuck_gpu", "warning"),
        ),
        Alert(
            name="KvpilotKvCacheExhaustionImminent",
            # The finding, not the raw projection: a projection alone warns on every ramp that is about to level
            # off; the finding also needs the pool to be still filling (requests arriving faster than they finish,
            # or waiting for blocks), which is what keeps plateaus quiet (bench/detectors.py, BENCHMARKS.md).
            expr=f"{_finding('kv_exhaustion', 'warning')} > 0",
            for_s=th.for_seconds("kv_exhaustion"),
            severity="warning",
            summary="KV cache of {{ $labels.replica }} ({{ $labels.deployment }}) projected full soon",
            description=(
                "The KV-cache usage of replica {{ $labels.replica }} is projected full within "
                f"{th.kv.warn_time_to_exhaustion_s:g} s (kvpilot_kv_time_to_exhaustion_seconds) and the pool is "
                "still filling: requests arrive faster than they finish, or wait for blocks. No preemptions yet; "
                "once full, vLLM preempts running requests and new ones queue. Scale out or shed load before then."
            ),
            series=series.FINDING_ACTIVE.name,
            bad=1,
            good=0,
            labels={**_deployment_labels("kv_exhaustion", "warning"), "replica": "chat-0"},
            finding=("kv_exhaustion", "warning"),
        ),
        Alert(
            name="KvpilotKvCacheExhausted",
            expr=f"{_finding('kv_exhaustion', 'critical')} > 0",
            for_s=th.for_seconds("kv_exhaustion"),
            severity="critical",
            summary="KV cache of {{ $labels.replica }} ({{ $labels.deployment }}) is exhausted",
            description=(
                "Replica {{ $labels.replica }} is preempting requests with its KV cache at or above "
                f"{th.kv.near_full:.0%} within the last minute, or is at or above {th.kv.near_full:.0%} with "
                "requests waiting for blocks, or is projected full within "
                f"{th.kv.critical_time_to_exhaustion_s:g} s with requests waiting. Latency is already suffering: "
                "scale out now. The finding's summary (kvpilot findings, /v1/findings) gives the measured "
                "preemption rate and the projected time to exhaustion."
            ),
            series=series.FINDING_ACTIVE.name,
            bad=1,
            good=0,
            labels={**_deployment_labels("kv_exhaustion", "critical"), "replica": "chat-0"},
            finding=("kv_exhaustion", "critical"),
        ),
        Alert(
            name="KvpilotKvTransferStall",
            expr=f"{_finding('kv_transfer_stall', 'warning')} > 0",
            for_s=th.for_seconds("kv_transfer_stall"),
            severity="warning",
            summary="KV from the prefill pool is not reaching {{ $labels.deployment }}",
            description=(
                "The decode pool {{ $labels.deployment }} takes in under half of the requests its prefill pool "
                "finished over the rate window: their KV is stuck between the pools and their clients wait for a "
                "first token. Check the KV-transfer link (NIXL/UCX) and the decode workers' connector."
            ),
            series=series.FINDING_ACTIVE.name,
            bad=1,
            good=0,
            labels=_deployment_labels("kv_transfer_stall", "warning"),
            finding=("kv_transfer_stall", "warning"),
        ),
        Alert(
            name="KvpilotPrefixCacheMiss",
            expr=f"{_finding('prefix_cache_miss', 'warning')} > 0",
            for_s=th.for_seconds("prefix_cache_miss"),
            severity="warning",
            summary="Prefix-cache hit ratio of {{ $labels.deployment }} collapsed: routing spreads shared prefixes",
            description=(
                "The prefix-cache hit ratio of {{ $labels.deployment }} fell by more than "
                f"{th.prefix.relative_drop:.0%} against its own baseline on all replicas together, while shared "
                "prefixes remain. Use prefix-aware or sticky routing."
            ),
            series=series.FINDING_ACTIVE.name,
            bad=1,
            good=0,
            labels=_deployment_labels("prefix_cache_miss", "warning"),
            finding=("prefix_cache_miss", "warning"),
        ),
        Alert(
            name="KvpilotTtftErrorBudgetBurn",
            expr=f"{_finding('ttft_slo_burn', 'critical')} > 0",
            for_s=th.for_seconds("ttft_slo_burn"),
            severity="critical",
            summary="{{ $labels.deployment }} burns its TTFT error budget fast",
            description=(
                f"Both the long and the short window of {{{{ $labels.deployment }}}} burn the TTFT error budget "
                f"({th.ttft.objective:.1%} of requests within {th.ttft.target_s:g} s) faster than "
                f"{th.ttft.windows[0].factor:g}x. Users feel it now."
            ),
            series=series.FINDING_ACTIVE.name,
            bad=1,
            good=0,
            labels=_deployment_labels("ttft_slo_burn", "critical"),
            finding=("ttft_slo_burn", "critical"),
        ),
        Alert(
            name="KvpilotTtftErrorBudgetBurnSlow",
            expr=f"{_finding('ttft_slo_burn', 'warning')} > 0",
            for_s=th.for_seconds("ttft_slo_burn"),
            severity="warning",
            summary="{{ $labels.deployment }} burns its TTFT error budget",
            description=(
                "{{ $labels.deployment }} burns its TTFT error budget steadily (a slower window pair). "
                "Look at capacity before the budget is gone."
            ),
            series=series.FINDING_ACTIVE.name,
            bad=1,
            good=0,
            labels=_deployment_labels("ttft_slo_burn", "warning"),
            finding=("ttft_slo_burn", "warning"),
        ),
        Alert(
            name="KvpilotRolloutRisky",
            expr=f"{_finding('rollout', 'warning')} > 0",
            for_s=th.for_seconds("rollout"),
            severity="warning",
            summary="Rollout of {{ $labels.deployment }} is too wide or burning TTFT",
            description=(
                "Deployment {{ $labels.deployment }} serves two versions at once (a rollout) and either more than "
                f"{th.rollout.max_replaced_fraction:.0%} of its replicas are not ready at once, or TTFT burns its "
                f"error budget faster than {th.rollout.burn_factor:g}x over {th.rollout.ttft_window_s:g} s. Slow "
                "the rollout (smaller waves) or surge replicas ahead of each wave."
            ),
            series=series.FINDING_ACTIVE.name,
            bad=1,
            good=0,
            labels=_deployment_labels("rollout", "warning"),
            finding=("rollout", "warning"),
        ),
        Alert(
            name="KvpilotRolloutHurtingUsers",
            expr=f"{_finding('rollout', 'critical')} > 0",
            for_s=th.for_seconds("rollout"),
            severity="critical",
            summary="Rollout of {{ $labels.deployment }} is hurting users",
            description=(
                "Deployment {{ $labels.deployment }} is rolling out with more than "
                f"{th.rollout.max_replaced_fraction:.0%} of its replicas not ready at once while TTFT burns its "
                f"error budget faster than {th.rollout.burn_factor:g}x. Pause the rollout, or add capacity now."
            ),
            series=series.FINDING_ACTIVE.name,
            bad=1,
            good=0,
            labels=_deployment_labels("rollout", "critical"),
            finding=("rollout", "critical"),
        ),
        Alert(
            name="KvpilotScrapeTargetDown",
            expr=f"{series.SCRAPE_UP.name}{{{SELECTOR}}} == 0",
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
        ),
    ]


def _duration(seconds: float) -> str:
    s = round(seconds)
    if s != seconds or s < 0:
        raise ValueError(f"alert durations must be whole non-negative seconds, got {seconds}")
    return f"{s // 60}m" if s % 60 == 0 and s else f"{s}s"


def rule_groups(th: Thresholds = DEFAULT) -> dict[str, object]:
    rules = [
        {
            "alert": a.name,
            "expr": a.expr,
            "for": _duration(a.for_s),
            "labels": {"severity": a.severity},
            "annotations": {"summary": a.summary, "description": a.description, "runbook_url": a.runbook_url},
        }
        for a in alerts(th)
    ]
    return {"groups": [{"name": "kvpilot", "rules": rules}]}


def _series_selector(a: Alert) -> str:
    labels = {"job": "kvpilot", "instance": "kvpilot:8080", **a.labels}
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{a.series}{{{inner}}}"


_IF_LABEL = re.compile(r"\{\{ if \$labels\.(\w+) \}\}(.*?)\{\{ end \}\}")


def expand(template: str, labels: dict[str, str]) -> str:
    """The template as Prometheus renders it, for the subset used here: ``{{ $labels.x }}`` and
    ``{{ if $labels.x }}…{{ end }}`` (kept when the label is set and not empty)."""
    out = _IF_LABEL.sub(lambda m: m.group(2) if labels.get(m.group(1)) else "", template)
    for k, v in labels.items():
        out = out.replace(f"{{{{ $labels.{k} }}}}", v)
    return out


def _test_case(a: Alert, *, value: float, fires: bool) -> dict[str, object]:
    steps = int(2 * a.for_s // TEST_INTERVAL_S) + 4
    before = max(TEST_INTERVAL_S, int(a.for_s) - TEST_INTERVAL_S)
    after = int(a.for_s) + TEST_INTERVAL_S
    labels = {"job": "kvpilot", "instance": "kvpilot:8080", **a.labels}
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
        "input_series": [{"series": _series_selector(a), "values": f"{value:g}x{steps}"}],
        "alert_rule_test": [
            # silent while pending: the condition has not yet held for `for`
            {"eval_time": f"{before}s", "alertname": a.name, "exp_alerts": []},
            # firing once it has (or still silent on healthy input)
            {"eval_time": f"{after}s", "alertname": a.name, "exp_alerts": [expected] if fires else []},
        ],
    }


def rule_tests(th: Thresholds = DEFAULT) -> dict[str, object]:
    tests: list[dict[str, object]] = []
    for a in alerts(th):
        tests.append(_test_case(a, value=a.bad, fires=True))
        tests.append(_test_case(a, value=a.good, fires=False))
    return {"rule_files": ["kvpilot-rules.yaml"], "evaluation_interval": f"{TEST_INTERVAL_S}s", "tests": tests}


_HEADER = "# Generated by alerts/rules.py (`make generate`); do not edit by hand.\n"


def _dump(doc: object) -> str:
    return _HEADER + yaml.safe_dump(doc, sort_keys=False, width=1000, allow_unicode=True)


def generate() -> dict[str, str]:
    return {RULES_PATH: _dump(rule_groups()), TESTS_PATH: _dump(rule_tests())}


def alert_for_finding(kind: str, severity: str, th: Thresholds = DEFAULT) -> Alert | None:
    """The alert that pages on findings of ``kind`` at ``severity`` (None: that combination does not page)."""
    return next((a for a in alerts(th) if a.finding == (kind, severity)), None)
