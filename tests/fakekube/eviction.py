"""``pods/eviction`` for the fake API server, with PodDisruptionBudget semantics (policy/v1), installed through
the server's subresource hook:

    kube = install(FakeKube()).start()

What the real API server does, and this keeps: POST an ``Eviction`` to ``/api/v1/namespaces/<ns>/pods/<name>/
eviction``; 404 when the pod is gone; 500 when more than one PDB selects the pod; 429 ``TooManyRequests`` when
the pod's PDB allows no disruption now (healthy pods would drop below ``minAvailable``, or unavailable pods would
exceed ``maxUnavailable``), a ``Status`` whose ``details.causes`` name the budget (reason ``DisruptionBudget``, "The
disruption budget <name> needs <desired> healthy pods and has <current> currently", no Retry-After), as
pkg/registry/core/pod/storage/eviction.go answers it; otherwise the pod is deleted (nothing changes under
``dryRun=All``) and 201 returns a success ``Status``. A pod already terminating, or not yet healthy, is evicted
regardless of its budget. (A 429 of the API server's own throttling is ``tests.fakekube.throttled``: plain text.)
"""

from __future__ import annotations

import math
from typing import Any

from tests.fakekube.server import FakeKube, Request
from tests.fakekube.store import ApiError, Obj, status_object

PDB_VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."
CAUSE = "DisruptionBudget"  # policy/v1 DisruptionBudgetCause


def install(kube: FakeKube) -> FakeKube:
    kube.subresources[("pods", "eviction")] = evict
    return kube


def selector_matches(selector: Obj | None, labels: dict[str, str]) -> bool:
    """A ``LabelSelector``: ``None`` selects nothing, ``{}`` selects everything (policy/v1)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], set(expr.get("values") or [])
        present = key in labels
        ok = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }.get(op)
        if ok is None:
            raise ApiError(400, "BadRequest", f"unknown label selector operator {op!r}")
        if not ok:
            return False
    return True


def healthy(pod: Obj) -> bool:
    """Running, Ready and not terminating: what the disruption controller counts as healthy."""
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return status.get("phase") == "Running" and ready


def _count(value: Any, total: int, *, what: str) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    raise ApiError(422, "Invalid", f"PodDisruptionBudget {what} must be an integer or a percentage, got {value!r}")


def healthy_counts(pdb: Obj, pods: list[Obj]) -> tuple[int, int]:
    """(desiredHealthy, currentHealthy) of the PDB's status over ``pods`` (those it selects), as the disruption
    controller computes them."""
    spec = pdb.get("spec") or {}
    total = len(pods)
    up = sum(1 for p in pods if healthy(p))
    if spec.get("minAvailable") is not None:
        return _count(spec["minAvailable"], total, what="minAvailable"), up
    if spec.get("maxUnavailable") is not None:
        return total - _count(spec["maxUnavailable"], total, what="maxUnavailable"), up
    return 0, up  # a budget with neither field never blocks


def disruptions_allowed(pdb: Obj, pods: list[Obj]) -> int:
    """How many of ``pods`` (those the PDB selects) may be disrupted now."""
    desired, current = healthy_counts(pdb, pods)
    return current - desired


def evict(kube: FakeKube, req: Request) -> tuple[int, Obj]:
    if req.method != "POST":
        raise ApiError(405, "MethodNotAllowed", f"{req.method} not allowed on pods/eviction")
    pods_rt, pdb_rt = kube.resource("pods"), kube.resource("poddisruptionbudgets")
    store = kube.store
    with store.changed:  # re-entrant: check the budget and delete as one step, as the API server does
        pod = store.get(pods_rt, req.namespace, req.name)
        labels = pod.get("metadata", {}).get("labels") or {}
        if healthy(pod):
            budgets = [
                pdb
                for pdb in store.list(pdb_rt, req.namespace)[0]
                if selector_matches((pdb.get("spec") or {}).get("selector"), labels)
            ]
            if len(budgets) > 1:
                raise ApiError(
                    500,
                    "InternalError",
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                    name=req.name,
                    kind="pods",
                )
            if budgets:
                selected = [
                    p
                    for p in store.list(pods_rt, req.namespace)[0]
                    if selector_matches(budgets[0]["spec"].get("selector"), p.get("metadata", {}).get("labels") or {})
                ]
                if disruptions_allowed(budgets[0], selected) <= 0:
                    desired, current = healthy_counts(budgets[0], selected)
                    budget = budgets[0]["metadata"]["name"]
                    words = f"The disruption budget {budget} needs {desired} healthy pods and has {current} currently"
                    raise ApiError(429, "TooManyRequests", PDB_VIOLATION, causes=[{"reason": CAUSE, "message": words}])
        if req.query.get("dryRun") != "All":
            store.delete(pods_rt, req.namespace, req.name)
    return 201, status_object(201, "", f'pod "{req.name}" evicted', name=req.name, kind="pods")
