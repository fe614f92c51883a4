"""GPU health straight from NVML (pynvml / nvidia-ml-py), for nodes without dcgm-exporter.

Runs on the node (a DaemonSet beside the engines). Each ``collect`` reads every whole GPU once and
drains the XID events NVML queued since the last call, so an XID between two collects is not lost
(dcgm-exporter's gauge keeps only the last one). A field a GPU does not support reads ``None``; an
NVML that cannot start raises ``NvmlUnavailable`` naming the cause.

MIG instances are not enumerated: health signals (XID, ECC, row remapping) belong to the physical GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from collector.samples import GpuSample

RECOVERY_ACTION_FIELD = 230  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
_MAX_EVENTS_PER_COLLECT = 4096  # a driver flooding events must not stall the collector

# Errors that mean "this GPU or driver cannot answer this question (in this form)": the field is unknown, no more.
_FIELD_UNAVAILABLE = (
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
)

# clocks event reasons worth a flag of their own (bit names as in nvml.h)
_CLOCK_REASONS = {
    "SwPowerCap": "clock_sw_power_cap",
    "HwSlowdown": "clock_hw_slowdown",
    "SwThermalSlowdown": "clock_sw_thermal_slowdown",
    "HwThermalSlowdown": "clock_hw_thermal_slowdown",
    "HwPowerBrakeSlowdown": "clock_hw_power_brake",
}

# c_nvmlValue_t member for each NVML_VALUE_TYPE_* (double, uint, ulong, ulonglong, slonglong, sint, ushort)
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


class NvmlUnavailable(RuntimeError):
    """NVML could not be loaded or initialised on this node (no driver, no library, no GPUs visible)."""


@dataclass(slots=True)
class _Gpu:
    index: str
    handle: Any
    uuid: str | None
    name: str | None
    xid_registered: bool = False
    last_xid: int = 0
    xid_count: int = 0


@dataclass(slots=True)
class _Reading:
    """Per-GPU call results for one collect; errors other than "not supported" are counted, not raised."""

    nvml: ModuleType
    handle: Any
    extra: dict[str, float] = field(default_factory=dict)

    def call(self, fn_name: str, *args: Any) -> Any:
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:  # an older pynvml without this function
            return None
        try:
            return fn(self.handle, *args)
        except self.nvml.NVMLError as err:
            value = getattr(err, "value", None)
            if value in _codes(self.nvml, _FIELD_UNAVAILABLE):
                return None
            if value == getattr(self.nvml, "NVML_ERROR_GPU_IS_LOST", object()):
                self.extra["gpu_lost"] = 1.0
            self.extra["nvml_errors"] = self.extra.get("nvml_errors", 0.0) + 1.0
            return None


def _codes(nvml: ModuleType, names: tuple[str, ...]) -> set[int]:
    return {getattr(nvml, n) for n in names if hasattr(nvml, n)}


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlCollector:
    """Reads every GPU of this node through NVML; ``nvml`` injects the module (tests), else pynvml is imported."""

    def __init__(self, node: str, *, nvml: ModuleType | None = None) -> None:
        self.node = node
        self._nvml = nvml
        self._gpus: list[_Gpu] | None = None
        self._event_set: Any = None

    # lifecycle -------------------------------------------------------------------------------------

    def _module(self) -> ModuleType:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as err:
                raise NvmlUnavailable(f"node {self.node}: pynvml (nvidia-ml-py) is not installed") from err
            self._nvml = pynvml
        return self._nvml

    def start(self) -> None:
        """Initialise NVML, enumerate GPUs and register for XID events (idempotent)."""
        if self._gpus is not None:
            return
        nvml = self._module()
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except nvml.NVMLError as err:
            raise NvmlUnavailable(f"node {self.node}: NVML initialisation failed: {err}") from err
        gpus = []
        for i, handle in enumerate(handles):
            reading = _Reading(nvml, handle)
            gpus.append(
                _Gpu(str(i), handle, _text(reading.call("nvmlDeviceGetUUID")), _text(reading.call("nvmlDeviceGetName")))
            )
        self._register_xid_events(nvml, gpus)
        self._gpus = gpus

    def _register_xid_events(self, nvml: ModuleType, gpus: list[_Gpu]) -> None:
        try:
            self._event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError:
            return  # no event support at all: last_xid stays unknown
        for gpu in gpus:
            try:
                nvml.nvmlDeviceRegisterEvents(gpu.handle, nvml.nvmlEventTypeXidCriticalError, self._event_set)
                gpu.xid_registered = True
            except nvml.NVMLError:
                gpu.xid_registered = False  # e.g. not supported on this board: unknown, not "no XID"

    def close(self) -> None:
        if self._gpus is None:
            return
        nvml = self._module()
        try:
            if self._event_set is not None:
                nvml.nvmlEventSetFree(self._event_set)
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass  # shutting down: nothing useful to do with a failure
        self._gpus, self._event_set = None, None

    # collection ------------------------------------------------------------------------------------

    def _drain_xid_events(self, nvml: ModuleType, gpus: list[_Gpu]) -> None:
        if self._event_set is None:
            return
        by_uuid = {g.uuid: g for g in gpus if g.uuid is not None}
        for _ in range(_MAX_EVENTS_PER_COLLECT):
            try:
                event = nvml.nvmlEventSetWait_v2(self._event_set, 0)
            except nvml.NVMLError:
                return  # NVML_ERROR_TIMEOUT: queue empty (any other error: try again next collect)
            if not event.eventType & nvml.nvmlEventTypeXidCriticalError:
                continue
            try:
                uuid = _text(nvml.nvmlDeviceGetUUID(event.device))
            except nvml.NVMLError:
                uuid = None
            gpu = by_uuid.get(uuid) if uuid is not None else None
            if gpu is not None:
                gpu.last_xid = int(event.eventData)
                gpu.xid_count += 1

    def collect(self, timestamp: float) -> list[GpuSample]:
        self.start()
        nvml = self._module()
        assert self._gpus is not None
        self._drain_xid_events(nvml, self._gpus)
        return [self._read(nvml, gpu, timestamp) for gpu in self._gpus]

    def _read(self, nvml: ModuleType, gpu: _Gpu, timestamp: float) -> GpuSample:
        r = _Reading(nvml, gpu.handle)
        util = r.call("nvmlDeviceGetUtilizationRates")
        memory = self._memory(nvml, r)
        temperature = r.call("nvmlDeviceGetTemperature", nvml.NVML_TEMPERATURE_GPU)
        power_mw = r.call("nvmlDeviceGetPowerUsage")
        rows = r.call("nvmlDeviceGetRemappedRows")
        ecc = r.call("nvmlDeviceGetTotalEccErrors", nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)
        replay = r.call("nvmlDeviceGetPcieReplayCounter")
        self._clock_reasons(nvml, r)
        pending_pages = r.call("nvmlDeviceGetRetiredPagesPendingStatus")
        if pending_pages is not None:
            r.extra["retired_pages_pending"] = float(pending_pages)
        return GpuSample(
            node=self.node,
            index=gpu.index,
            uuid=gpu.uuid,
            model_name=gpu.name,
            timestamp=timestamp,
            utilisation=None if util is None else util.gpu / 100.0,
            memory_used_bytes=None if memory is None else float(memory.used),
            memory_free_bytes=None if memory is None else float(memory.free),
            temperature_c=None if temperature is None else float(temperature),
            power_w=None if power_mw is None else power_mw / 1000.0,
            last_xid=gpu.last_xid if gpu.xid_registered else None,
            xid_count=float(gpu.xid_count) if gpu.xid_registered else None,
            ecc_dbe_volatile=None if ecc is None else float(ecc),
            remapped_rows_correctable=None if rows is None else float(rows[0]),
            remapped_rows_uncorrectable=None if rows is None else float(rows[1]),
            row_remap_pending=None if rows is None else bool(rows[2]),
            row_remap_failure=None if rows is None else bool(rows[3]),
            pcie_replay=None if replay is None else float(replay),
            recovery_action=self._recovery_action(nvml, r),
            extra=r.extra,
        )

    @staticmethod
    def _memory(nvml: ModuleType, r: _Reading) -> Any:
        """Framebuffer use as nvidia-smi and dcgm-exporter count it: what the driver reserves for itself (616 MiB
        on an H200 with driver 580) is neither used nor free. NVML's v2 query says so; a driver or pynvml without
        it answers the v1 query, whose `used` includes the reserve (tests/fixtures/nvml/README.md)."""
        version = getattr(nvml, "nvmlMemory_v2", None)
        memory = None if version is None else r.call("nvmlDeviceGetMemoryInfo", version)
        return memory if memory is not None else r.call("nvmlDeviceGetMemoryInfo")

    @staticmethod
    def _clock_reasons(nvml: ModuleType, r: _Reading) -> None:
        reasons = r.call("nvmlDeviceGetCurrentClocksEventReasons")
        if reasons is None:  # drivers before 535 only have the older name
            reasons = r.call("nvmlDeviceGetCurrentClocksThrottleReasons")
        if reasons is None:
            return
        r.extra["clock_event_reasons"] = float(reasons)
        for bit_name, key in _CLOCK_REASONS.items():
            bit = getattr(nvml, f"nvmlClocksEventReason{bit_name}", None)
            if bit is not None:
                r.extra[key] = 1.0 if reasons & bit else 0.0

    @staticmethod
    def _recovery_action(nvml: ModuleType, r: _Reading) -> int | None:
        values = r.call("nvmlDeviceGetFieldValues", [RECOVERY_ACTION_FIELD])
        if not values:
            return None
        value = values[0]
        if value.nvmlReturn != nvml.NVML_SUCCESS:
            return None  # per-field status: e.g. NOT_SUPPORTED before driver 550
        try:
            member = _VALUE_MEMBERS[value.valueType]
        except IndexError:
            return None
        return int(getattr(value.value, member))


__all__ = ["RECOVERY_ACTION_FIELD", "NvmlCollector", "NvmlUnavailable"]
