"""A Ctrl-C while the command line is still importing its modules ends `kvpilot` with one line and status 130.

Before (session 17, helper H): an interrupt in the first second of any command printed a KeyboardInterrupt
traceback, because the console script imported kvpilot.cli (typer, click) outside any handler. The interrupt is
delivered here at a fixed point (the import of typer), so the test does not race a timer.

A SIGTERM there likewise (session 20): `kvpilot run` signalled while it imports its modules or reads its settings
(before its runner handles signals) was killed with status 143 and no log line; it exits 0 with its stop's log
lines, any other command 143 with one line. The signal is sent by the process to itself at a fixed import, and once
to a real `kvpilot run` as soon as its SIGTERM handler is installed.

SIGHUP there likewise (session 31): the early handler covered SIGTERM only, so a SIGHUP in `kvpilot run`'s first ~1 s
(a terminal closed on a starting run) still killed it with status 129 and no word, though the runner stops cleanly on
SIGHUP once it runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

_INTERRUPT_AT_IMPORT = """
import sys

class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "typer":
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, Interrupt())
sys.argv = ["kvpilot", "--help"]
from {module} import main
main()
"""


def _run(module: str) -> subprocess.CompletedProcess[str]:
    code = _INTERRUPT_AT_IMPORT.format(module=module)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_an_interrupt_while_importing_exits_130_without_a_traceback() -> None:
    done = _run("kvpilot._entry")
    assert done.returncode == 130
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() == "interrupted"


def test_the_console_script_enters_through_the_guard() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kvpilot"] == "kvpilot._entry:main"


_TERMINATE_AT_IMPORT = """
import os, signal, sys

class Terminate:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.{signame})
        return None

sys.meta_path.insert(0, Terminate())
sys.argv = ["kvpilot", *sys.argv[1:]]
from kvpilot._entry import main
main()
"""


def _terminated_at(
    module: str, args: list[str], tmp_path: Path, signame: str = "SIGTERM"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _TERMINATE_AT_IMPORT.format(module=module, signame=signame), *args],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env={**os.environ, "XDG_DATA_HOME": str(tmp_path)},
    )  # fmt: skip


@pytest.mark.parametrize("module", ["typer", "kvpilot.settings"], ids=["importing", "reading settings"])
def test_a_sigterm_while_run_starts_exits_0_with_its_log_lines(module: str, tmp_path: Path) -> None:
    done = _terminated_at(module, ["run", "--port", "0"], tmp_path)
    assert done.returncode == 0, (done.returncode, done.stderr)  # was -15: killed, no word
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert [line.split(" ", 3)[2:] for line in lines] == [
        ["INFO", "kvpilot.runtime.runner: SIGTERM while starting (imports, settings): stopping, nothing was started"],
        ["INFO", "kvpilot.runtime.runner: kvpilot stopped"],
    ]
    assert not (tmp_path / "kvpilot").exists()  # nothing was started: no store made


def test_a_sigterm_while_another_command_starts_says_so_and_exits_143(tmp_path: Path) -> None:
    done = _terminated_at("typer", ["version"], tmp_path)
    assert done.returncode == 143
    assert done.stderr.strip() == "terminated (SIGTERM)"


NOT_RELOADED = "SIGHUP: kvpilot does not read its settings again on SIGHUP; restart it to apply them"


@pytest.mark.parametrize("module", ["typer", "kvpilot.settings"], ids=["importing", "reading settings"])
def test_a_sighup_while_run_starts_exits_0_with_its_log_lines(module: str, tmp_path: Path) -> None:
    done = _terminated_at(module, ["run", "--port", "0"], tmp_path, "SIGHUP")
    assert done.returncode == 0, (done.returncode, done.stderr)  # was -1: killed, no word
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert [line.split(" ", 3)[2:] for line in lines] == [
        ["WARNING", "kvpilot.runtime.runner: " + NOT_RELOADED],
        ["INFO", "kvpilot.runtime.runner: SIGHUP while starting (imports, settings): stopping, nothing was started"],
        ["INFO", "kvpilot.runtime.runner: kvpilot stopped"],
    ]
    assert not (tmp_path / "kvpilot").exists()


def test_a_sighup_while_another_command_starts_says_so_and_exits_129(tmp_path: Path) -> None:
    done = _terminated_at("typer", ["version"], tmp_path, "SIGHUP")
    assert done.returncode == 129  # 128 + SIGHUP, as the shell reports a process it ended
    assert done.stderr.strip() == "terminated (SIGHUP)"


def _catches_sigterm(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        caught = next(line for line in f if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/<pid>/status")
def test_a_real_run_signalled_as_soon_as_it_can_be_stops_cleanly(tmp_path: Path) -> None:
    """The console script itself, SIGTERM sent the moment the process catches it (polled every ms)."""
    script = Path(sys.executable).parent / "kvpilot"
    log_path = tmp_path / "run.log"
    command = [str(script), "run", "--port", "0"]
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "KVPILOT_GRPC_PORT": "0"}
    with log_path.open("wb") as out, subprocess.Popen(command, stdout=out, stderr=out, cwd=tmp_path, env=env) as proc:
        deadline = time.monotonic() + 30
        while not _catches_sigterm(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    log = log_path.read_text()
    assert code == 0, log
    assert "SIGTERM" in log, log
    assert "kvpilot stopped" in log, log
    assert "Traceback" not in log, log
