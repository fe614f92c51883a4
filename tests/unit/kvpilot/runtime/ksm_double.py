"""Deployment objects as the Kubernetes API returns them (defaulted by the apiserver), and the series
kube-state-metrics exports for them, written from its source (kubernetes/kube-state-metrics
internal/store/deployment.go at a465b976, docs/metrics/workload/deployment-metrics.md at 112ec602): one gauge per
field, labelled ``namespace`` and ``deployment``; observedGeneration 0 where the controller has not reported;
maxSurge/maxUnavailable through intstr.GetScaledValueFromIntOrPercent on spec.replicas, and only for RollingUpdate."""

from __future__ import annotations

import math

from kubernetes import client

KSM_JOB = "kube-state-metrics"
KSM_INSTANCE = "10.0.0.9:8080"


def deployment(
    name: str,
    *,
    replicas: int,
    generation: int = 1,
    observed: int | None = 1,
    updated: int | None = None,
    status_replicas: int | None = None,
    ready: int | None = None,
    available: int | None = None,
    strategy: str = "RollingUpdate",
    max_surge: int | str = "25%",
    max_unavailable: int | str = "25%",
    paused: bool = False,
    namespace: str = "llm",
) -> client.V1Deployment:
    """A Deployment; status fields default to a finished rollout of ``replicas``."""
    rolling = (
        client.V1RollingUpdateDeployment(max_surge=max_surge, max_unavailable=max_unavailable)
        if strategy == "RollingUpdate"
        else None
    )
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace, generation=generation),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            paused=paused,
            selector=client.V1LabelSelector(match_labels={"app": name}),
            template=client.V1PodTemplateSpec(),
            strategy=client.V1DeploymentStrategy(type=strategy, rolling_update=rolling),
        ),
        status=client.V1DeploymentStatus(
            observed_generation=observed,
            replicas=replicas if status_replicas is None else status_replicas,
            updated_replicas=replicas if updated is None else updated,
            ready_replicas=replicas if ready is None else ready,
            available_replicas=(replicas if ready is None else ready) if available is None else available,
        ),
    )


def _scaled(value: int | str, total: int, *, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent."""
    if isinstance(value, int):
        return value
    share = int(value.rstrip("%")) * total / 100
    return math.ceil(share) if round_up else math.floor(share)


def ksm_series(
    d: client.V1Deployment, *, job: str = KSM_JOB, instance: str = KSM_INSTANCE, ready_series: bool = True
) -> list[tuple[dict[str, str], float]]:
    """What kube-state-metrics exports for ``d``, as Prometheus answers it (``job``/``instance`` of the scrape);
    ``ready_series=False``: an older kube-state-metrics, without ``_replicas_ready``."""
    spec, status = d.spec, d.status
    values = {
        "kube_deployment_spec_replicas": spec.replicas,
        "kube_deployment_spec_paused": float(bool(spec.paused)),
        "kube_deployment_metadata_generation": d.metadata.generation,
        "kube_deployment_status_observed_generation": status.observed_generation or 0,
        "kube_deployment_status_replicas": status.replicas or 0,
        "kube_deployment_status_replicas_updated": status.updated_replicas or 0,
        "kube_deployment_status_replicas_available": status.available_replicas or 0,
    }
    if ready_series:
        values["kube_deployment_status_replicas_ready"] = status.ready_replicas or 0
    rolling = spec.strategy.rolling_update
    if rolling is not None:
        values["kube_deployment_spec_strategy_rollingupdate_max_surge"] = _scaled(
            rolling.max_surge, spec.replicas, round_up=True
        )
        values["kube_deployment_spec_strategy_rollingupdate_max_unavailable"] = _scaled(
            rolling.max_unavailable, spec.replicas, round_up=False
        )
    labels = {"job": job, "instance": instance, "namespace": d.metadata.namespace, "deployment": d.metadata.name}
    labels = {k: v for k, v in labels.items() if v}  # an instance dropped by relabelling: no label at all
    return [({"__name__": name, **labels}, float(v)) for name, v in values.items()]


def ksm_up(*, job: str = KSM_JOB, instance: str = KSM_INSTANCE, up: bool = True) -> tuple[dict[str, str], float]:
    """kube-state-metrics' own target in Prometheus."""
    return {"__name__": "up", "job": job, "instance": instance}, float(up)
