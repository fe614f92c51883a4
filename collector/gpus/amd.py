"""AMD GPU pages -> ``GpuSample``s (pure: no I/O, no clock): AMD's device-metrics-exporter and amd_smi_exporter.

**device-metrics-exporter (DME).** Names and meanings from its source: ROCm/device-metrics-exporter @ 0778d3a
pkg/amdgpu/gpuagent/gpuagent_gpu_metrics.go (``initPrometheusMetrics``: ``gpu_gfx_activity`` "Graphics engine
usage in Percentage (0-100)", ``gpu_used_vram``/``gpu_free_vram``/``gpu_total_vram`` "(in MB)",
``gpu_junction_temperature`` "junction/hotspot", ``gpu_edge_temperature``, ``gpu_power_usage`` "in Watts",
``gpu_ecc_uncorrect_total``, ``gpu_ecc_uncorrect_xgmi_wafl``, ``pcie_replay_count``, ``gpu_health`` "0 = Unhealthy |
1 = Healthy") and docs/configuration/metricslist.md @ 0778d3a (edge temperature and average package power MI2xx
only; junction temperature and package power MI3xx only). Its ``MetricsFieldPrefix`` setting puts text before every
name; the packaged configuration and the official ConfigMap use ``amd_`` (``amd_gpu_gfx_activity``): both spellings
are read. Labels (``gpuMandatoryLables`` and ``populateLabelsFromGPU``): ``gpu_id`` (the GPU's index, one per
partition: a CPX MI300X node has 64), ``gpu_partition_id`` (``NA`` where the GPU is not partitioned),
``gpu_compute_partition_type`` (``spx``, ``dpx``, ``qpx``, ``cpx``; ``none``), ``gpu_memory_partition_type``,
``card_series`` (``AMD Instinct MI300X OAM``), ``card_model`` (a board part number, often empty), ``gpu_uuid``
(optional), ``serial_number``, ``hostname``, and ``pod``/``namespace``/``container`` where the exporter maps a
workload to the GPU (empty otherwise). Samples without ``gpu_id`` (``gpu_nodes_total``) belong to no GPU.

Which reading becomes which field: utilisation is ``gpu_gfx_activity`` ÷ 100 on a whole GPU (the graphics/compute
engine's busy share, as DCGM's ``GPU_UTIL``), else the mean of ``gpu_gfx_busy_instantaneous`` over the GPU's compute
cores (``xcc_index``), the MI3xx field the metric list gives where gfx activity is "applicable for unpartitioned GPU"
only; on a partitioned GPU that mean wins where both are written (gfx activity is retired there: before v1.3.1 the
exporter wrote the first partition's value in it, since then amd-smi's, 0 on DPX: ROCm/device-metrics-exporter issue
#139, its v1.3.1 release notes, ROCm/amdsmi #134); memory is VRAM, MB read as MiB (DME's HELP text says MB;
amd-smi, which it reads, counts VRAM in bytes / (1024 * 1024): ROCm/amdsmi's
``amdsmi_get_gpu_vram_usage``); ``temperature_c`` is the **junction** (hotspot) temperature where the page has it
(MI3xx), else the **edge** temperature (MI2xx, Radeon): each is also kept in ``extra`` (``junction_temp_c``,
``edge_temp_c``) so a reader can tell which it was; power is ``gpu_power_usage``, else ``gpu_package_power``, else
``gpu_average_package_power``; ``ecc_dbe_volatile`` (the uncorrectable-ECC field dcgm fills with double-bit errors) is
``gpu_ecc_uncorrect_total``, every block's uncorrectable errors the driver counted; ``pcie_replay`` is
``pcie_replay_count``.

Values that are no reading: DME leaves a field it cannot read off the page (its field logger), but amd-smi and
gpuagent report an unavailable field as the all-ones value of its width and have leaked them (a ``gpu_clock
65535`` found on hardware: docs-internal/knowledge/plans/2026-09-28-na-sentinel-width-translation.md @ 445c962):
2**64-1, 2**32-1 and 2**31-1 are unknown everywhere, 65535 also where no real reading reaches it (temperature,
power, activity). A temperature or power of exactly 0 is unknown too: no running GPU is at 0 °C or draws 0 W, and
real pages write 0 where the sensor is absent (an MI300X VF's ``gpu_edge_temperature`` 0, issue #171; an iGPU's
``gpu_average_package_power`` 0 under the title "Power & temp metrics don't appear", issue #353).

Partitions: each partition is a GPU of its own (its own ``gpu_id``); a partitioned GPU (compute partition other than
SPX) carries its partition in ``mig_profile`` (``cpx/nps4``) and ``mig_instance`` (``gpu_partition_id``), so two
partitions never share a key even where they share a UUID. Node: as for dcgm-exporter, discovery's node wins; the
``hostname`` label is read only without one, and never when it is the exporter pod's own name.

**amd_smi_exporter** (amd/amd_smi_exporter @ 3624ffb src/cpu_data.go, src/collect/cpustat.go @ 0927a54): ``amd_*``
gauges of the node's CPUs and GPUs, each GPU series labelled by its index under a label named as the metric without
``amd_`` (``amd_gpu_use_percent{gpu_use_percent="0", productname="..."}``; a plain ``gpu`` label is read too).
Utilisation is ``amd_gpu_use_percent`` ÷ 100 (rocm-smi's busy percent), temperature ``amd_gpu_current_temperature``
(ROCm SMI sensor 0, the **edge** temperature), power ``amd_gpu_power`` (``amd_gpu_power_avg`` in older releases). The
exporter scales nothing: ROCm SMI gives millidegrees and microwatts, amd-smi's library degrees and watts, so a
temperature of 1000 or more is read as millidegrees and a power of 100,000 or more as microwatts (no GPU is at
1000 °C or draws 100 kW; none idles below 1 °C or 0.1 W), and a figure still that high once converted, or below
0 (the exporter writes unsigned integers), is no reading. No memory, ECC or health series: those stay unknown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from collector.engines._read import family_values, structural
from collector.exposition import MetricFamily, Sample
from collector.gpus._assign import assign
from collector.samples import GpuSample, TargetInfo

_MIB = 1024.0 * 1024.0

# All-ones values of amd-smi's field widths: "not available" (see the module notes)
_NA_WIDE = frozenset((float(2**64 - 1), float(2**32 - 1), float(2**31 - 1)))
_NA_GAUGE = _NA_WIDE | {65535.0}

DME_PREFIXES = ("", "amd_")


def _same(v: float) -> float:
    return v


def _percent(v: float) -> float:
    return v / 100.0


def _mib(v: float) -> float:
    return v * _MIB


@dataclass(frozen=True, slots=True)
class _Read:
    field: str  # a GpuSample field, or an ``extra`` key when ``extra``
    names: tuple[str, ...]  # the exporter's names, without prefix; the first a GPU has a reading of wins
    convert: Callable[[float], float] = _same
    na: frozenset[float] = _NA_WIDE
    zero_unknown: bool = False  # 0 is no reading (temperatures, power)
    extra: bool = False
    limit: float = math.inf  # a converted value at or above it is no reading (a unit the page did not use)
    floor: float = -math.inf  # a value below it is no reading (amd_smi_exporter's are unsigned integers)
    mean: bool = False  # a GPU's several series (one per compute core) averaged, not the first taken
    # On a partitioned GPU (compute partition DPX/TPX/QPX/CPX) this reading replaces an earlier read's value
    partitioned_first: bool = False


DME_READS: tuple[_Read, ...] = (
    _Read("utilisation", ("gpu_gfx_activity",), _percent, _NA_GAUGE),
    # by xcc_index; on a partitioned GPU the cores' share wins over gfx activity, which DME retired there (0, or the
    # first partition's value before v1.3.1: ROCm/device-metrics-exporter issue #139 and the v1.3.1 release notes)
    _Read("utilisation", ("gpu_gfx_busy_instantaneous",), _percent, _NA_GAUGE, mean=True, partitioned_first=True),
    _Read("memory_used_bytes", ("gpu_used_vram",), _mib),
    _Read("memory_free_bytes", ("gpu_free_vram",), _mib),
    _Read("temperature_c", ("gpu_junction_temperature", "gpu_edge_temperature"), na=_NA_GAUGE, zero_unknown=True),
    _Read(
        "power_w",
        ("gpu_power_usage", "gpu_package_power", "gpu_average_package_power"),
        na=_NA_GAUGE,
        zero_unknown=True,
    ),
    _Read("ecc_dbe_volatile", ("gpu_ecc_uncorrect_total",)),
    _Read("pcie_replay", ("pcie_replay_count",)),
    # kept in GpuSample.extra
    _Read("junction_temp_c", ("gpu_junction_temperature",), na=_NA_GAUGE, zero_unknown=True, extra=True),
    _Read("edge_temp_c", ("gpu_edge_temperature",), na=_NA_GAUGE, zero_unknown=True, extra=True),
    _Read("memory_temp_c", ("gpu_memory_temperature",), na=_NA_GAUGE, zero_unknown=True, extra=True),
    _Read("memory_total_mib", ("gpu_total_vram",), extra=True),
    _Read("umc_activity_pct", ("gpu_umc_activity",), na=_NA_GAUGE, extra=True),
    _Read("ecc_correctable", ("gpu_ecc_correct_total",), extra=True),
    _Read("ecc_uncorrectable_xgmi", ("gpu_ecc_uncorrect_xgmi_wafl",), extra=True),
    _Read("amd_health", ("gpu_health",), extra=True),
    _Read("energy_uj", ("gpu_energy_consumed",), extra=True),
    _Read("pcie_recovery", ("pcie_recovery_count",), extra=True),
)

DME_FAMILIES: frozenset[str] = frozenset(
    prefix + name for prefix in DME_PREFIXES for read in DME_READS for name in read.names
)


_MAX_C = 1000.0  # millidegrees from this value up; a converted temperature this high is no reading
_MAX_W = 100_000.0  # microwatts from this value up; a converted power this high is no reading


def _milli(v: float) -> float:
    return v / 1000.0 if v >= _MAX_C else v


def _micro(v: float) -> float:
    return v / 1e6 if v >= _MAX_W else v


def _smi_temperature(**kw: Any) -> _Read:
    return _Read(convert=_milli, na=_NA_WIDE, zero_unknown=True, limit=_MAX_C, floor=0.0, **kw)


def _smi_power(**kw: Any) -> _Read:
    return _Read(convert=_micro, na=_NA_WIDE, zero_unknown=True, limit=_MAX_W, floor=0.0, **kw)


SMI_READS: tuple[_Read, ...] = (
    _Read("utilisation", ("amd_gpu_use_percent",), _percent, _NA_GAUGE),
    _smi_temperature(field="temperature_c", names=("amd_gpu_current_temperature",)),
    _smi_power(field="power_w", names=("amd_gpu_power", "amd_gpu_power_avg")),
    _smi_temperature(field="edge_temp_c", names=("amd_gpu_current_temperature",), extra=True),
    _smi_power(field="power_cap_w", names=("amd_gpu_power_cap",), extra=True),
    _Read("memory_busy_pct", ("amd_gpu_memory_use_percent",), na=_NA_GAUGE, extra=True),
    _Read("sclk", ("amd_gpu_SCLK",), extra=True),
    _Read("mclk", ("amd_gpu_MCLK",), extra=True),
)

SMI_FAMILIES: frozenset[str] = frozenset(name for read in SMI_READS for name in read.names)

_PARTITIONED = frozenset(("dpx", "tpx", "qpx", "cpx"))  # compute partition modes that split a GPU


def _node(labels: Mapping[str, str], target: TargetInfo) -> str:
    """Discovery's node, else the exporter's ``hostname`` label unless that is the exporter pod's own name."""
    if target.node:
        return target.node
    host = labels.get("hostname") or labels.get("Hostname") or ""
    return "" if host == target.pod else host


