"""The fleet bench's scheduling probes (bench/_schedstat.py, `bench/fleet_scale.py --schedstat --perf-sched`): a
sampler that reads each thread's CPU and run-queue wait from the kernel, split between windows (ticks) and the rest,
and perf's switch and wake-up records read into who ran on the CPUs while a thread waited for one."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import _schedstat

ROOT = Path(__file__).resolve().parents[4]

SPIN = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end:\n    pass\n"


def test_the_sampler_charges_a_busy_process_inside_its_window_and_none_outside(tmp_path: Path) -> None:
    out = tmp_path / "sched.txt"
    busy = subprocess.Popen([sys.executable, "-c", SPIN])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sampler = subprocess.Popen(
            [sys.executable, "-m", "bench._schedstat", str(out), "0.01", f"busy={busy.pid}", f"idle={idle.pid}"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
        )
        t0 = time.monotonic()
        time.sleep(1.0)
        busy.kill()
        busy.wait()
        t1 = time.monotonic()
        time.sleep(0.5)
        assert sampler.stdin is not None
        sampler.stdin.close()
        assert sampler.wait(timeout=30) == 0
    finally:
        for p in (busy, idle):
            p.kill()
            p.wait()
    split = _schedstat.summarize(out, [(t0 + 0.2, t1 - 0.1)], t0, time.monotonic())
    assert split.wall["in"] > 0.3
    assert split.wall["out"] > 0.2
    assert split.rate("cpu", "in", {"busy"}) > 100  # ms per s: a spinning thread, on a shared machine
    assert split.rate("cpu", "in", {"idle"}) < 20
    assert split.rate("cpu", "out", {"busy"}) < split.rate("cpu", "in", {"busy"})
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
