"""`sharding`: several kvpilot instances splitting the fleet by deployment (kvpilot.runtime.shards)."""

from __future__ import annotations

from pydantic import Field, field_validator

from kvpilot.settings._section import _Section, url_or_unset


class ShardingSettings(_Section):
    """Several kvpilot instances splitting the fleet by deployment (kvpilot.runtime.shards): each holds the Leases of
    some shards (named after `ha.lease_name`, in `ha.lease_namespace`, held for `ha.lease_duration_s`, renewed every
    `ha.renew_every_s` by `ha.identity`), scrapes, decides and actuates only their deployments, and forwards KEDA's
    calls for the others to their owner. Needs a Kubernetes API, like `ha`."""

    shards: int = Field(
        default=1, ge=1, le=1024, description="1: off; N: deployments split by a stable hash into N shards."
    )
    advertise_address: str | None = Field(
        default=None,
        description="host:port where the other instances reach this one's KEDA gRPC server; unset: `$POD_IP`, else "
        "the host name, with `api.grpc_port`.",
    )
    forward_timeout_s: float = Field(
        default=2.0, gt=0, description="A KEDA call forwarded to a shard's owner waits this long, s."
    )

    @field_validator("advertise_address")
    @classmethod
    def _advertise_address_not_blank(cls, value: str | None) -> str | None:
        """`advertise_address` is an address or unset (empty: unset), never blank"""
        return url_or_unset(value)

    @property
    def enabled(self) -> bool:
        return self.shards > 1
