"""Record what NVML answers kvpilot's NVML collector on a real GPU, beside nvidia-smi's own reading.

Run on a GPU node (stdlib + nvidia-ml-py; kvpilot's other dependencies are not needed):

    python3 scripts/nvml_record.py OUT_DIR [--load-seconds 8]

It wraps the real ``pynvml`` module so every call the collector makes is logged with its arguments and its answer
(ctypes structures as their fields, handles as labels, errors as their NVML code), runs ``NvmlCollector.collect``
while the GPU idles and again while PyTorch (if installed) keeps it busy, and takes ``nvidia-smi -q -x`` before and
after each collect. ``tests/unit/collector/test_nvml_recorded.py`` replays the log through the collector (the same
code path, no GPU) and checks what it reads against nvidia-smi's XML, an independent reader of the same driver.

Writes OUT_DIR/nvml_record.json, OUT_DIR/smi_{idle,busy}_{before,after}.xml and OUT_DIR/smi_q.txt.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import importlib.metadata
import inspect
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collector.gpus.nvml import NvmlCollector


class Recorder:
    """A stand-in for the pynvml module: same constants and classes, functions wrapped to log each call."""

    def __init__(self, real: ModuleType) -> None:
        self.real = real
        self.calls: list[dict[str, Any]] = []
        self._labels: dict[int, str] = {}
        self.module = ModuleType("pynvml_recorded")
        for name in dir(real):
            value = getattr(real, name)
            if name.startswith("nvml") and inspect.isfunction(value):
                setattr(self.module, name, self._wrap(name, value))
            else:
                setattr(self.module, name, value)

    def _label(self, pointer: Any) -> str:
        address = ctypes.cast(pointer, ctypes.c_void_p).value or 0
        return self._labels.setdefault(address, f"handle-{len(self._labels)}")

    def encode(self, value: Any) -> Any:
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, bytes):
            return {"bytes": value.decode(errors="replace")}
        if isinstance(value, ctypes._Pointer):  # device and event-set handles
            return {"handle": self._label(value)}
        if isinstance(value, ctypes.Array):
            return {"array": [self.encode(v) for v in value]}
        if isinstance(value, ctypes.Structure | ctypes.Union):
            fields = {name: self.encode(getattr(value, name)) for name, *_ in value._fields_}
            return {"ctype": type(value).__name__, "fields": fields}
        if isinstance(value, list | tuple):
            return {"tuple": [self.encode(v) for v in value]}
        if hasattr(value, "__dict__"):  # pynvml's friendly objects (nvmlFriendlyObject)
            return {"object": {k: self.encode(v) for k, v in vars(value).items()}}
        return {"repr": repr(value)}

    def _wrap(self, name: str, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            entry: dict[str, Any] = {"fn": name, "args": [self.encode(a) for a in args], "t": time.time()}
            if kwargs:
                entry["kwargs"] = {k: self.encode(v) for k, v in kwargs.items()}
            self.calls.append(entry)
            try:
                result = fn(*args, **kwargs)
            except self.real.NVMLError as err:
                entry["error"] = {"value": getattr(err, "value", None), "text": str(err)}
                raise
            entry["result"] = self.encode(result)
            return result

        call.__name__ = name
        call.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
        return call


def smi(out: Path, name: str) -> None:
    xml = subprocess.run(["nvidia-smi", "-q", "-x"], capture_output=True, text=True, timeout=60, check=True).stdout
    (out / f"smi_{name}.xml").write_text(xml)


def busy(seconds: float, started: threading.Event) -> str:
    """Keep the GPU busy with bf16 matrix products for `seconds` (setting `started` once the first ones have run);
    returns what ran, or why nothing did."""
    try:
        import torch
    except ImportError:
        started.set()
        return "no torch: busy phase skipped"
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        a @ a
        n += 1
        if n % 16 == 0:
            torch.cuda.synchronize()
            started.set()
    torch.cuda.synchronize()
    return f"torch {torch.__version__}: {n} bf16 8192^3 products"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--load-seconds", type=float, default=8.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    import pynvml

    recorder = Recorder(pynvml)
    collector = NvmlCollector("device-node", nvml=recorder.module)
    try:
        version = importlib.metadata.version("nvidia-ml-py")
    except importlib.metadata.PackageNotFoundError:
        version = None
    record: dict[str, Any] = {"nvidia-ml-py": version, "phases": {}}
    (args.out / "smi_q.txt").write_text(subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True).stdout)

    smi(args.out, "idle_before")
    samples = collector.collect(time.time())
    smi(args.out, "idle_after")
    record["phases"]["idle"] = {"calls_until": len(recorder.calls), "samples": [dataclasses.asdict(s) for s in samples]}

    started = threading.Event()
    result: dict[str, str] = {}
    worker = threading.Thread(target=lambda: result.update(busy=busy(args.load_seconds, started)))
    worker.start()
    started.wait(timeout=60)
    time.sleep(2.0)  # NVML's utilisation is the busy share of its last sample period (1/6 s to 1 s)
    smi(args.out, "busy_before")
    samples = collector.collect(time.time())
    smi(args.out, "busy_after")
    worker.join()
    record["phases"]["busy"] = {
        "calls_until": len(recorder.calls),
        "samples": [dataclasses.asdict(s) for s in samples],
        "load": result.get("busy"),
    }
    collector.close()
    record["calls"] = recorder.calls
    (args.out / "nvml_record.json").write_text(json.dumps(record, indent=1, default=repr))
    for phase, body in record["phases"].items():
        print(phase, json.dumps(body["samples"], default=repr)[:2000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
