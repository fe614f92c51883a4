"""NvmlCollector replayed against what NVML answered on a real H200, and checked against nvidia-smi.

`scripts/nvml_record.py` ran the collector on a GPU node through a recording wrapper of the real pynvml module
(every call, its arguments and its answer), once while the GPU idled and once while PyTorch kept it busy, and
took `nvidia-smi -q -x` just before and after each collect (tests/fixtures/nvml/README.md). Here the recording is
replayed through the same collector code: what it reads must be what it read on the GPU, and must agree with
nvidia-smi, a second reader of the same driver — exactly where nothing moves (identity, memory, error counters,
flags), within the two readings around it where something does (temperature, power, utilisation).
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import xml.etree.ElementTree as ET
from collections import defaultdict, deque
from pathlib import Path
from types import ModuleType
from typing import Any

import pynvml as real
import pytest

from collector.gpus.nvml import NvmlCollector

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvml"
MIB = 2**20


@dataclasses.dataclass(frozen=True)
class Handle:
    label: str


def decode(value: Any) -> Any:
    """The inverse of scripts/nvml_record.py's `Recorder.encode`, into pynvml's own ctypes classes."""
    if not isinstance(value, dict):
        return value
    if "handle" in value:
        return Handle(value["handle"])
    if "tuple" in value:
        return tuple(decode(v) for v in value["tuple"])
    if "bytes" in value:
        return value["bytes"].encode()
    if "array" in value:
        items = [decode(v) for v in value["array"]]
        if items and isinstance(items[0], ctypes.Structure):
            return (type(items[0]) * len(items))(*items)
        return items
    if "ctype" in value:
        struct = getattr(real, value["ctype"])()
        for name, field in value["fields"].items():
            setattr(struct, name, decode(field))
        return struct
    raise ValueError(f"cannot decode {value!r}")


def encode_arg(value: Any) -> Any:
    if isinstance(value, Handle):
        return {"handle": value.label}
    if isinstance(value, list | tuple):
        return {"tuple": [encode_arg(v) for v in value]}
    return value


def replay(calls: list[dict[str, Any]], *, without: tuple[str, ...] = ()) -> ModuleType:
    """A pynvml stand-in answering each (function, arguments) with the answers recorded for it, in order; a call
    the GPU was never asked fails loudly (re-record with scripts/nvml_record.py). `without` drops module names,
    as an older pynvml lacks them."""
    answers: dict[tuple[str, str], deque[dict[str, Any]]] = defaultdict(deque)
    for call in calls:
        answers[call["fn"], json.dumps(call["args"])].append(call)
    m = ModuleType("pynvml_replayed")
    functions = []
    for name in dir(real):
        if name in without:
            continue
        value = getattr(real, name)
        if name.startswith("nvml") and callable(value) and not isinstance(value, type):
            functions.append(name)
        else:
            setattr(m, name, value)  # constants, ctypes classes, NVMLError and its subclasses

    def function(name: str) -> Any:
        def answer(*args: Any) -> Any:
            key = (name, json.dumps([encode_arg(a) for a in args]))
            queue = answers.get(key)
            if not queue:
                raise AssertionError(f"{name}{args} was not recorded on the GPU: re-run scripts/nvml_record.py")
            call = queue.popleft() if len(queue) > 1 else queue[0]  # the last answer stands for later calls
            if "error" in call:
                raise real.NVMLError(call["error"]["value"])
            return decode(call["result"])

        return answer

    for name in functions:
        setattr(m, name, function(name))
    return m


def load(directory: str) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((FIXTURES / directory / "nvml_record.json").read_text())
    return record


def smi(directory: str, phase: str) -> list[ET.Element]:
    """The GPU element of nvidia-smi's XML taken before and after the phase's collect."""
    return [
        ET.parse(FIXTURES / directory / f"smi_{phase}_{when}.xml").getroot().find("gpu") for when in ("before", "after")
    ]  # type: ignore[misc]


def number(gpu: ET.Element, path: str) -> float:
    text = gpu.findtext(path)
    assert text is not None, path
    return float(text.split()[0])


def collect_replayed(record: dict[str, Any], **replay_options: Any) -> dict[str, Any]:
    collector = NvmlCollector("device-node", nvml=replay(record["calls"], **replay_options))
    out = {}
    for phase in ("idle", "busy"):
        (expected,) = record["phases"][phase]["samples"]
        (sample,) = collector.collect(expected["timestamp"])
        out[phase] = sample
    collector.close()
    return out


# Fields GpuSample gained after the recording, at the value the NVML collector leaves them (it reads one local
# GPU: no page of its own to name). Any other difference is a difference in what was read.
_ADDED_SINCE_RECORDING = {"page": ""}


def recorded_sample(record: dict[str, Any], phase: str) -> dict[str, Any]:
    return {**_ADDED_SINCE_RECORDING, **record["phases"][phase]["samples"][0]}


def test_replay_reads_what_the_collector_read_on_the_gpu() -> None:
    record = load("h200")
    samples = collect_replayed(record)
    for phase, sample in samples.items():
        assert dataclasses.asdict(sample) == recorded_sample(record, phase), phase


@pytest.mark.parametrize("phase", ["idle", "busy"])
def test_readings_agree_with_nvidia_smi(phase: str) -> None:
    sample = collect_replayed(load("h200"))[phase]
    before, after = smi("h200", phase)
    assert sample.uuid == before.findtext("uuid")
    assert sample.model_name == before.findtext("product_name") == "NVIDIA H200"
    # memory: nvidia-smi counts in whole MiB (each figure rounded its own way) and leaves out what the driver
    # reserves, as the collector does
    assert sample.memory_used_bytes is not None
    assert sample.memory_free_bytes is not None
    for gpu in (before, after):
        assert abs(sample.memory_used_bytes / MIB - number(gpu, "fb_memory_usage/used")) <= 1
        assert abs(sample.memory_free_bytes / MIB - number(gpu, "fb_memory_usage/free")) <= 1
    # moving values: within what nvidia-smi read just before and just after (power is its 1 s average)
    for field, path, scale, slack in (
        ("temperature_c", "temperature/gpu_temp", 1.0, 1.0),
        ("power_w", "gpu_power_readings/average_power_draw", 1.0, 0.5),
        ("utilisation", "utilization/gpu_util", 0.01, 0.01),
    ):
        readings = [number(gpu, path) * scale for gpu in (before, after)]
        assert min(readings) - slack <= getattr(sample, field) <= max(readings) + slack, (field, readings)
    # error counters and flags: exact
    uncorrectable = ("dram_uncorrectable", "sram_uncorrectable_parity", "sram_uncorrectable_secded")
    assert sample.ecc_dbe_volatile == sum(number(before, f"ecc_errors/volatile/{k}") for k in uncorrectable)
    assert sample.remapped_rows_correctable == number(before, "remapped_rows/remapped_row_corr")
    assert sample.remapped_rows_uncorrectable == number(before, "remapped_rows/remapped_row_unc")
    assert sample.row_remap_pending is (before.findtext("remapped_rows/remapped_row_pending") == "Yes")
    assert sample.row_remap_failure is (before.findtext("remapped_rows/remapped_row_failure") == "Yes")
    assert sample.pcie_replay == number(before, "pci/replay_counter")
    assert before.findtext("gpu_recovery_action") == "None"
    assert sample.recovery_action == 0  # NVML_GPU_RECOVERY_ACTION_NONE
    for key, tag in (
        ("clock_sw_power_cap", "sw_power_cap"),
        ("clock_hw_slowdown", "hw_slowdown"),
        ("clock_hw_thermal_slowdown", "hw_thermal_slowdown"),
        ("clock_hw_power_brake", "hw_power_brake_slowdown"),
    ):
        active = {
            gpu.findtext(f"clocks_event_reasons/clocks_event_reason_{tag}") == "Active" for gpu in (before, after)
        }
        assert bool(sample.extra[key]) in active, key


def test_busy_gpu_reads_busy() -> None:
    """The busy phase is a real load (bf16 matrix products at the 700 W cap), not an idle GPU read twice."""
    samples = collect_replayed(load("h200"))
    idle, busy = samples["idle"], samples["busy"]
    assert idle.utilisation == 0.0
    assert busy.utilisation is not None
    assert busy.utilisation >= 0.95
    assert busy.power_w is not None
    assert idle.power_w is not None
    assert busy.power_w > 5 * idle.power_w
    assert (idle.extra["clock_sw_power_cap"], busy.extra["clock_sw_power_cap"]) == (0.0, 1.0)
    assert (busy.last_xid, busy.xid_count) == (0, 0.0)  # XID events registered on this GPU, none raised


def test_without_memory_v2_used_includes_the_driver_reserve() -> None:
    """A pynvml without the v2 memory query (recorded before the collector asked for it): `used` is then NVML's
    v1 figure, nvidia-smi's used plus its reserved — documented, not hidden."""
    record = load("h200_memory_v1")
    samples = collect_replayed(record, without=("nvmlMemory_v2",))
    for phase, sample in samples.items():
        assert dataclasses.asdict(sample) == recorded_sample(record, phase), phase
        before, _ = smi("h200_memory_v1", phase)
        used = number(before, "fb_memory_usage/used") + number(before, "fb_memory_usage/reserved")
        assert abs(sample.memory_used_bytes / MIB - used) <= 1.5  # type: ignore[operator]  # two MiB roundings
