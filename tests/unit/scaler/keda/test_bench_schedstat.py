"""The fleet bench's scheduling probes (bench/_schedstat.py, `bench/fleet_scale.py --schedstat --perf-sched`): a
sampler that reads each thread's CPU and run-queue wait from the kernel, split between windows (ticks) and the rest,
and perf's switch and wake-up records read into who ran on the CPUs while a thread waited for one."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bench import _schedstat

ROOT = Path(__file__).resolve().parents[4]

# Hang guards only, never speeds: at load 20 a nice-19 process can wait seconds for 0.1 s of CPU.
HANG_S = 120.0
SPIN_CPU_S = 0.1  # CPU seconds the busy process spends inside the window, by its own clock (what schedstat counts)
BUSY = (
    "import sys, time\n"
    "print('ready', flush=True)\n"
    "while sys.stdin.readline():\n"
    "    p0 = time.process_time()\n"
    f"    while time.process_time() - p0 < {SPIN_CPU_S}:\n"
    "        pass\n"
    "    print('done', flush=True)\n"
)
IDLE = "import time\nprint('ready', flush=True)\ntime.sleep(600)\n"


def _wait(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + HANG_S
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {HANG_S:g} s (a hang guard)")
        time.sleep(0.002)


def _line(proc: subprocess.Popen[bytes]) -> bytes:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], HANG_S)
    assert ready, f"pid {proc.pid} wrote no line within {HANG_S:g} s (a hang guard)"
    return proc.stdout.readline()


def _sleeps(pid: int) -> int:
    """How many times the sampler's loop thread has blocked (its sleeps between samples)."""
    status = Path(f"/proc/{pid}/task/{pid}/status").read_text()
    found = re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M)
    assert found is not None
    return int(found.group(1))


def _samples(pid: int, whole: int) -> None:
    """Return once the sampler has taken ``whole`` samples that began after this call.

    Each sleep of its loop follows one sample; the first sleep counted may end a sample already under way."""
    seen = _sleeps(pid)
    _wait(lambda: _sleeps(pid) >= seen + whole + 1, f"{whole} samples")


def _opened(pid: int, paths: set[str]) -> bool:
    links = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            links.add(os.readlink(fd))
        except OSError:
            continue
    return paths <= links


