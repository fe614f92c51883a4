"""Helpers the process-level benches share: start a process with its log, wait for a line in it, read a metric,
and the CPU and peak memory of a process with its children (kvpilot's answer reader)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def spawn(argv: list[str], *, env: dict[str, str] | None = None, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=log.open("wb"), stderr=subprocess.STDOUT
    )


def wait_line(log: Path, pattern: str, proc: subprocess.Popen[bytes], timeout_s: float) -> re.Match[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        m = re.search(pattern, log.read_text(errors="replace"))
        if m:
            return m
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    raise TimeoutError(f"no {pattern!r} in {log} within {timeout_s} s: {log.read_text()[-2000:]}")


def metric(text: str, name: str) -> float | None:
    """The first sample of ``name`` on a /metrics page (any labels), or None."""
    m = re.search(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def tree(pid: int) -> list[int]:
    """The process and its children (kvpilot's answer reader, spawned on the first round)."""
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return [pid, *kids]


def tree_cpu_s(pid: int) -> float:
    """utime + stime of the process and its live children."""
    total = 0.0
    for p in tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def tree_hwm_mb(pid: int) -> float:
    """Peak RSS (VmHWM) of the process plus its live children's."""
    total = 0.0
    for p in tree(pid):
        try:
            lines = Path(f"/proc/{p}/status").read_text().splitlines()
        except OSError:
            continue
        total += sum(int(line.split()[1]) / 1024 for line in lines if line.startswith("VmHWM:"))
    return total
