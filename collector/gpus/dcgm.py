"""dcgm-exporter pages -> ``GpuSample``s (pure: no I/O, no clock).

One sample per GPU (or MIG instance), identified by host, ``gpu`` index, MIG instance and UUID.
Samples without a ``gpu`` label cannot be attributed to a device and are skipped. DCGM reports a field
it cannot read as a "blank" sentinel (e.g. 9223372036854775794 = INT64 not-supported); those become
``None``, never a huge number.

XIDs: ``DCGM_FI_DEV_XID_ERRORS`` is a gauge holding the last XID seen (newer exporters also label it
``err_code``/``err_msg``); ``last_xid`` takes the value, or ``err_code`` when the value is blank.
``xid_count`` is ``DCGM_EXP_XID_ERRORS_COUNT`` summed over its ``xid`` label: dcgm-exporter counts XIDs
within its ``--xid-count-window-size`` window, so it can fall back to 0 (read it as "XIDs recently",
not as a lifetime counter to take rates of). With ``--kubernetes-virtual-gpus`` (time-sliced GPUs) the exporter
writes every series of a shared GPU once per container using it, labelled with that container's
``pod``/``namespace``/``container`` and ``vgpu`` (internal/pkg/transformation/kubernetes.go @ eb95c71): the copies
are one series, counted once (the GPU's other fields take the first copy's value, the same in every copy).
On a page from kvpilot's NVML agent it is ``kvpilot_nvml_xid_events_total`` (every XID since the agent started),
and ``recovery_action`` comes from ``kvpilot_nvml_gpu_recovery_action`` (collector/gpus/nvml_page.py).

Node: the exporter pod's node as discovery knows it (its ``spec.nodeName``, ``TargetInfo.node``) wins over the
``Hostname``/``hostname`` label, which is only as good as the exporter's environment: ``NODE_NAME`` when set (the Helm
chart and the example manifest set it from ``spec.nodeName``: NVIDIA/dcgm-exporter @ 9190a38
deployment/templates/daemonset.yaml, @ 8dc9e11 deployment/examples/dcgm-exporter.yaml), else ``os.Hostname()``, the
pod's own name in a pod, or with ``--remote-hostengine-info`` the host-engine address (internal/pkg/hostname/
hostname.go @ 5f9250c, ``GetHostname``). The label is read only when discovery gives no node (static targets, saved
pages), and never when it is the exporter pod's own name: then the node stays unknown (``""``) and no finding names it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from collector.engines._read import family_values, structural
from collector.exposition import MetricFamily, Sample
from collector.gpus._assign import assign
from collector.samples import GpuSample, TargetInfo

_MIB = 1024.0 * 1024.0

# DCGM blank values (dcgm_structs.h): DCGM_INT64_BLANK 0x7ffffffffffffff0 and the NOT_FOUND,
# NOT_SUPPORTED, NOT_PERMISSIONED codes just above it; DCGM_INT32_BLANK 0x7ffffff0 and its three;
# DCGM_FP64_BLANK 140737488355328.0 (2**47) and its three.
_INT64_BLANK = float(0x7FFFFFFFFFFFFFF0)
_INT32_BLANKS = (float(0x7FFFFFF0), float(0x7FFFFFFF))
_FP64_BLANKS = (140737488355328.0, 140737488355331.0)
# Below the smallest sentinel, a finite value is never blank: adapt_dcgm tests this before calling is_blank.
_BLANK_FLOOR = _INT32_BLANKS[0]
_NEG_INF = -math.inf


def is_blank(value: float) -> bool:
    """True for DCGM's "no value" sentinels and non-finite values."""
    if not math.isfinite(value):
        return True
    if value >= _INT64_BLANK - 1024:  # float64 cannot tell the int64 codes apart; all are >= 9.2e18
        return True
    return _INT32_BLANKS[0] <= value <= _INT32_BLANKS[1] or _FP64_BLANKS[0] <= value <= _FP64_BLANKS[1]


