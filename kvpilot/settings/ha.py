"""`ha`: several replicas of kvpilot, the holder of a Kubernetes Lease actuating."""

from __future__ import annotations

import socket

from pydantic import Field, model_validator

from kvpilot.settings._section import _Section


class HaSettings(_Section):
    """Several replicas of kvpilot, one of them (the holder of a Kubernetes Lease) actuating."""

    enabled: bool = Field(default=False, description="Run several replicas; only the holder of the Lease actuates.")
    lease_name: str = Field(default="kvpilot-leader", description="Name of the coordination.k8s.io Lease.")
    lease_namespace: str = Field(default="default", description="Namespace of the Lease.")
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