_Key = tuple[str, str, str, str]  # node, gpu index, partition, uuid


def _dme_key(s: Sample, target: TargetInfo) -> _Key | None:
    labels = s.labels
    gpu = labels.get("gpu_id")
    if not gpu:
        return None
    partition = labels.get("gpu_partition_id") or ""
    return _node(labels, target), gpu, "" if partition == "NA" else partition, labels.get("gpu_uuid") or ""


def _dme_fields(key: _Key, s: Sample) -> dict[str, Any]:
    labels = s.labels
    node, gpu, partition, uuid = key
    compute = (labels.get("gpu_compute_partition_type") or "").lower()
    split = compute in _PARTITIONED
    memory = labels.get("gpu_memory_partition_type") or ""
    return {
        "node": node,
        "index": gpu,
        "uuid": uuid or None,
        "model_name": labels.get("card_series") or labels.get("card_model") or None,
        "pod": labels.get("pod") or None,
        "namespace": labels.get("namespace") or None,
        "container": labels.get("container") or None,
        "mig_profile": (f"{compute}/{memory}" if memory else compute) if split else None,
        "mig_instance": (partition or None) if split else None,
    }


def _smi_key(name: str) -> Callable[[Sample, TargetInfo], _Key | None]:
    label = name.removeprefix("amd_")

    def key(s: Sample, target: TargetInfo) -> _Key | None:
        gpu = s.labels.get(label) or s.labels.get("gpu")
        return (target.node, gpu, "", "") if gpu else None

    return key


