"""Free loopback ports for the real services the tests start."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, *, timeout_s: float = 30.0, proc: object | None = None) -> None:
    """Poll `url` until it answers 200; fail with the process's output if it died first."""
    import httpx

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        poll = getattr(proc, "poll", None)
        if poll is not None and poll() is not None:
            raise RuntimeError(f"process exited with {poll()} before {url} answered")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError as e:
            last = e
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout_s} s (last error: {last})")


@contextmanager
def running(
    argv: list[str], *, log: Path, ready_url: str, cwd: Path | None = None, timeout_s: float = 30.0
) -> Iterator[subprocess.Popen[bytes]]:
    """Start a real server process with its output in `log`, wait until `ready_url` answers, stop it on exit.
    A process that does not come up fails with the tail of its log, which says why."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd)
    try:
        try:
            wait_http(ready_url, proc=proc, timeout_s=timeout_s)
        except (RuntimeError, TimeoutError) as e:
            raise RuntimeError(f"{' '.join(argv[:2])} did not start: {e}\n{log.read_text()[-3000:]}") from None
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
