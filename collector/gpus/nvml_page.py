"""NVML readings as a dcgm-exporter page: what `kvpilot gpu-agent` serves on nodes that run no dcgm-exporter.

The page uses dcgm-exporter's family names, units and labels (``gpu``, ``UUID``, ``device``, ``modelName``,
``Hostname``), so kvpilot's dcgm adapter — and any dashboard or alert written for dcgm-exporter — reads it as it
is. What dcgm-exporter does not export gets a ``kvpilot_nvml_*`` family, which the dcgm adapter reads too: the GPU
recovery action NVML reports (field 230), and XIDs counted from NVML's event queue since the agent started (every
XID, where dcgm-exporter's gauge keeps the last). A field NVML could not read is left off the page, never written
as 0. Pure: renders what it is given.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from collector.samples import GpuSample

_MIB = 1024.0 * 1024.0
TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True, slots=True)
class _Family:
    name: str
    kind: str  # gauge | counter
    help: str
    read: Callable[[GpuSample], float | None]


def _of(field: str, factor: float = 1.0) -> Callable[[GpuSample], float | None]:
    def read(s: GpuSample) -> float | None:
        value = getattr(s, field)
        return None if value is None else float(value) * factor

    return read


def _extra(key: str) -> Callable[[GpuSample], float | None]:
    return lambda s: s.extra.get(key)


# dcgm-exporter's names and help texts (its default-counters.csv), in its units; then kvpilot's own. The first is
# always written: a GPU NVML could tell nothing of still appears, with every field unknown.
FAMILIES: tuple[_Family, ...] = (
    _Family(
        "kvpilot_nvml_gpu_info",
        "gauge",
        "One series per GPU the agent read, whatever NVML could tell of it.",
        lambda s: 1.0,
    ),
    _Family("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", _of("utilisation", 100.0)),
    _Family("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", _of("memory_used_bytes", 1 / _MIB)),
    _Family("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", _of("memory_free_bytes", 1 / _MIB)),
    _Family("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", _of("temperature_c")),
    _Family("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", _of("power_w")),
    _Family("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", _of("last_xid")),
    _Family(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        _of("ecc_dbe_volatile"),
    ),
    _Family(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
        _of("remapped_rows_correctable"),
    ),
    _Family(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
        _of("remapped_rows_uncorrectable"),
    ),
    _Family(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "gauge",
        "Whether remapping of rows is pending",
        _of("row_remap_pending"),
    ),
    _Family(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gauge",
        "Whether remapping of rows has failed",
        _of("row_remap_failure"),
    ),
    _Family("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", _of("pcie_replay")),
    _Family(
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "gauge",
        "Current clock event reasons (bitmask of NVML clocks event reasons).",
        _extra("clock_event_reasons"),
    ),
    _Family(
        "kvpilot_nvml_gpu_recovery_action",
        "gauge",
        "GPU recovery action NVML reports (field 230): 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and "
        "reset.",
        _of("recovery_action"),
    ),
    _Family(
        "kvpilot_nvml_xid_events_total",
        "counter",
        "XID events drained from NVML's event queue since the agent started.",
        _of("xid_count"),
    ),
    _Family("kvpilot_nvml_gpu_lost", "gauge", "1 when NVML reported the GPU lost in this read.", _extra("gpu_lost")),
    _Family(
        "kvpilot_nvml_read_errors",
        "gauge",
        "NVML calls that failed in this read for a reason other than 'not supported'.",
        _extra("nvml_errors"),
    ),
    _Family(
        "kvpilot_nvml_retired_pages_pending",
        "gauge",
        "1 when retired pages wait for a reboot (GPUs that retire pages; Hopper remaps rows instead).",
        _extra("retired_pages_pending"),
    ),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(s: GpuSample) -> str:
    pairs = [
        ("gpu", s.index),
        ("UUID", s.uuid or ""),
        ("device", f"nvidia{s.index}"),
        ("modelName", s.model_name or ""),
    ]
    pairs.append(("Hostname", s.node))
    return ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) and abs(value) < 2**53 else repr(value)


def render_nvml_page(samples: Sequence[GpuSample]) -> bytes:
    """One dcgm-exporter-style page for `samples` (one per GPU of a node); families with no reading are omitted."""
    lines: list[str] = []
    for family in FAMILIES:
        rows = []
        for s in samples:
            value = family.read(s)
            if value is not None and math.isfinite(value):
                rows.append(f"{family.name}{{{_labels(s)}}} {_number(value)}")
        if rows:
            lines += [f"# HELP {family.name} {family.help}", f"# TYPE {family.name} {family.kind}", *rows]
    return ("\n".join(lines) + "\n").encode() if lines else b""


__all__ = ["FAMILIES", "TEXT_CONTENT_TYPE", "render_nvml_page"]
