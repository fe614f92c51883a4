"""A stop signal while `kvpilot run` restores the forecasters' stored day (session 19, after 3c4be6b).

Since 3c4be6b the warm start runs in a daemon thread while HTTP and KEDA are already served, and a stop meanwhile
does not wait for it. Here a real `kvpilot run` process scores a real (generated) day of 200 deployments, ~30 s of
CPU in that thread, and gets SIGTERM (or SIGINT) once /healthz answered during it: the process exits with 0 within
10 s, its log tells the stop during the warm start and the usual shutdown after the signal, no traceback and no
write lost, the SQLite store is intact and both ports (HTTP, KEDA gRPC) are free again.

Before that, while the store is prepared (migrations and the restore reads, in a thread), SIGTERM had its default
action: the process died with no log line and status 143. It is handled from the start of `kvpilot run` now.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.helpers.poll import wait_for
from tests.services.ports import free_port

pytestmark = pytest.mark.e2e

# `kvpilot run` through its console entry point, its warm start fed a generated day of 200 deployments x 1,440
# per-minute rates (lazily: the real warm_start and planner score each point as a restored roll-up).
HELD_OPEN = """
import math, sys, time
from kvpilot.runtime import restore, service
from store.repo.rollups import RollupPoint

def day():
    t0 = time.time() - 86_400.0
    for m in range(1440):
        for d in range(200):
            rate = (2 + d % 8) * (1 + 0.6 * math.sin(2 * math.pi * m / 1440))
            yield RollupPoint(f"ns/d{d}", t0 + 60.0 * m, 1, {"arrival_rate": rate})

def held_open(planner, rollups):
    sys.stderr.write("TEST: warm start entered\\n")
    sys.stderr.flush()
    fed = restore.warm_start(planner, day())
    sys.stderr.write("TEST: warm start ended\\n")
    return fed

service.warm_start = held_open
sys.argv = ["kvpilot", *sys.argv[1:]]
from kvpilot._entry import main
main()
"""

# `kvpilot run` whose store preparation (build_service: migrations, restore reads) takes a minute.
SLOW_STORE = """
import sys, time
from kvpilot.runtime import runner

real = runner.build_service

def slow(*args, **kwargs):
    sys.stderr.write("TEST: store preparation entered\\n")
    sys.stderr.flush()
    time.sleep(60.0)
    return real(*args, **kwargs)

runner.build_service = slow
sys.argv = ["kvpilot", *sys.argv[1:]]
from kvpilot._entry import main
main()
"""


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _signalled_while(
    tmp_path: Path, code: str, stage: str, sig: signal.Signals, env: dict[str, str], check: Callable[[int], None]
) -> tuple[int, str]:
    """`kvpilot run` (``code``) signalled once its log says ``TEST: <stage> entered`` and ``check(http_port)``
    passed; asserts it exits with 0 within 10 s, the shutdown lines in order, and no traceback or error. Returns
    the HTTP port and the log."""
    http_port = free_port()
    log_path = tmp_path / "run.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, "run", "--port", str(http_port)],
            env={**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(
                lambda: f"TEST: {stage} entered" in log_path.read_text() or proc.poll() is not None,
                timeout_s=60,
                every_s=0.1,
                what=f"the {stage} entered",
            )
            assert proc.poll() is None, log_path.read_text()
            check(http_port)
            signalled = time.monotonic()
            proc.send_signal(sig)
            exit_code = proc.wait(timeout=30)
            took_s = time.monotonic() - signalled
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    log = log_path.read_text()
    assert exit_code == 0, log
    assert took_s < 10.0, f"{took_s:.1f} s from {sig.name} to exit\n{log}"
    order = [f"{sig.name}: abandoning the tick in progress, flushing the store, stopping", "kvpilot stopped"]
    at = [log.find(line) for line in order]
    assert -1 not in at, log
    assert at == sorted(at), log
    for bad in ("Traceback", "writes the store did not take", "Fatal Python error", " ERROR "):
        assert bad not in log, log
    assert _free(http_port)
    return http_port, log


@pytest.mark.parametrize(
    ("sig", "serve_from"),
    [(signal.SIGTERM, "loop"), (signal.SIGINT, "process")],
    ids=["SIGTERM-loop", "SIGINT-process"],
)
def test_a_stop_during_the_warm_start_ends_run_promptly_and_cleanly(
    tmp_path: Path, sig: signal.Signals, serve_from: str
) -> None:
    grpc_port = free_port()

    def serving_while_held(http_port: int) -> None:
        assert httpx.get(f"http://127.0.0.1:{http_port}/healthz", timeout=5).status_code == 200
        assert "TEST: warm start ended" not in (tmp_path / "run.log").read_text()  # the signal lands in it

    env = {"KVPILOT_GRPC_PORT": str(grpc_port), "KVPILOT_KEDA__SERVE_FROM": serve_from}
    _, log = _signalled_while(tmp_path, HELD_OPEN, "warm start", sig, env, serving_while_held)
    assert "TEST: warm start ended" not in log  # abandoned, not waited for
    at = log.find("stopping during warm start: the forecasters' history was not all restored")
    assert log.find(sig.name) < at < log.find("kvpilot stopped"), log
    with sqlite3.connect(tmp_path / "data" / "kvpilot" / "kvpilot.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert _free(grpc_port)


def test_a_stop_while_the_store_is_prepared_ends_run_with_0_and_a_log_line(tmp_path: Path) -> None:
    env = {"KVPILOT_GRPC_PORT": str(free_port())}
    _, log = _signalled_while(tmp_path, SLOW_STORE, "store preparation", signal.SIGTERM, env, lambda _: None)
    at = log.find("stopping while the store was prepared (migrations, restore): abandoned, nothing was started")
    assert log.find("SIGTERM") < at < log.find("kvpilot stopped"), log


# `kvpilot run` as its console entry runs it, saying when it starts.
PLAIN = """
import sys
sys.stderr.write("TEST: run entered\\n")
sys.stderr.flush()
sys.argv = ["kvpilot", *sys.argv[1:]]
from kvpilot._entry import main
main()
"""


def test_sighup_stops_run_as_sigterm_does_saying_the_settings_are_not_read_again(tmp_path: Path) -> None:
    # SIGHUP had its default action: kvpilot killed with no word and no shutdown (status 129), whether an operator
    # sent it to reload the settings, as Prometheus takes it, or the terminal it ran in closed
    grpc_port = free_port()

    def ticking(http_port: int) -> None:
        def ready() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{http_port}/readyz", timeout=5).status_code == 200
            except httpx.TransportError:  # not listening yet
                return False

        wait_for(ready, timeout_s=60, every_s=0.2, what="kvpilot ready (its first tick done)")

    env = {"KVPILOT_GRPC_PORT": str(grpc_port), "KVPILOT_KEDA__SERVE_FROM": "process"}
    _, log = _signalled_while(tmp_path, PLAIN, "run", signal.SIGHUP, env, ticking)
    assert "SIGHUP: kvpilot does not read its settings again on SIGHUP; restart it to apply them" in log
    with sqlite3.connect(tmp_path / "data" / "kvpilot" / "kvpilot.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert _free(grpc_port)
