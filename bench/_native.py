"""The native KEDA client (``bench/native/keda_client.cc``): built on demand, run by ``bench/keda.py --client native``
and ``bench/fleet_scale.py --keda-client native``, its output read back.

KEDA's own client is Go (grpc-go); a Python client's per-call cost and its CPU share of this 2-core VM would sit
inside every latency it reports. This one is C++ against Debian's grpc (``libgrpc++-dev``, ``protobuf-compiler-grpc``):
stubs generated from ``scaler/keda/externalscaler.proto`` and ``bench/native/health.proto`` by protoc and
grpc_cpp_plugin, compiled with ``g++ -O2`` into ``bench/native/build/`` (git-ignored), rebuilt when a source changes.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NATIVE = ROOT / "bench" / "native"
BUILD = NATIVE / "build"
BINARY = BUILD / "keda_client"
PROTOS = (ROOT / "scaler" / "keda" / "externalscaler.proto", NATIVE / "health.proto")
SOURCE = NATIVE / "keda_client.cc"
CXXFLAGS = ("-O2", "-std=c++17")
PACKAGES = "g++ libgrpc++-dev protobuf-compiler-grpc pkg-config"
# the names the native client prints -> bench/keda.py's row labels
LABELS = {"GetMetrics": "kvpilot GetMetrics", "Health.Check": "grpc Health.Check"}


class NativeUnavailable(RuntimeError):
    """The native client cannot be built here (no compiler or no grpc headers), or its build failed."""


def missing() -> list[str]:
    """What the build needs and this machine lacks (empty when it can build)."""
    lacks = [tool for tool in ("g++", "protoc", "grpc_cpp_plugin", "pkg-config") if shutil.which(tool) is None]
    if shutil.which("pkg-config") is not None:
        for module in ("grpc++", "protobuf"):
            if subprocess.run(["pkg-config", "--exists", module], check=False).returncode != 0:
                lacks.append(f"{module} (pkg-config)")
    return lacks


def _fingerprint() -> str:
    digest = hashlib.sha256(" ".join(CXXFLAGS).encode())
    for path in (SOURCE, *PROTOS):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def build() -> Path:
    """The native client's binary, built first if absent or older than its sources (under a lock: one build at a
    time). Raises NativeUnavailable with what to install when the compiler or the grpc packages are missing."""
    lacks = missing()
    if lacks:
        raise NativeUnavailable(
            f"the native KEDA client cannot be built: missing {', '.join(lacks)} "
            f"(Debian: apt-get install -y {PACKAGES}); or run with --client python"
        )
    stamp = BUILD / "keda_client.sha256"
    want = _fingerprint()
    BUILD.mkdir(parents=True, exist_ok=True)
    with (BUILD / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if BINARY.exists() and stamp.exists() and stamp.read_text() == want:
            return BINARY
        with tempfile.TemporaryDirectory(dir=BUILD) as d:
            out = Path(d)
            plugin = shutil.which("grpc_cpp_plugin")
            flags = subprocess.run(
                ["pkg-config", "--cflags", "--libs", "grpc++", "protobuf"], capture_output=True, text=True, check=True
            ).stdout.split()
            steps = [
                [
                    "protoc",
                    *(f"-I{p.parent}" for p in PROTOS),
                    f"--cpp_out={out}",
                    f"--grpc_out={out}",
                    f"--plugin=protoc-gen-grpc={plugin}",
                    *(p.name for p in PROTOS),
                ],
                [
                    "g++",
                    *CXXFLAGS,
                    f"-I{out}",
                    str(SOURCE),
                    *(str(out / f"{p.stem}{suffix}") for p in PROTOS for suffix in (".pb.cc", ".grpc.pb.cc")),
                    *flags,
                    "-o",
                    str(out / BINARY.name),
                ],
            ]
            for argv in steps:
                done = subprocess.run(argv, capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    raise NativeUnavailable(f"building the native KEDA client failed: {argv[0]}: {done.stderr[-2000:]}")
            (out / BINARY.name).replace(BINARY)
        stamp.write_text(want)
    return BINARY


@dataclass
class Rounds:
    """``keda_client rounds`` output: per method (bench/keda.py's row label), one value per round."""

    p50_ms: dict[str, list[float]] = field(default_factory=dict)
    p99_ms: dict[str, list[float]] = field(default_factory=dict)
    calls_s: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    paced_cpu_s: float = 0.0  # the client's CPU seconds in all paced phases together
    paced_calls: int = 0


def parse_rounds(text: str) -> Rounds:
    """Reads ``round R method M p50_ms X p99_ms Y saturated_calls_s Z calls N errors E paced_cpu_s C`` lines; any
    other line is an error (the client prints nothing else on stdout)."""
    rounds = Rounds()
    for line in text.splitlines():
        words = line.split()
        if len(words) != 16 or words[0] != "round" or words[2] != "method" or words[3] not in LABELS:
            raise ValueError(f"not a line of the native KEDA client: {line!r}")
        values = dict(zip(words[4::2], words[5::2], strict=True))
        label = LABELS[words[3]]
        rounds.p50_ms.setdefault(label, []).append(float(values["p50_ms"]))
        rounds.p99_ms.setdefault(label, []).append(float(values["p99_ms"]))
        rounds.calls_s.setdefault(label, []).append(float(values["saturated_calls_s"]))
        rounds.errors[label] = rounds.errors.get(label, 0) + int(values["errors"])
        rounds.paced_cpu_s += float(values["paced_cpu_s"])
        rounds.paced_calls += int(values["calls"])
    if not rounds.p99_ms:
        raise ValueError("the native KEDA client printed no rounds")
    return rounds


def run_rounds(port: int, objects: int, interval: float, seconds: float, rounds: int) -> Rounds:
    """bench/keda.py's workload from the native client against a server on 127.0.0.1:``port``."""
    argv = [str(build()), "--port", str(port), "rounds", "--objects", str(objects), "--interval", str(interval)]
    argv += ["--seconds", str(seconds), "--rounds", str(rounds)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the native KEDA client exited {done.returncode}: {done.stderr[-2000:]}")
    return parse_rounds(done.stdout)


def schedule_argv(port: int, period_s: float, namespace: str, name: str, out: Path) -> list[str]:
    """bench/fleet_scale.py's probe from the native client: calls until its stdin closes, then writes
    ``method sent done code`` lines to ``out``."""
    argv = [str(build()), "--port", str(port), "schedule", "--period", repr(period_s)]
    return [*argv, "--namespace", namespace, "--name", name, "--out", str(out)]
