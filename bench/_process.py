"""Helpers the process-level benches share: start a process with its log, wait for a line in it, read a metric."""

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