def _smi_fields(key: _Key, s: Sample) -> dict[str, Any]:
    return {"node": key[0], "index": key[1], "uuid": None, "model_name": s.labels.get("productname") or None}


_Step = tuple[_Read, str, tuple[tuple[int, int], ...]]  # (what, family key, ((gpu, sample index), ...))


@dataclass(frozen=True, slots=True)
class _Plan:
    gpus: tuple[dict[str, Any], ...]  # each GPU's fields that labels give, in page order
    steps: tuple[_Step, ...]


def _family_key(families: Mapping[str, MetricFamily], name: str) -> str | None:
    if name in families:
        return name
    return name + "_total" if name + "_total" in families else None


def _plan(
    families: Mapping[str, MetricFamily],
    target: TargetInfo,
    reads: tuple[_Read, ...],
    prefixes: tuple[str, ...],
    key_of: Callable[[str], Callable[[Sample, TargetInfo], _Key | None]],
    fields_of: Callable[[_Key, Sample], dict[str, Any]],
) -> _Plan:
    gpus: dict[_Key, int] = {}
    labels_of: list[dict[str, Any]] = []
    steps: list[_Step] = []
    for read in reads:
        for name in read.names:
            for prefix in prefixes:
                key = _family_key(families, prefix + name)
                if key is None:
                    continue
                at_samples = assign(families[key].samples, _bound(key_of(name), target), gpus, labels_of, fields_of)
                if at_samples:
                    steps.append((read, key, tuple(at_samples)))
    _distinct_indexes(list(gpus), labels_of)
    return _Plan(tuple(labels_of), tuple(steps))


