"""`cost`: GPU prices and power, and which GPU type each deployment (or pool) runs on (docs/cost.md)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from kvpilot.settings._section import _Section
from scaler.cost import DEFAULT_GPU_PRICES, DEFAULT_RECOMMEND_MARGIN


class GpuPriceSettings(_Section):
    """One GPU type's price and power, per GPU (defaults and their sources: `scaler.cost.DEFAULT_GPU_PRICES`)."""

    price_per_hour_usd: float = Field(gt=0, description="Dollars per GPU-hour.")
    power_w: float = Field(gt=0, description="Maximum board power of one GPU (datasheet), W.")


class GpuAssignmentSettings(_Section):
    """What a deployment's replicas run on; unset: read from the GPU exporter (dcgm `modelName`, NVML name) of the
    replicas' GPUs, and a replica's GPU count from how many of them serve it."""

    gpu_type: str | None = Field(default=None, description="GPU type, a key of `cost.gpus`.")
    gpus_per_replica: int | None = Field(
        default=None, ge=1, le=64, description="GPUs one replica holds (tensor parallel)."
    )


def default_gpus() -> dict[str, GpuPriceSettings]:
    """The built-in price and power of each GPU type (`scaler.cost.DEFAULT_GPU_PRICES`; sources in docs/cost.md)."""
    return {k: GpuPriceSettings(price_per_hour_usd=v.price_per_hour_usd, power_w=v.power_w)
            for k, v in DEFAULT_GPU_PRICES.items()}  # fmt: skip


class CostSettings(_Section):
    """What the fleet costs (docs/cost.md). `gpus` entries are merged onto the defaults field by field, so
    `gpus: {H100: {price_per_hour_usd: 2.1}}` changes the H100's price only and keeps every other type."""

    gpus: dict[str, GpuPriceSettings] = Field(
        default_factory=default_gpus,
        description="Price and power per GPU, by GPU type (the defaults: docs/cost.md); entries given are merged onto "
        "the defaults field by field.",
    )
    default: GpuAssignmentSettings = Field(
        default=GpuAssignmentSettings(), description="What every deployment without its own entry runs on."
    )
    deployments: dict[str, GpuAssignmentSettings] = Field(
        default_factory=dict,
        description='What a deployment runs on, keyed "namespace/name", or "namespace/name@prefill" for one pool '
        "(then the deployment's entry, then `default`).",
    )
    recommend: bool = Field(
        default=True, description="Advise a cheaper GPU type that meets the SLO, from the simulator's profiles."
    )
    recommend_margin: float = Field(
        default=DEFAULT_RECOMMEND_MARGIN,
        ge=0,
        lt=1,
        description="A cheaper type is advised only when it saves at least this share (the profiles' own error is "
        "5-30 %).",
    )

    @field_validator("gpus", mode="before")
    @classmethod
    def _onto_defaults(cls, v: Any) -> Any:
        """`gpus` entries are merged onto the default types field by field; names are letters, digits, `_.-`."""
        if not isinstance(v, dict):
            return v
        merged: dict[str, Any] = {k: g.model_dump() for k, g in default_gpus().items()}
        for name, entry in v.items():
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}", name):
                raise ValueError(f"cost.gpus: {name!r} is not a GPU type name (letters, digits, '_.-')")
            entry = entry.model_dump() if isinstance(entry, BaseModel) else entry
            merged[name] = {**merged.get(name, {}), **entry} if isinstance(entry, dict) else entry
        return merged

    @model_validator(mode="after")
    def _types_priced(self) -> CostSettings:
        """`deployments` keys are `namespace/name`; every `gpu_type` named has a price in `gpus`."""
        for key in self.deployments:
            ns, _, name = key.partition("/")
            if not ns or not name:
                raise ValueError(f"cost.deployments key {key!r} must be 'namespace/name'")
        for where, a in (("cost.default", self.default),
                         *((f"cost.deployments[{k!r}]", a) for k, a in self.deployments.items())):  # fmt: skip
            if a.gpu_type is not None and a.gpu_type not in self.gpus:
                raise ValueError(
                    f"{where}.gpu_type {a.gpu_type!r} has no price in cost.gpus (known: {', '.join(sorted(self.gpus))})"
                )
        return self
