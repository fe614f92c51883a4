"""GPU sources: page adapters registered in ``GPU_ADAPTERS`` (dcgm-exporter, Triton, AMD's device-metrics-exporter and
amd_smi_exporter) and the NVML collector."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from collector.exposition import MetricFamily
from collector.gpus import amd, dcgm, triton
from collector.samples import GpuSample, TargetInfo

AdaptGpus = Callable[[Mapping[str, MetricFamily], TargetInfo, float], list[GpuSample]]


@dataclass(frozen=True, slots=True)
class GpuAdapter:
    name: str
    families: frozenset[str]
    adapt: AdaptGpus
    shown: str  # the exporter and its names, as an error naming what kvpilot reads shows it

    def present(self, families: Mapping[str, MetricFamily]) -> bool:
        return any(name in self.families for name in families)


GPU_ADAPTERS: dict[str, GpuAdapter] = {
    "dcgm": GpuAdapter("dcgm", dcgm.FAMILIES, dcgm.adapt_dcgm, "dcgm-exporter's DCGM_FI_*"),
    "triton": GpuAdapter("triton", triton.FAMILIES, triton.adapt_triton_gpus, "Triton's nv_gpu_*"),
    "amd_dme": GpuAdapter("amd_dme", amd.DME_FAMILIES, amd.adapt_dme, "AMD's device-metrics-exporter gpu_*"),
    "amd_smi": GpuAdapter("amd_smi", amd.SMI_FAMILIES, amd.adapt_amd_smi, "amd_smi_exporter amd_gpu_*"),
}

__all__ = ["GPU_ADAPTERS", "GpuAdapter"]
