"""NvmlCollector against a stub of the pynvml module.

The stub has the same function names and signatures as nvidia-ml-py (checked below against the real
module), returns the real ctypes structures, and raises the real ``NVMLError`` classes, so the collector
runs the same code path it runs on a GPU node.
"""

# The stub keeps pynvml's own camelCase parameter names: its signatures are checked against the real module.
# ruff: noqa: N803

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any

import pynvml as real
import pytest

from collector.gpus.nvml import RECOVERY_ACTION_FIELD, NvmlCollector, NvmlUnavailable


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    util_pct: int = 50
    used: int = 60 * 2**30
    free: int = 20 * 2**30
    reserved: int = 0  # held by the driver: neither used nor free (NVML's v2 memory query)
    memory_v2: bool = True  # False: the driver answers only the v1 query
    temp: int = 60
    power_mw: int = 350_000
    rows: tuple[int, int, int, int] = (0, 0, 0, 0)
    ecc_uncorrected: int = 0
    replay: int = 0
    reasons: int = 0
    recovery: int | None = 0  # None: field 230 answers NOT_SUPPORTED
    errors: dict[str, int] = field(default_factory=dict)  # function name -> NVML_ERROR_* it raises


def make_nvml(gpus: list[FakeGpu], *, init_error: int | None = None) -> ModuleType:
    m = ModuleType("pynvml_stub")
    for name in dir(real):
        if name.startswith(("NVML_", "nvmlEventType", "nvmlClocksEventReason", "NVMLError", "nvmlMemory_v")):
            setattr(m, name, getattr(real, name))
    m.events = []  # type: ignore[attr-defined]
    m.calls = []  # type: ignore[attr-defined]

    def api(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            m.calls.append((fn.__name__, args))
            handle = args[0] if args and isinstance(args[0], FakeGpu) else None
            if handle is not None and fn.__name__ in handle.errors:
                raise real.NVMLError(handle.errors[fn.__name__])
            return fn(*args, **kwargs)

        wrapper.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
        wrapper.__name__ = fn.__name__
        setattr(m, fn.__name__, wrapper)
        return wrapper

    @api
    def nvmlInit() -> None:
        if init_error is not None:
            raise real.NVMLError(init_error)

    @api
    def nvmlShutdown() -> None:
        pass

    @api
    def nvmlDeviceGetCount() -> int:
        return len(gpus)

    @api
    def nvmlDeviceGetHandleByIndex(index: int) -> FakeGpu:
        return gpus[index]

    @api
    def nvmlDeviceGetUUID(handle: FakeGpu) -> str:
        return handle.uuid

    @api
    def nvmlDeviceGetName(handle: FakeGpu) -> str:
        return handle.name

    @api
    def nvmlDeviceGetUtilizationRates(handle: FakeGpu) -> Any:
        return real.c_nvmlUtilization_t(gpu=handle.util_pct, memory=10)

    @api
    def nvmlDeviceGetMemoryInfo(handle: FakeGpu, version: Any = None) -> Any:
        total = handle.used + handle.free + handle.reserved
        if not version:  # v1: `used` is everything not free, the driver's reserve included
            return real.c_nvmlMemory_t(total=total, free=handle.free, used=handle.used + handle.reserved)
        if not handle.memory_v2:
            raise real.NVMLError(real.NVML_ERROR_FUNCTION_NOT_FOUND)
        return real.c_nvmlMemory_v2_t(
            version=version, total=total, reserved=handle.reserved, free=handle.free, used=handle.used
        )

    @api
    def nvmlDeviceGetTemperature(handle: FakeGpu, sensor: int) -> int:
        assert sensor == real.NVML_TEMPERATURE_GPU
        return handle.temp

    @api
    def nvmlDeviceGetPowerUsage(handle: FakeGpu) -> int:
        return handle.power_mw

    @api
    def nvmlDeviceGetRemappedRows(device: FakeGpu) -> tuple[int, int, int, int]:
        return device.rows

    @api
    def nvmlDeviceGetTotalEccErrors(handle: FakeGpu, errorType: int, counterType: int) -> int:
        assert (errorType, counterType) == (real.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, real.NVML_VOLATILE_ECC)
        return handle.ecc_uncorrected

    @api
    def nvmlDeviceGetPcieReplayCounter(handle: FakeGpu) -> int:
        return handle.replay

    @api
    def nvmlDeviceGetCurrentClocksEventReasons(handle: FakeGpu) -> int:
        return handle.reasons

    @api
    def nvmlDeviceGetRetiredPagesPendingStatus(device: FakeGpu) -> int:
        return 0

    @api
    def nvmlDeviceGetFieldValues(handle: FakeGpu, fieldIds: list[int]) -> Any:
        values = (real.c_nvmlFieldValue_t * len(fieldIds))()
        for i, field_id in enumerate(fieldIds):
            assert field_id == RECOVERY_ACTION_FIELD
            values[i].fieldId = field_id
            if handle.recovery is None:
                values[i].nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
            else:
                values[i].nvmlReturn = real.NVML_SUCCESS
                values[i].valueType = real.NVML_VALUE_TYPE_UNSIGNED_INT
                values[i].value.uiVal = handle.recovery
        return values

    @api
    def nvmlEventSetCreate() -> object:
        return "event-set"

    @api
    def nvmlDeviceRegisterEvents(handle: FakeGpu, eventTypes: int, eventSet: object) -> None:
        assert eventTypes == real.nvmlEventTypeXidCriticalError

    @api
    def nvmlEventSetWait_v2(eventSet: object, timeoutms: int) -> Any:
        assert timeoutms == 0  # never block the collector
        if not m.events:
            raise real.NVMLError(real.NVML_ERROR_TIMEOUT)
        return m.events.pop(0)

    @api
    def nvmlEventSetFree(eventSet: object) -> None:
        pass

    return m


def xid(gpu: FakeGpu, code: int) -> SimpleNamespace:
    return SimpleNamespace(device=gpu, eventType=real.nvmlEventTypeXidCriticalError, eventData=code)


def test_stub_matches_real_pynvml_names_and_signatures() -> None:
    stub = make_nvml([])
    for name in [n for n in dir(stub) if n.startswith("nvml") and callable(getattr(stub, n))]:
        if name.startswith(("nvmlEventType", "nvmlClocksEventReason")):
            continue
        real_params = list(inspect.signature(getattr(real, name)).parameters)
        assert list(inspect.signature(getattr(stub, name)).parameters) == real_params, name


def test_reads_every_field_with_units_converted() -> None:
    gpu = FakeGpu(
        "GPU-a",
        util_pct=87,
        temp=71,
        power_mw=512_300,
        rows=(3, 1, 1, 0),
        ecc_uncorrected=2,
        replay=5,
        reasons=real.nvmlClocksEventReasonHwSlowdown | real.nvmlClocksEventReasonSwPowerCap,
        recovery=2,
    )
    (s,) = NvmlCollector("node-1", nvml=make_nvml([gpu])).collect(100.0)
    assert (s.node, s.index, s.uuid, s.model_name, s.timestamp) == (
        "node-1",
        "0",
        "GPU-a",
        "NVIDIA H100 80GB HBM3",
        100.0,
    )
    assert (s.utilisation, s.temperature_c, s.power_w) == (0.87, 71.0, 512.3)
    assert (s.memory_used_bytes, s.memory_free_bytes) == (60 * 2**30, 20 * 2**30)
    assert (s.remapped_rows_correctable, s.remapped_rows_uncorrectable) == (3.0, 1.0)
    assert (s.row_remap_pending, s.row_remap_failure) == (True, False)
    assert (s.ecc_dbe_volatile, s.pcie_replay, s.recovery_action) == (2.0, 5.0, 2)
    assert (s.last_xid, s.xid_count) == (0, 0.0)  # registered for XIDs, none seen
    assert s.extra["clock_event_reasons"] == 12.0
    assert (s.extra["clock_hw_slowdown"], s.extra["clock_sw_power_cap"], s.extra["clock_hw_thermal_slowdown"]) == (
        1.0,
        1.0,
        0.0,
    )


@pytest.mark.parametrize(
    ("errors", "recovery", "none_fields", "present_field"),
    [
        # remapped rows not supported (pre-Ampere): the four row fields are unknown, utilisation is not
        (
            {"nvmlDeviceGetRemappedRows": real.NVML_ERROR_NOT_SUPPORTED},
            0,
            ("remapped_rows_correctable", "remapped_rows_uncorrectable", "row_remap_pending", "row_remap_failure"),
            "utilisation",
        ),
        # ECC disabled on this board
        ({"nvmlDeviceGetTotalEccErrors": real.NVML_ERROR_NOT_SUPPORTED}, 0, ("ecc_dbe_volatile",), "pcie_replay"),
        # field 230 answers NOT_SUPPORTED in its per-field status (drivers before 550)
        ({}, None, ("recovery_action",), "ecc_dbe_volatile"),
        # no permission to read power: that field only
        ({"nvmlDeviceGetPowerUsage": real.NVML_ERROR_NO_PERMISSION}, 1, ("power_w",), "temperature_c"),
    ],
)
def test_unsupported_call_leaves_only_its_field_unknown(
    errors: dict[str, int], recovery: int | None, none_fields: tuple[str, ...], present_field: str
) -> None:
    gpu = FakeGpu("GPU-a", errors=errors, recovery=recovery)
    (s,) = NvmlCollector("n", nvml=make_nvml([gpu])).collect(1.0)
    for name in none_fields:
        assert getattr(s, name) is None, name
    assert getattr(s, present_field) is not None
    assert "nvml_errors" not in s.extra  # "not supported" is not an error


@pytest.mark.parametrize(("memory_v2", "used_gib"), [(True, 60), (False, 61)])
def test_memory_used_leaves_out_the_driver_reserve_where_nvml_says_it(memory_v2: bool, used_gib: int) -> None:
    gpu = FakeGpu("GPU-a", reserved=2**30, memory_v2=memory_v2)
    (s,) = NvmlCollector("n", nvml=make_nvml([gpu])).collect(1.0)
    assert (s.memory_used_bytes, s.memory_free_bytes) == (used_gib * 2**30, 20 * 2**30)
    assert "nvml_errors" not in s.extra  # a driver without the v2 query is not an error


def test_xid_events_drained_each_collect_and_remembered() -> None:
    g0, g1 = FakeGpu("GPU-0"), FakeGpu("GPU-1")
    nvml = make_nvml([g0, g1])
    collector = NvmlCollector("n", nvml=nvml)
    collector.start()
    nvml.events.extend([xid(g0, 13), xid(g0, 79), xid(g1, 48)])
    first = collector.collect(1.0)
    assert [(s.last_xid, s.xid_count) for s in first] == [(79, 2.0), (48, 1.0)]
    second = collector.collect(2.0)  # nothing new: the last XID is remembered
    assert [(s.last_xid, s.xid_count) for s in second] == [(79, 2.0), (48, 1.0)]
    registrations = [c for c in nvml.calls if c[0] == "nvmlDeviceRegisterEvents"]
    assert len(registrations) == 2  # once per GPU, not per collect


def test_gpu_without_xid_event_support_reports_unknown_not_zero() -> None:
    g0 = FakeGpu("GPU-0", errors={"nvmlDeviceRegisterEvents": real.NVML_ERROR_NOT_SUPPORTED})
    (s,) = NvmlCollector("n", nvml=make_nvml([g0])).collect(1.0)
    assert (s.last_xid, s.xid_count) == (None, None)


def test_lost_gpu_is_flagged_and_collection_goes_on() -> None:
    g0 = FakeGpu("GPU-0", errors={"nvmlDeviceGetUtilizationRates": real.NVML_ERROR_GPU_IS_LOST})
    g1 = FakeGpu("GPU-1", util_pct=10)
    s0, s1 = NvmlCollector("n", nvml=make_nvml([g0, g1])).collect(1.0)
    assert (s0.utilisation, s0.extra["gpu_lost"], s0.extra["nvml_errors"]) == (None, 1.0, 1.0)
    assert s1.utilisation == 0.1


@pytest.mark.parametrize(
    ("code", "text"),
    [
        # no kernel driver on the node
        (real.NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"),
        # no libnvidia-ml.so in the container
        (real.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"),
    ],
)
def test_init_failure_is_a_clear_error(code: int, text: str) -> None:
    with pytest.raises(NvmlUnavailable, match=f"node gpu-7: NVML initialisation failed: {text}"):
        NvmlCollector("gpu-7", nvml=make_nvml([], init_error=code)).collect(1.0)


def test_close_frees_events_and_shuts_down() -> None:
    nvml = make_nvml([FakeGpu("GPU-0")])
    collector = NvmlCollector("n", nvml=nvml)
    collector.collect(1.0)
    collector.close()
    assert [c[0] for c in nvml.calls[-2:]] == ["nvmlEventSetFree", "nvmlShutdown"]
