"""GPU sources: page adapters registered in ``GPU_ADAPTERS`` (dcgm-exporter, Triton) and the NVML collector."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from collector.exposition import MetricFamily
from collector.gpus import dcgm, triton
from collector.samples import GpuSample, TargetInfo

AdaptGpus = Callable[[Mapping[str, MetricFamily], TargetInfo, float], list[GpuSample]]


@dataclass(frozen=True, slots=True)
class GpuAdapter:
    name: str
    families: frozenset[str]
    adapt: AdaptGpus

    def present(self, families: Mapping[str, MetricFamily]) -> bool:
        return any(name in self.families for name in families)


GPU_ADAPTERS: dict[str, GpuAdapter] = {
    "dcgm": GpuAdapter("dcgm", dcgm.FAMILIES, dcgm.adapt_dcgm),
    "triton": GpuAdapter("triton", triton.FAMILIES, triton.adapt_triton_gpus),
}

__all__ = ["GPU_ADAPTERS", "GpuAdapter"]