def test_the_sampler_charges_a_busy_process_inside_its_window_and_none_outside(tmp_path: Path) -> None:
    """The window is opened and closed by events, not by sleeps: the busy process spins for 0.1 s of its own CPU
    between "go" and "done" and blocks otherwise, and the sampler is known to have read before and after each edge.
    So whatever the machine's load, all of that CPU falls inside the window and almost none outside."""
    out = tmp_path / "sched.txt"
    busy = subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    idle = subprocess.Popen([sys.executable, "-c", IDLE], stdout=subprocess.PIPE, bufsize=0)
    sampler = None
    try:
        assert _line(busy) == b"ready\n"
        assert _line(idle) == b"ready\n"  # both past their start-up CPU, now blocked
        since = time.monotonic()
        sampler = subprocess.Popen(
            [sys.executable, "-m", "bench._schedstat", str(out), "0.01", f"busy={busy.pid}", f"idle={idle.pid}"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
        )
        spid = sampler.pid
        watched = {f"/proc/{p.pid}/task/{p.pid}/schedstat" for p in (busy, idle)}
        _wait(lambda: _opened(spid, watched), "the sampler opened both processes' schedstat")
        _samples(spid, 2)  # an interval before the window
        start = time.monotonic()
        _samples(spid, 1)  # every sample stamped before start has read before "go"
        assert busy.stdin is not None
        busy.stdin.write(b"go\n")
        assert _line(busy) == b"done\n"
        end = time.monotonic()
        _samples(spid, 2)  # an interval after the window
        until = time.monotonic()
        busy.kill()
        busy.wait()
        _samples(spid, 1)  # the sampler reads on past a process that is gone
        assert sampler.stdin is not None
        sampler.stdin.close()
        assert sampler.wait(timeout=HANG_S) == 0
    finally:
        for p in (busy, idle, sampler):
            if p is not None:
                p.kill()
                p.wait()
    split = _schedstat.summarize(out, [(start, end)], since, until)
    assert split.wall["in"] >= end - start  # the intervals overlapping the window cover it
    assert split.wall["out"] > 0
    cpu_in = {role: sum(ns for (r, _), ns in split.cpu["in"].items() if r == role) for role in ("busy", "idle")}
    cpu_out = {role: sum(ns for (r, _), ns in split.cpu["out"].items() if r == role) for role in ("busy", "idle")}
    assert cpu_in["busy"] >= SPIN_CPU_S * 1e9  # all of the spin, however long it waited for a CPU
    assert cpu_out["busy"] < 0.01e9  # blocked on its stdin outside the window
    assert cpu_in["idle"] < 0.01e9
    assert cpu_out["idle"] < 0.01e9
    assert {role for role, _ in split.cpu["in"]} >= {"busy", "idle", "sampler", "machine"}
    assert ("busy", "loop") in split.cpu["in"]  # a process's main thread is its "loop"
    assert "busy" in _schedstat.table(split)


def switch(cpu: int, t: float, prev: tuple[str, int, str], nxt: tuple[str, int]) -> str:
    """A sched_switch line as ``perf script -F cpu,time,event,trace`` writes it."""
    (pc, pp, state), (nc, np_) = prev, nxt
    return (
        f"  [{cpu:03d}]  {t:.6f}: sched:sched_switch: prev_comm={pc} prev_pid={pp} prev_prio=120 prev_state={state} "
        f"==> next_comm={nc} next_pid={np_} next_prio=120\n"
    )


PERF = (
    switch(0, 100.0, ("swapper/0", 0, "R"), ("hog", 10))
    + switch(1, 100.0, ("x", 7, "S"), ("swapper/1", 0))
    + "  [001]  100.200000: sched:sched_wakeup: comm=keda pid=5 prio=120 target_cpu=000\n"
    + switch(0, 100.5, ("hog", 10, "R"), ("keda", 5))
    + switch(0, 100.6, ("keda", 5, "R+"), ("tick", 11))
    + switch(0, 100.7, ("tick", 11, "S"), ("keda", 5))
    + switch(0, 100.8, ("keda", 5, "S"), ("hog", 10))
    + switch(1, 101.0, ("swapper/1", 0, "R"), ("x", 7))
)


def test_a_wait_is_charged_to_whatever_ran_on_each_cpu_meanwhile() -> None:
    events = _schedstat.events(PERF)
    assert len(events) == 8
    roles = {5: "keda", 11: "kvpilot"}
    waits = _schedstat.attribute(events, roles, {"keda"}, [(99.0, 102.0)], _schedstat.comms_of(PERF))
    # woken at 100.2, ran at 100.5 (0.3 s behind the hog on CPU 0, CPU 1 idle); preempted at 100.6, back at 100.7
    assert waits.count == 2
    assert waits.wait_ns == pytest.approx(0.4e9)
    assert waits.held_ns["others"] == pytest.approx(0.3e9)
    assert waits.held_ns["kvpilot"] == pytest.approx(0.1e9)
    assert waits.held_ns["idle"] == pytest.approx(0.4e9)
    assert waits.held_by_comm == {"hog": pytest.approx(0.3e9)}
    assert "2 waits" in _schedstat.waits_table(waits, "keda")
    # a thread the sampler never saw is its process's (``pid/tid`` on each event: the task current then)
    line = "  11/12 [001]  100.900000: sched:sched_wakeup: comm=keda pid=5 prio=120 target_cpu=000"
    threads = _schedstat.processes(PERF + line + "\n")
    assert threads == {12: 11}
    assert _schedstat.with_processes({11: "kvpilot", 5: "keda"}, threads) == {11: "kvpilot", 5: "keda", 12: "kvpilot"}
    assert len(_schedstat.events(line)) == 1
    # only the waits that overlap the spans asked for
    assert _schedstat.attribute(events, roles, {"keda"}, [(100.65, 100.68)]).count == 1
