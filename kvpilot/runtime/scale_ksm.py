"""PromQL mode's scale source: the Deployments as kube-state-metrics exports them, read through Prometheus.

``KubeStateMetricsScale`` answers what ``kvpilot.runtime.scale_view.KubernetesScale`` answers from the API server —
each deployment's ``spec.replicas``, its rollout status (``scaler.rollout.DeploymentRollout``), and which are gone —
for a kvpilot that reads its fleet from Prometheus and holds no Kubernetes credentials.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from collector.promql import expressions
from collector.promql.decode import PromQLError, Series, Stopped
from kvpilot.runtime.scale_view import SaidOnce, ScaleView
from scaler.rollout import DeploymentRollout

log = logging.getLogger(__name__)


# kube-state-metrics' Deployment series (docs/metrics/workload/deployment-metrics.md, internal/store/deployment.go
# at kubernetes/kube-state-metrics a465b976): metric -> the field it fills. Every one carries the labels `namespace`
# and `deployment` of the object. maxSurge/maxUnavailable come resolved to counts (GetScaledValueFromIntOrPercent
# on spec.replicas, surge rounded up, unavailable down) and only for a RollingUpdate strategy.
KSM_DEPLOYMENT_SERIES: dict[str, str] = {
    "kube_deployment_spec_replicas": "replicas",
    "kube_deployment_metadata_generation": "generation",
    "kube_deployment_status_observed_generation": "observed_generation",
    "kube_deployment_status_replicas": "status_replicas",
    "kube_deployment_status_replicas_updated": "updated_replicas",
    "kube_deployment_status_replicas_ready": "ready_replicas",
    "kube_deployment_status_replicas_available": "available_replicas",  # ready where an older release lacks _ready
    "kube_deployment_spec_strategy_rollingupdate_max_surge": "max_surge",
    "kube_deployment_spec_strategy_rollingupdate_max_unavailable": "max_unavailable",
}

Query = Callable[[str, float], Awaitable[list[Series]]]  # (PromQL, time) -> the instant vector's series


@dataclass(frozen=True, slots=True)
class KsmDeployment:
    """One Deployment as kube-state-metrics exports it: ``spec.replicas``, its rollout status where the controller
    has reported on it, and the scrape target (``job``, ``instance``) that exported it."""

    replicas: int
    rollout: DeploymentRollout | None
    target: tuple[str, str]


def ksm_deployments(series: Iterable[Series]) -> tuple[dict[str, KsmDeployment], dict[str, str]]:
    """The Deployments of an answer to ``KubeStateMetricsScale``'s query, keyed "namespace/name", and those left
    out with why: a value that is no replica count (NaN, infinite, negative, fractional), or one series given twice
    with different values (two kube-state-metrics disagreeing; the same value twice, as from two replicas of it, is
    one fact)."""
    values: dict[str, dict[str, float]] = {}
    targets: dict[str, tuple[str, str]] = {}
    bad: dict[str, str] = {}
    for s in series:
        m = s["metric"]
        name, namespace, deployment = m.get("__name__"), m.get("namespace"), m.get(expressions.DEPLOYMENT_LABEL)
        field_name = KSM_DEPLOYMENT_SERIES.get(name or "")
        if field_name is None or not namespace or not deployment:
            continue
        key = f"{namespace}/{deployment}"
        targets.setdefault(key, (m.get("job", ""), m.get("instance", "")))
        value = float(s["value"][1])  # Prometheus writes "NaN", "+Inf": float() reads them
        if not (math.isfinite(value) and value >= 0 and value == int(value)):
            bad.setdefault(key, f"{name} is {s['value'][1]}, not a count")
            continue
        seen = values.setdefault(key, {}).get(field_name)
        if seen is not None and seen != value:
            bad.setdefault(key, f"{name} given twice with different values ({seen:g}, {value:g})")
        values[key][field_name] = value
    found: dict[str, KsmDeployment] = {}
    for key, fields in values.items():
        if key in bad:
            continue
        if "replicas" not in fields:
            bad[key] = "no kube_deployment_spec_replicas"
            continue
        replicas = int(fields["replicas"])
        found[key] = KsmDeployment(replicas, _ksm_rollout(fields, replicas), targets[key])
    return found, bad


def _ksm_rollout(fields: Mapping[str, float], replicas: int) -> DeploymentRollout | None:
    """The same status as ``deployment_rollout`` reads off the object, or None where it cannot be told: the
    controller has not reported yet (observedGeneration exported as 0), or a series is missing (an older
    kube-state-metrics, a partial scrape)."""
    n = {k: int(v) for k, v in fields.items()}
    if not n.get("observed_generation"):
        return None
    ready = n.get("ready_replicas", n.get("available_replicas"))
    if ready is None or any(k not in n for k in ("generation", "status_replicas", "updated_replicas")):
        return None
    surge, unavailable = n.get("max_surge"), n.get("max_unavailable")
    if surge is None and unavailable is None:  # Recreate: kube-state-metrics exports no fencepost
        surge, unavailable = 0, replicas
    elif surge is None or unavailable is None:
        return None
    return DeploymentRollout(
        generation=n["generation"],
        observed_generation=n["observed_generation"],
        replicas=replicas,
        updated_replicas=n["updated_replicas"],
        status_replicas=n["status_replicas"],
        ready_replicas=ready,
        max_surge=surge,
        max_unavailable=unavailable,
    )


class KubeStateMetricsScale:
    """``spec.replicas`` and the rollout status of the known Deployments as kube-state-metrics exports them to the
    Prometheus the PromQL source reads: what ``KubernetesScale`` reads off the objects, without access to the API.

    One query per tick (more past ``max_matcher_bytes`` of names), narrowed to the deployments asked about as the
    PromQL source narrows its own (``expressions.deployment_matchers``), through ``query`` (its client, timeout and
    size cap). A deployment listed before and now missing is gone only when the kube-state-metrics target that
    exported it still answers (``up == 1``): series that vanish with their exporter (kube-state-metrics down,
    rescheduled) say nothing of the Deployment. No series at all for any deployment asked about answers nothing,
    said once in the log (no kube-state-metrics, or not scraped by this Prometheus), unless their exporter still
    answers: then they were deleted. A query that
    fails answers nothing for that tick. Reads lag the cluster by kube-state-metrics' scrape interval."""

    def __init__(self, query: Query, *, selector: str = "", max_matcher_bytes: int = expressions.MAX_MATCHER_BYTES):
        """``selector``: label matchers added to the Deployment series' query (``collector.discovery.promql_selector``:
        the same Prometheus, the same cluster)."""
        self._query = query
        self._selector = selector
        self._max_matcher_bytes = max_matcher_bytes
        self._names = "|".join(KSM_DEPLOYMENT_SERIES)
        self._listed: dict[str, tuple[str, str]] = {}  # deployment -> the target that last exported it
        self._not_found = SaidOnce()  # never found: logged once
        self._bad: set[str] = set()  # left out for unreadable series: logged once until read again
        self.series_found: bool | None = None  # whether the last answer held any series (None: not asked yet)

    async def read(self, known: Collection[str], now: float) -> ScaleView:
        pairs = [(ns, name) for ns, _, name in (key.partition("/") for key in known)]
        if not pairs:
            return ScaleView()
        queries = [self._deployments_query(m) for m in expressions.deployment_matchers(pairs, self._max_matcher_bytes)]
        try:
            answers = await asyncio.gather(*(self._query(q, now) for q in queries))
        except Stopped:
            return ScaleView()
        except PromQLError as e:
            log.warning("kube-state-metrics: cannot read the Deployment series this tick: %s", e)
            return ScaleView()
        series = [s for answer in answers for s in answer]
        if not series:
            # every deployment asked was deleted (its exporter answers), or there is no kube-state-metrics to ask
            gone = await self._gone({k: self._listed[k] for k in known if k in self._listed}, now)
            if not gone:
                self._note_series(False, len(pairs))
            return self._forgetting(ScaleView(gone=frozenset(gone)))
        self._note_series(True, len(pairs))
        found, bad = ksm_deployments(series)
        replicas: dict[str, int] = {}
        rollouts: dict[str, DeploymentRollout] = {}
        missing: dict[str, tuple[str, str]] = {}
        for key in known:
            d = found.get(key)
            if d is not None:
                replicas[key] = d.replicas
                if d.rollout is not None:
                    rollouts[key] = d.rollout
                self._listed[key] = d.target
                self._bad.discard(key)
            elif key in bad:
                if key not in self._bad:
                    self._bad.add(key)
                    log.warning("kube-state-metrics: %s left out (%s): decided from its replicas", key, bad[key])
            elif key in self._listed:
                missing[key] = self._listed[key]
            elif self._not_found.first(key):
                log.info(
                    "kube-state-metrics exports no Deployment %s: its replica count comes from the replicas seen", key
                )
        gone = await self._gone(missing, now)
        return self._forgetting(ScaleView(replicas=replicas, gone=frozenset(gone), rollouts=rollouts))

    def _forgetting(self, view: ScaleView) -> ScaleView:
        """``view``, its deleted Deployments no longer taken as listed (reported once)."""
        for key in view.gone:
            del self._listed[key]
        return view

    def _deployments_query(self, matchers: str) -> str:
        extra = f"{self._selector}," if self._selector else ""
        return f'{{__name__=~"{self._names}",{extra}{matchers}}}'

    def _note_series(self, found: bool, asked: int) -> None:
        if found != self.series_found:
            if found:
                log.info("kube-state-metrics: reading replica counts and rollout status from kube_deployment_* series")
            else:
                log.warning(
                    "kube-state-metrics: no kube_deployment_* series in Prometheus for the %d deployments kvpilot "
                    "decides: rollouts are seen from the replicas alone (scrape kube-state-metrics, or set "
                    "collector.discovery.promql_kube_state_metrics: false)",
                    asked,
                )
            self.series_found = found

    async def _gone(self, missing: Mapping[str, tuple[str, str]], now: float) -> set[str]:
        """Those of ``missing`` whose exporter still answers: deleted. Where the series carry no ``instance`` (dropped
        by relabelling, as OpenShift's monitoring does), every target of their ``job`` must answer; without a
        ``job`` (series recorded or federated) nothing can be checked, so nothing is taken for deleted."""
        jobs = {job for job, _ in missing.values() if job}
        if not jobs:
            return set()
        try:
            ups = await self._query(f"up{{job=~{expressions.any_of(jobs)}}}", now)
        except PromQLError as e:
            log.warning("kube-state-metrics: cannot tell deleted Deployments this tick: %s", e)
            return set()
        up: dict[tuple[str, str], bool] = {}
        for s in ups:
            m = s["metric"]
            up[(m.get("job", ""), m.get("instance", ""))] = float(s["value"][1]) == 1.0

        def answers(job: str, instance: str) -> bool:
            if instance:
                return up.get((job, instance), False)
            of_job = [v for (j, _), v in up.items() if j == job]
            return bool(of_job) and all(of_job)

        return {key for key, (job, instance) in missing.items() if job and answers(job, instance)}