def _bound(key: Callable[[Sample, TargetInfo], _Key | None], target: TargetInfo) -> Callable[[Sample], _Key | None]:
    return lambda s: key(s, target)


def _distinct_indexes(keys: list[_Key], labels_of: list[dict[str, Any]]) -> None:
    """A GPU index the page gives more than one GPU (partitions under one ``gpu_id``, which no real page shows but
    nothing forbids) becomes ``gpu/partition`` (else ``gpu/uuid``) for each of them."""
    seen: dict[tuple[str, str], int] = {}
    for node, gpu, _partition, _uuid in keys:
        seen[node, gpu] = seen.get((node, gpu), 0) + 1
    for at, (node, gpu, partition, uuid) in enumerate(keys):
        if seen[node, gpu] > 1:
            labels_of[at]["index"] = f"{gpu}/{partition or uuid}"


def _value(read: _Read, v: float) -> float | None:
    if not math.isfinite(v) or v in read.na or (read.zero_unknown and v == 0) or v < read.floor:
        return None
    value = read.convert(v)
    return value if value < read.limit else None


def _adapt(plan: _Plan, families: Mapping[str, MetricFamily], timestamp: float) -> list[GpuSample]:
    values: list[dict[str, Any]] = [{} for _ in plan.gpus]
    extras: list[dict[str, float]] = [{} for _ in plan.gpus]
    partitioned = frozenset(at for at, fields in enumerate(plan.gpus) if fields.get("mig_profile") is not None)
    for read, key, reads in plan.steps:
        page_values = family_values(families, key)
        into = extras if read.extra else values
        name = read.field
        if read.mean:
            _mean_into(into, name, read, reads, page_values, partitioned if read.partitioned_first else frozenset())
            continue
        for at, i in reads:
            if name in into[at]:
                continue
            value = _value(read, page_values[i])
            if value is not None:
                into[at][name] = value
    return [
        GpuSample(**fields, timestamp=timestamp, extra=extras[at], **values[at]) for at, fields in enumerate(plan.gpus)
    ]


def _mean_into(
    into: list[dict[str, Any]],
    name: str,
    read: _Read,
    reads: tuple[tuple[int, int], ...],
    page_values: Sequence[float],
    replace: frozenset[int],
) -> None:
    """Each GPU's readings of ``read`` averaged into its field ``name``, where no earlier read set it or where the
    GPU is in ``replace`` (and has a reading of its own here)."""
    got: dict[int, list[float]] = {}
    for at, i in reads:
        if name not in into[at] or at in replace:
            value = _value(read, page_values[i])
            if value is not None:
                got.setdefault(at, []).append(value)
    for at, readings in got.items():
        into[at][name] = sum(readings) / len(readings)


def _dme_key_of(_name: str) -> Callable[[Sample, TargetInfo], _Key | None]:
    return _dme_key


def adapt_dme(families: Mapping[str, MetricFamily], target: TargetInfo, timestamp: float) -> list[GpuSample]:
    """Every GPU (partition) on a device-metrics-exporter page, in page order."""
    plan = structural(
        families,
        ("amd_dme", target.node, "" if target.node else target.pod),
        partial(_plan, families, target, DME_READS, DME_PREFIXES, _dme_key_of, _dme_fields),
    )
    return _adapt(plan, families, timestamp)


def adapt_amd_smi(families: Mapping[str, MetricFamily], target: TargetInfo, timestamp: float) -> list[GpuSample]:
    """Every GPU on an amd_smi_exporter page, in page order."""
    plan = structural(
        families,
        ("amd_smi", target.node),
        partial(_plan, families, target, SMI_READS, ("",), _smi_key, _smi_fields),
    )
    return _adapt(plan, families, timestamp)