def _percent(v: float) -> float:
    return v / 100.0


def _mib(v: float) -> float:
    return v * _MIB


def _flag(v: float) -> bool:
    return v != 0


def _same(v: float) -> float:
    return v  # never called per page: a field read as it is is stored as it is (_Plan)


@dataclass(frozen=True, slots=True)
class _Map:
    field: str
    families: tuple[str, ...]  # current name first
    convert: Callable[[float], Any] = _same


# canonical GpuSample field <- dcgm-exporter field(s)
FIELDS: tuple[_Map, ...] = (
    _Map("utilisation", ("DCGM_FI_DEV_GPU_UTIL",), _percent),
    _Map("memory_used_bytes", ("DCGM_FI_DEV_FB_USED",), _mib),
    _Map("memory_free_bytes", ("DCGM_FI_DEV_FB_FREE",), _mib),
    _Map("sm_active", ("DCGM_FI_PROF_SM_ACTIVE",)),
    _Map("temperature_c", ("DCGM_FI_DEV_GPU_TEMP",)),
    _Map("power_w", ("DCGM_FI_DEV_POWER_USAGE",)),
    _Map("ecc_dbe_volatile", ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",)),
    _Map("remapped_rows_correctable", ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",)),
    _Map("remapped_rows_uncorrectable", ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",)),
    _Map("row_remap_pending", ("DCGM_FI_DEV_ROW_REMAP_PENDING",), _flag),
    _Map("row_remap_failure", ("DCGM_FI_DEV_ROW_REMAP_FAILURE",), _flag),
    _Map("pcie_replay", ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER",)),
    # kvpilot's NVML agent (collector/gpus/nvml_page.py): what dcgm-exporter does not export
    _Map("recovery_action", ("kvpilot_nvml_gpu_recovery_action",), int),
)

# kept in GpuSample.extra under these keys (detectors and dashboards read some of them)
EXTRA: dict[str, str] = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gr_engine_active",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "tensor_active",
    "DCGM_FI_PROF_DRAM_ACTIVE": "dram_active",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "mem_copy_util_pct",
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
    "DCGM_FI_DEV_MEM_CLOCK": "mem_clock_mhz",
    "DCGM_FI_DEV_MEMORY_TEMP": "memory_temp_c",
    "DCGM_FI_DEV_FB_RESERVED": "memory_reserved_mib",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_mj",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "clock_event_reasons",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "clock_event_reasons",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "ecc_sbe_volatile",
    "DCGM_FI_DEV_POWER_VIOLATION": "power_violation_us",
    "DCGM_FI_DEV_THERMAL_VIOLATION": "thermal_violation_us",
    "kvpilot_nvml_gpu_lost": "gpu_lost",
    "kvpilot_nvml_read_errors": "nvml_errors",
    "kvpilot_nvml_retired_pages_pending": "retired_pages_pending",
}

_XID = "DCGM_FI_DEV_XID_ERRORS"
_XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
_NVML_XID_EVENTS = "kvpilot_nvml_xid_events"  # kvpilot's NVML agent: every XID since it started, a counter
_NVML_INFO = "kvpilot_nvml_gpu_info"  # kvpilot's NVML agent: one series per GPU, even one NVML could tell nothing of

FAMILIES: frozenset[str] = frozenset(
    {name for m in FIELDS for name in m.families} | set(EXTRA) | {_XID, _XID_COUNT, _NVML_XID_EVENTS, _NVML_INFO}
) | frozenset(f"{name}_total" for name in {_XID_COUNT, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", _NVML_XID_EVENTS})

_Key = tuple[str, str, str]  # node, index ("gpu" or "gpu/instance"), uuid

# A GPU's sample is built from its GpuSample arguments in field order (a list per GPU per page; keywords cost a
# dict merge and a name look-up each): where each field goes, and what a GPU's row holds before its page is read.
_AT = {f.name: k for k, f in enumerate(dataclasses.fields(GpuSample))}
_TIMESTAMP, _LAST_XID_AT, _XID_COUNT_AT, _EXTRA_AT = _AT["timestamp"], _AT["last_xid"], _AT["xid_count"], _AT["extra"]
_ROW = tuple(None if f.default is dataclasses.MISSING else f.default for f in dataclasses.fields(GpuSample))

# Labels dcgm-exporter adds to say who uses a GPU (internal/pkg/transformation/const.go), not which series it is: a
# shared GPU's series is written once per user with these alone differing.
_ATTRIBUTION = frozenset(
    {"pod", "namespace", "container", "vgpu", "pod_uid", "pod_name", "pod_namespace", "container_name", "hpc_job"}
)


def _node(labels: Mapping[str, str], target: TargetInfo) -> str:
    """The GPU's node: discovery's, else the exporter's hostname label unless that is the exporter pod's own name."""
    if target.node:
        return target.node
    host = labels.get("Hostname") or labels.get("hostname") or ""
    return "" if host == target.pod else host


def _key(s: Sample, target: TargetInfo) -> _Key | None:
    labels = s.labels
    gpu = labels.get("gpu")
    if gpu is None or gpu == "":
        return None
    node = _node(labels, target)
    instance = labels.get("GPU_I_ID")
    index = f"{gpu}/{instance}" if instance not in (None, "") else gpu
    return node, index, labels.get("UUID") or labels.get("uuid") or ""


def _label_fields(key: _Key, s: Sample) -> dict[str, Any]:
    """A GPU's ``GpuSample`` fields that its first sample's labels give."""
    labels = s.labels
    node, index, uuid = key
    return {
        "node": node,
        "index": index,
        "uuid": uuid or None,
        "model_name": labels.get("modelName") or None,
        "pod": labels.get("pod") or None,
        "namespace": labels.get("namespace") or None,
        "container": labels.get("container") or None,
        "mig_profile": labels.get("GPU_I_PROFILE") or None,
        "mig_instance": labels.get("GPU_I_ID") or None,
    }


def _positive_int(raw: str | float | None) -> int | None:
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return int(value) if math.isfinite(value) and value > 0 and value == int(value) else None


def _last_xid(value: float, err_code: int | None) -> int | None:
    """The XID number: the gauge's value, or its ``err_code`` label's (read once per layout) when the value
    carries none."""
    read = None if is_blank(value) else value
    from_value = _positive_int(read)
    if from_value is not None:
        return from_value
    if err_code is not None:
        return err_code
    return 0 if read == 0 else None


# What a page's names and labels alone decide, worked out once per page layout (``structural``): its GPUs in page
# order (key and label-given fields), and each read in the order the adapter makes it — which family, which of its
# samples, for which GPU, and what the value becomes. Values (blank or not, an XID's number) are looked at per page,
# by position (``family_values``: off a laid-out page, no ``Sample`` is built).
_Step = tuple[str, str, tuple[tuple[int, int], ...]]  # (family key, action, ((gpu, sample index), ...))
_FIELD, _EXTRA, _LAST_XID, _COUNT_XIDS, _PRESENT = "field", "extra", "last_xid", "xid_count", "present"


@dataclass(frozen=True, slots=True)
class _Plan:
    rows: tuple[tuple[Any, ...], ...]  # each GPU's GpuSample arguments, with those its labels give (node, index, ...)
    # a step and its argument: a field's (position, conversion or None to store the value as it is), an EXTRA key,
    # the XID reads' ``err_code`` labels (as numbers), or None
    steps: tuple[tuple[_Step, Any], ...]


def _row(fields: dict[str, Any]) -> tuple[Any, ...]:
    row = list(_ROW)
    for name, value in fields.items():
        row[_AT[name]] = value
    return tuple(row)


def _plan(families: Mapping[str, MetricFamily], target: TargetInfo) -> _Plan:
    gpus: dict[_Key, int] = {}
    labels_of: list[dict[str, Any]] = []

    def each(family: str, action: str) -> _Step:
        key = family if family in families else family + "_total"
        fam = families.get(key)
        samples = fam.samples if fam is not None else ()
        return key, action, assign(samples, partial(_key, target=target), gpus, labels_of, _label_fields)

    steps: list[tuple[_Step, Any]] = [(each(_NVML_INFO, _PRESENT), None)]  # the GPU exists, in page order
    steps.extend(
        (each(name, _FIELD), (_AT[m.field], None if m.convert is _same else m.convert))
        for m in FIELDS
        for name in m.families
    )
    steps.extend((each(name, _EXTRA), key) for name, key in EXTRA.items())
    xid = each(_XID, _LAST_XID)
    xid_samples = families[xid[0]].samples if xid[2] else ()
    steps.append((xid, tuple(_positive_int(xid_samples[i].labels.get("err_code")) for _at, i in xid[2])))
    steps.append((_once_per_series(each(_XID_COUNT, _COUNT_XIDS), families), None))
    steps.append((_once_per_series(each(_NVML_XID_EVENTS, _COUNT_XIDS), families), None))
    return _Plan(tuple(map(_row, labels_of)), tuple((step, arg) for step, arg in steps if step[2]))


def _once_per_series(step: _Step, families: Mapping[str, MetricFamily]) -> _Step:
    """``step`` with each of a GPU's series read once: the copies of a shared GPU's series (see the module notes),
    which differ only in the labels saying who uses it, are one series."""
    key, action, reads = step
    if not reads:
        return step
    samples = families[key].samples
    seen: set[tuple[int, frozenset[tuple[str, str]]]] = set()
    kept = []
    for at, i in reads:
        series = (at, frozenset(kv for kv in samples[i].labels.items() if kv[0] not in _ATTRIBUTION))
        if series not in seen:
            seen.add(series)
            kept.append((at, i))
    return key, action, tuple(kept)


def adapt_dcgm(families: Mapping[str, MetricFamily], target: TargetInfo, timestamp: float) -> list[GpuSample]:
    """Every GPU on a dcgm-exporter page, in page order."""
    # the plan depends on the target only through _node: its node, or (none known) its pod
    plan = structural(
        families, ("dcgm", target.node, "" if target.node else target.pod), partial(_plan, families, target)
    )
    rows: list[list[Any]] = []
    for template in plan.rows:
        row = list(template)
        row[_TIMESTAMP] = timestamp
        row[_EXTRA_AT] = {}
        rows.append(row)
    for (family, action, reads), arg in plan.steps:
        page_values = family_values(families, family)
        if action == _FIELD:
            # the first copy that is not blank wins (a field is None until set; a value set never is)
            at_field, convert = arg
            for at, i in reads:
                v = page_values[i]
                row = rows[at]
                if row[at_field] is None and (_NEG_INF < v < _BLANK_FLOOR or not is_blank(v)):
                    row[at_field] = v if convert is None else convert(v)
        elif action == _EXTRA:
            for at, i in reads:
                v = page_values[i]
                if _NEG_INF < v < _BLANK_FLOOR or not is_blank(v):
                    rows[at][_EXTRA_AT].setdefault(arg, v)
        elif action == _PRESENT:
            continue
        elif action == _LAST_XID:
            for (at, i), err_code in zip(reads, arg, strict=True):
                v = page_values[i]
                # no XID (the value nearly every page has): its err_code label's, else 0, as _last_xid says
                xid = (0 if err_code is None else err_code) if v == 0.0 else _last_xid(v, err_code)
                if xid is not None and rows[at][_LAST_XID_AT] in (None, 0):
                    rows[at][_LAST_XID_AT] = xid
        else:
            for at, i in reads:
                v = page_values[i]
                if _NEG_INF < v < _BLANK_FLOOR or not is_blank(v):
                    row = rows[at]
                    row[_XID_COUNT_AT] = (row[_XID_COUNT_AT] or 0.0) + v
    return [GpuSample(*row) for row in rows]
