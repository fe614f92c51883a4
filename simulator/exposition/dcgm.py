"""dcgm-exporter (`etc/default-counters.csv`) in Kubernetes mode: one series per GPU per field."""

from __future__ import annotations

from prometheus_client.core import Metric

from simulator.snapshot import GpuSnapshot

DRIVER_VERSION = "550.90.07"
_MIB = 1024 * 1024


def families(node: str, gpus: list[GpuSnapshot], namespace: str) -> list[Metric]:
    fields: list[tuple[str, str, str, object]] = [
        ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", lambda g: g.sm_clock_mhz),
        ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", lambda g: 2619),
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", lambda g: round(g.temperature_c)),
        ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", lambda g: round(g.temperature_c) + 4),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda g: g.power_w),
        (
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "counter",
            "Total energy consumption since boot (in mJ).",
            lambda g: round(g.energy_j * 1000),
        ),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", lambda g: 0),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", lambda g: round(g.utilisation * 100)),
        ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", lambda g: round(g.utilisation * 60)),
        ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", lambda g: 0),
        ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", lambda g: 0),
        ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", lambda g: g.last_xid),
        (
            "DCGM_FI_DEV_FB_FREE",
            "gauge",
            "Framebuffer memory free (in MiB).",
            lambda g: g.memory_free_bytes // _MIB,
        ),
        (
            "DCGM_FI_DEV_FB_USED",
            "gauge",
            "Framebuffer memory used (in MiB).",
            lambda g: g.memory_used_bytes // _MIB,
        ),
        ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", lambda g: 512),
        (
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "counter",
            "Number of remapped rows for uncorrectable errors",
            lambda g: 0,
        ),
        (
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
            "counter",
            "Number of remapped rows for correctable errors",
            lambda g: 0,
        ),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", lambda g: 0),
        (
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "gauge",
            "Ratio of time the graphics engine is active.",
            lambda g: round(g.utilisation * 0.95, 6),
        ),
        (
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "gauge",
            "Ratio of cycles the tensor (HMMA) pipe is active.",
            lambda g: round(g.utilisation * 0.45, 6),
        ),
        (
            "DCGM_FI_PROF_DRAM_ACTIVE",
            "gauge",
            "Ratio of cycles the device memory interface is active.",
            lambda g: round(g.utilisation * 0.7, 6),
        ),
    ]
    out: list[Metric] = []
    for name, kind, doc, fn in fields:
        # dcgm-exporter writes its counters without a `_total` suffix, which prometheus_client's counter
        # families would add: built as gauges, typed `counter` by the renderer (see BARE_COUNTERS).
        del kind
        fam = Metric(name, doc, "gauge")
        for g in gpus:
            fam.add_sample(name, _labels(g, node, namespace), float(fn(g)))  # type: ignore[operator]
        out.append(fam)
    return out


def _labels(g: GpuSnapshot, node: str, namespace: str) -> dict[str, str]:
    """dcgm-exporter's labels; the Kubernetes ones only on GPUs a pod holds (the exporter omits them otherwise)."""
    labels = {
        "gpu": str(g.index),
        "UUID": g.uuid,
        "pci_bus_id": g.pci_bus_id,
        "device": f"nvidia{g.index}",
        "modelName": g.model_name,
        "Hostname": node,
        "DCGM_FI_DRIVER_VERSION": DRIVER_VERSION,
    }
    if g.pod:
        labels |= {"container": "vllm", "namespace": namespace, "pod": g.pod}
    return labels
