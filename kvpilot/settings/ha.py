"""`ha`: several replicas of kvpilot, the holder of a Kubernetes Lease actuating."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

from pydantic import Field, model_validator

from kvpilot.settings._section import _Section

# Where Kubernetes mounts the pod's service account: its namespace is the pod's.
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

# The names the API server takes (apimachinery's IsDNS1123Label, IsDNS1123Subdomain): a namespace is a label, a
# Lease's name a subdomain; kvpilot's is also the value of the label grouping the sharded instances' Leases, which
# holds 63 characters.
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
NAME_CHARS = 63
LEASE_SECONDS_MAX = 2**31 - 1  # coordination.k8s.io/v1 LeaseSpec.leaseDurationSeconds is an int32


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

    def check_lease(self) -> None:
        """Raise ValueError, in words, unless the Lease's name and namespace are names the Kubernetes API server takes
        and the identity is not blank (``Settings`` asks, where ``ha`` or sharding is on): any text was taken, and
        with `Kvpilot_Leader` or `team/a` every Lease call was refused (422 Invalid for the name; no namespace of that
        name can exist), logged each round, and no instance ever led: no drain, no direct scaling."""
        refused = "every Lease call would be refused and no instance would lead"
        if len(self.lease_name) > NAME_CHARS or not _SUBDOMAIN.fullmatch(self.lease_name):
            raise ValueError(
                f"ha.lease_name ({self.lease_name[:80]!r}) is not a name the Kubernetes API takes for a Lease: lower-"
                f"case letters, digits, '-' and '.', starting and ending with a letter or a digit, at most "
                f"{NAME_CHARS} characters (sharding labels its Leases with it); {refused}"
            )
        if len(self.lease_namespace) > NAME_CHARS or not _LABEL.fullmatch(self.lease_namespace):
            raise ValueError(
                f"ha.lease_namespace ({self.lease_namespace[:80]!r}) is not a Kubernetes namespace name: lower-case "
                f"letters, digits and '-', starting and ending with a letter or a digit, at most {NAME_CHARS} "
                f"characters (unset, it is kvpilot's service account's namespace, else POD_NAMESPACE, else "
                f"'kvpilot'); {refused}"
            )
        if self.lease_duration_s > LEASE_SECONDS_MAX:
            raise ValueError(
                f"ha.lease_duration_s ({self.lease_duration_s:g}) is more than a Lease holds: its "
                f"leaseDurationSeconds is a 32-bit count, at most {LEASE_SECONDS_MAX} s; {refused}"
            )
        if not self.identity.strip():
            raise ValueError(
                "ha.identity is blank: each instance signs the Lease with it, and a Lease signed by nobody is anyone's "
                "to take (unset: the host name; in Kubernetes the pod's name, the Downward API's metadata.name)"
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
