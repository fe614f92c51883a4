"""`deployments/{name}/scale` for the fake API server: the `autoscaling/v1` Scale view of a Deployment.

Registered through the server's subresource hook (``FakeKube.subresources``). GET builds the Scale from the
Deployment (its resourceVersion included, as the real API server does); PUT honours optimistic concurrency
(a stale resourceVersion is 409 Conflict) and validates ``spec.replicas`` (422 Invalid); PATCH merges
``spec.replicas``. A missing Deployment is 404 from the store.

Tests that need a write to land between a client's read and its write (to drive conflict handling) queue a
callable with ``ScaleSubresource.before_next_write``; it runs inside the next PUT/PATCH, before that is applied.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.fakekube.server import FakeKube, Request
from tests.fakekube.store import ApiError, Obj

_KEY = ("deployments", "scale")


@dataclass
class ScaleSubresource:
    kube: FakeKube
    _interference: list[Callable[[], Any]] = field(default_factory=list)

    def before_next_write(self, action: Callable[[], Any]) -> None:
        """Runs `action` (e.g. another writer's patch of the Deployment) at the start of the next scale write."""
        self._interference.append(action)

    def __call__(self, kube: FakeKube, req: Request) -> tuple[int, Obj]:
        if req.method == "GET":
            return 200, _scale_of(kube.store.get(req.resource, req.namespace, req.name))
        if req.method not in ("PUT", "PATCH"):
            raise ApiError(405, "MethodNotAllowed", f"{req.method} not allowed on deployments/scale")
        if self._interference:
            self._interference.pop(0)()
        replicas = _replicas(req.body, req.name)
        sent_rv = ((req.body or {}).get("metadata") or {}).get("resourceVersion")
        if req.method == "PUT":
            # The Deployment's own PUT semantics: a stale resourceVersion is a 409, checked atomically in the store.
            current = kube.store.get(req.resource, req.namespace, req.name)
            current["spec"] = {**current.get("spec", {}), "replicas": replicas}
            current["metadata"]["resourceVersion"] = sent_rv or current["metadata"]["resourceVersion"]
            updated = kube.store.replace(req.resource, req.namespace, req.name, current)
        else:
            patch: Obj = {"spec": {"replicas": replicas}}
            if sent_rv:
                patch["metadata"] = {"resourceVersion": sent_rv}
            updated = kube.store.patch(req.resource, req.namespace, req.name, patch, "application/merge-patch+json")
        return 200, _scale_of(updated)


def install_scale(kube: FakeKube) -> ScaleSubresource:
    """Serves deployments/scale on `kube`; returns the handler (for `before_next_write`)."""
    handler = ScaleSubresource(kube)
    kube.subresources[_KEY] = handler
    return handler


def deployment(name: str, namespace: str = "default", replicas: int = 1) -> Obj:
    """A minimal Deployment object to create in the fake."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "engine", "image": "x"}]}},
        },
        "status": {"replicas": replicas},
    }


def _replicas(body: Any, name: str) -> int:
    replicas = ((body or {}).get("spec") or {}).get("replicas") if isinstance(body, dict) else None
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise ApiError(
            422,
            "Invalid",
            f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value: {replicas!r}: '
            "must be greater than or equal to 0",
            name=name,
            kind="Scale",
        )
    return replicas


def _scale_of(dep: Obj) -> Obj:
    meta = dep["metadata"]
    selector = ((dep.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace", ""),
            "uid": meta.get("uid"),
            "resourceVersion": meta["resourceVersion"],
            "creationTimestamp": meta.get("creationTimestamp"),
        },
        "spec": {"replicas": (dep.get("spec") or {}).get("replicas", 0)},
        "status": {
            "replicas": (dep.get("status") or {}).get("replicas", 0),
            "selector": ",".join(f"{k}={v}" for k, v in sorted(selector.items())),
        },
    }
