"""`ha`: several replicas of kvpilot, the holder of a Kubernetes Lease actuating."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from pydantic import Field, model_validator

from kvpilot.settings._section import _Section

# Where Kubernetes mounts the pod's service account: its namespace is the pod's.
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def own_namespace(namespace_file: Path | None = None) -> str:
    """The namespace kvpilot runs in: its service account's namespace file, else ``POD_NAMESPACE`` (the Downward API),
    else ``kvpilot`` (the manifests' namespace). The Lease's default, so that an overlay or a Helm release that moves
    kvpilot to another namespace finds its Lease where the manifests' Role grants it (a fixed ``kvpilot`` left every
    Lease call forbidden there: no replica led, no drain or direct scaling ran)."""
    try:
        text = (namespace_file or SERVICE_ACCOUNT_NAMESPACE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    return text or os.environ.get("POD_NAMESPACE", "").strip() or "kvpilot"


class HaSettings(_Section):
    """Several replicas of kvpilot, one of them (the holder of a Kubernetes Lease) actuating."""

    enabled: bool = Field(default=False, description="Run several replicas; only the holder of the Lease actuates.")
    lease_name: str = Field(default="kvpilot-leader", description="Name of the coordination.k8s.io Lease.")
    lease_namespace: str = Field(
        default_factory=own_namespace,
        description="Namespace of the Lease; unset: kvpilot's own (its service account's namespace, else "
        "`POD_NAMESPACE`, else `kvpilot`), where the manifests' Role grants Leases.",
    )
    lease_duration_s: float = Field(
        default=15.0, gt=0, description="A leader that has not renewed for this long loses the Lease."
    )
    renew_every_s: float = Field(
        default=5.0, gt=0, description="How often the leader renews (and followers try to take) the Lease."
    )
    identity: str = Field(
        default_factory=socket.gethostname,
        description="This replica's name in the Lease (the pod name in Kubernetes); unset: the host name.",
    )

    @model_validator(mode="after")
    def _renew_within_lease(self) -> HaSettings:
        """`renew_every_s` < `lease_duration_s`"""
        if self.renew_every_s >= self.lease_duration_s:
            raise ValueError(
                f"ha.renew_every_s ({self.renew_every_s}) must be shorter than ha.lease_duration_s "
                f"({self.lease_duration_s})"
            )
        return self
