"""Where the CPUs go while a bench runs: each thread's CPU time and run-queue wait, sampled from the kernel.

A sampler process (``python -m bench._schedstat OUT PERIOD ROLE=PID ...``) reads ``/proc/<pid>/task/<tid>/schedstat``
(nanoseconds on a CPU, nanoseconds runnable but waiting for one, time slices) of every thread of each named
process and of its children, every ``PERIOD`` seconds, until its stdin closes; then writes one line per thread and
sample: ``t role thread cpu_ns wait_ns`` (``t`` monotonic seconds, system-wide on Linux as the benches' own
clocks). A child of ``kvpilot`` is named by what it runs: ``keda`` (``scaler.keda.process``), ``reader`` (the
answer reader, multiprocessing's spawn), else ``kvpilot-child``. A thread is ``loop`` when it is its process's
main thread, else its ``comm`` with digits dropped (a pool's threads together). The sampler counts itself too
(``sampler``), and the whole machine from ``/proc/stat`` (role ``machine``, thread ``busy``: CPU time of every
process, in clock ticks, and as its wait the hypervisor's steal). Its files are opened once and re-read
(``pread``); the thread lists are read again every 0.5 s.

``summarize`` splits the increments between the intervals inside a set of windows (a tick) and the rest:
milliseconds of CPU and of run-queue wait per second of wall time, per role and thread.
"""

from __future__ import annotations

import bisect
import itertools
import os
import re
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

RESCAN_S = 0.5


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    kids.extend(int(k) for k in f.read().split())
            except OSError:
                continue
    except OSError:
        pass
    return kids


def _child_role(parent_role: str, pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return f"{parent_role}-child"
    if "scaler.keda.process" in cmd:
        return "keda"
    if "multiprocessing" in cmd and "resource_tracker" not in cmd:
        return "reader"
    return f"{parent_role}-child"


def _thread_name(pid: int, tid: int) -> str:
    if pid == tid:
        return "loop"
    try:
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            return re.sub(r"[\d_-]+$", "", f.read().strip()) or "thread"
    except OSError:
        return "thread"


def _tasks(roots: dict[str, int]) -> dict[tuple[int, int], tuple[str, str]]:
    """(pid, tid) -> (role, thread) for every thread of the roots and of their direct children."""
    out: dict[tuple[int, int], tuple[str, str]] = {}
    procs = [(role, pid) for role, pid in roots.items()]
    named = set(roots.values())
    for role, pid in list(procs):
        procs.extend((_child_role(role, kid), kid) for kid in _children(pid) if kid not in named)
    for role, pid in procs:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            out[(pid, tid)] = (role, _thread_name(pid, tid))
    return out


def sample(out: Path, period_s: float, roots: dict[str, int]) -> None:
    """The sampler's loop: until stdin closes, then the lines to ``out``."""
    roots = {**roots, "sampler": os.getpid()}
    closed = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        closed.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    fds: dict[tuple[int, int], int] = {}
    names: dict[tuple[int, int], tuple[str, str]] = {}
    lines: list[str] = []
    rescanned = 0.0
    stat_fd = os.open("/proc/stat", os.O_RDONLY)
    tick_ns = 10**9 // os.sysconf("SC_CLK_TCK")
    next_at = time.monotonic()
    while not closed.is_set():
        now = time.monotonic()
        if now - rescanned >= RESCAN_S:
            rescanned = now
            for key, name in _tasks(roots).items():
                if key not in fds:
                    try:
                        fds[key] = os.open(f"/proc/{key[0]}/task/{key[1]}/schedstat", os.O_RDONLY)
                    except OSError:
                        continue
                    names[key] = name
        t = time.monotonic()
        cpu_line = os.pread(stat_fd, 256, 0).split(b"\n", 1)[0].split()
        busy = sum(int(cpu_line[i]) for i in (1, 2, 3, 6, 7))  # user nice system irq softirq
        lines.append(f"{t!r} machine busy -1 {busy * tick_ns} {int(cpu_line[8]) * tick_ns}\n")
        for key, fd in list(fds.items()):
            try:
                cpu, wait, _ = os.pread(fd, 128, 0).split()
            except (OSError, ValueError):
                os.close(fd)
                del fds[key]
                continue
            role, thread = names[key]
            lines.append(f"{t!r} {role} {thread} {key[1]} {int(cpu)} {int(wait)}\n")
        next_at = max(next_at + period_s, time.monotonic())
        time.sleep(max(0.0, next_at - time.monotonic()))
    out.write_text("".join(lines))


@dataclass
class Split:
    """Per (role, thread): ns of CPU and of run-queue wait in the windows and outside them, and the wall seconds."""

    cpu: dict[str, dict[tuple[str, str], float]] = field(default_factory=lambda: {"in": {}, "out": {}})
    wait: dict[str, dict[tuple[str, str], float]] = field(default_factory=lambda: {"in": {}, "out": {}})
    wall: dict[str, float] = field(default_factory=lambda: {"in": 0.0, "out": 0.0})

    def rate(self, what: str, where: str, roles: set[str] | None = None, thread: str | None = None) -> float:
        """ms per wall second of ``what`` (cpu, wait), summed over matching threads."""
        table = self.cpu if what == "cpu" else self.wait
        ns = sum(
            v
            for (role, th), v in table[where].items()
            if (role in roles if roles is not None else role not in ("machine", "others"))
            and (thread is None or th == thread)
        )
        return ns / 1e6 / self.wall[where] if self.wall[where] else float("nan")


def _merged(windows: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """The windows' union as sorted, disjoint (starts, ends)."""
    starts: list[float] = []
    ends: list[float] = []
    for start, end in sorted(windows):
        if ends and start <= ends[-1]:
            ends[-1] = max(ends[-1], end)
        else:
            starts.append(start)
            ends.append(end)
    return starts, ends


def _inside(t0: float, t1: float, merged: tuple[list[float], list[float]]) -> bool:
    """Whether (t0, t1) overlaps one of the merged windows."""
    starts, ends = merged
    i = bisect.bisect_left(starts, t1) - 1  # the last window starting before t1
    return i >= 0 and ends[i] > t0


def summarize(out: Path, windows: list[tuple[float, float]], since: float, until: float) -> Split:
    """The sampler's increments between ``since`` and ``until``, split by whether an interval overlaps a window."""
    per_tid: dict[int, list[tuple[float, str, str, int, int]]] = defaultdict(list)
    for line in out.read_text().splitlines():
        t_s, role, thread, tid, cpu, wait = line.split()
        per_tid[int(tid)].append((float(t_s), role, thread, int(cpu), int(wait)))
    split = Split()
    merged = _merged(windows)
    for rows in per_tid.values():
        for (t0, _, _, c0, w0), (t1, role, thread, c1, w1) in itertools.pairwise(rows):
            if t0 < since or t1 > until:
                continue
            where = "in" if _inside(t0, t1, merged) else "out"
            key = (role, thread)
            split.cpu[where][key] = split.cpu[where].get(key, 0.0) + (c1 - c0)
            split.wait[where][key] = split.wait[where].get(key, 0.0) + (w1 - w0)
    # wall time: the sampler's own consecutive stamps
    times = sorted({t for rows in per_tid.values() for t, *_ in rows})
    for t0, t1 in itertools.pairwise(times):
        if t0 < since or t1 > until:
            continue
        split.wall["in" if _inside(t0, t1, merged) else "out"] += t1 - t0
    return split


def table(split: Split) -> str:
    """Per role and thread: CPU and run-queue wait, ms per wall second, during windows / outside."""
    keys = sorted(set(split.cpu["in"]) | set(split.cpu["out"]), key=lambda k: -split.cpu["in"].get(k, 0.0))
    rows = [
        f"    {'role':14s} {'thread':20s} {'cpu in':>8s} {'cpu out':>8s} {'wait in':>8s} {'wait out':>8s}  ms per s"
    ]
    for role, thread in keys:
        c_in, c_out = split.rate("cpu", "in", {role}, thread), split.rate("cpu", "out", {role}, thread)
        w_in, w_out = split.rate("wait", "in", {role}, thread), split.rate("wait", "out", {role}, thread)
        if max(c_in, c_out, w_in, w_out) < 1.0:
            continue
        rows.append(f"    {role:14s} {thread:20s} {c_in:8.1f} {c_out:8.1f} {w_in:8.1f} {w_out:8.1f}")
    roles = sorted({role for role, _ in keys})
    for role in roles:
        rows.append(
            f"    {role:14s} {'(all)':20s} {split.rate('cpu', 'in', {role}):8.1f}"
            f" {split.rate('cpu', 'out', {role}):8.1f} {split.rate('wait', 'in', {role}):8.1f}"
            f" {split.rate('wait', 'out', {role}):8.1f}"
        )
    for where in ("in", "out"):
        split.cpu[where][("others", "(not ours)")] = (
            (split.rate("cpu", where, {"machine"}) - split.rate("cpu", where)) * split.wall[where] * 1e6
        )
    rows.append(
        f"    {'others':14s} {'(other sessions)':20s} {split.rate('cpu', 'in', {'others'}):8.1f}"
        f" {split.rate('cpu', 'out', {'others'}):8.1f}   (machine busy minus the threads above; steal"
        f" {split.rate('wait', 'in', {'machine'}):.1f} / {split.rate('wait', 'out', {'machine'}):.1f})"
    )
    rows.append(
        f"    {'all':14s} {'(all)':20s} {split.rate('cpu', 'in'):8.1f} {split.rate('cpu', 'out'):8.1f}"
        f" {split.rate('wait', 'in'):8.1f} {split.rate('wait', 'out'):8.1f}   wall s in {split.wall['in']:.1f} out "
        f"{split.wall['out']:.1f}"
    )
    return "\n".join(rows)


def main(argv: list[str]) -> None:
    out, period = Path(argv[1]), float(argv[2])
    roots = {role: int(pid) for role, pid in (a.split("=", 1) for a in argv[3:])}
    sample(out, period, roots)


if __name__ == "__main__":
    main(sys.argv)


# -- who held the CPUs while a thread waited (perf's sched_switch and sched_wakeup trace) --------------------------

_SWITCH = re.compile(r"prev_pid=(\d+) .*prev_state=(\S+) ==> next_comm=.* next_pid=(\d+) ")
_WAKEUP = re.compile(r" pid=(\d+) prio=")
_LINE = re.compile(r"^\s*(?:(\d+)/(\d+)\s+)?\[(\d+)\]\s+([\d.]+):\s+sched:(sched_switch|sched_wakeup):\s+(.*)$")
PERF_FIELDS = "pid,tid,cpu,time,event,trace"  # ``perf script -F`` for ``events`` and ``processes``


@dataclass
class Waits:
    """Run-queue waits of the target threads, and who ran on each CPU meanwhile (ns, per role; ``idle``: a CPU
    running nothing, a wake-up's own latency or the hypervisor's)."""

    count: int = 0
    wait_ns: float = 0.0
    held_ns: dict[str, float] = field(default_factory=dict)
    held_by_comm: dict[str, float] = field(default_factory=dict)  # the roles ``others``' by program name


def tid_roles(out: Path) -> dict[int, str]:
    """Each sampled thread's role, from the sampler's lines."""
    roles: dict[int, str] = {}
    for line in out.read_text().splitlines():
        _, role, _, tid, _, _ = line.split()
        roles[int(tid)] = role
    return roles


Event = tuple[int, float, int, int, bool]  # cpu, time, prev pid (-1: a wake-up of pid), pid, prev runnable


def events(script: str) -> list[Event]:
    """``perf script -F cpu,time,event,trace`` of ``perf record -k mono -e sched:sched_switch -e sched:sched_wakeup
    -a``, parsed: switches (prev, next, whether prev stays runnable) and wake-ups (-1, pid)."""
    out: list[Event] = []
    for line in script.splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        cpu, t, event, rest = int(m.group(3)), float(m.group(4)), m.group(5), m.group(6)
        if event == "sched_wakeup":
            w = _WAKEUP.search(rest)
            if w is not None:
                out.append((cpu, t, -1, int(w.group(1)), False))
            continue
        sw = _SWITCH.search(rest)
        if sw is not None:
            out.append((cpu, t, int(sw.group(1)), int(sw.group(3)), sw.group(2).startswith("R")))
    return out


def attribute(
    parsed: list[Event],
    roles: dict[int, str],
    targets: set[str],
    spans: list[tuple[float, float]],
    comms: dict[int, str] | None = None,
) -> Waits:
    """The waits of the threads whose role is in ``targets`` that overlap ``spans`` (merged; monotonic s), from
    ``events``: each wait is runnable-since (a wake-up, or a preemption) to running, and each CPU's tasks meanwhile
    are charged with the time they ran inside it."""
    segments: dict[int, list[tuple[float, float, int]]] = defaultdict(list)  # cpu -> (start, end, pid)
    current: dict[int, tuple[int, float]] = {}
    runnable: dict[int, float] = {}
    waits: list[tuple[float, float]] = []
    target_tids = {tid for tid, role in roles.items() if role in targets}
    for cpu, t, prev, nxt, still_runnable in parsed:
        if prev == -1:
            if nxt in target_tids:
                runnable.setdefault(nxt, t)
            continue
        if cpu in current:
            pid, start = current[cpu]
            segments[cpu].append((start, t, pid))
        current[cpu] = (nxt, t)
        if prev in target_tids and still_runnable:
            runnable[prev] = t  # preempted: runnable, not running
        if nxt in target_tids and nxt in runnable:
            waits.append((runnable.pop(nxt), t))
    merged = _merged(spans)
    result = Waits()
    for cpu_segments in segments.values():
        cpu_segments.sort()
    starts = {cpu: [s for s, _, _ in segs] for cpu, segs in segments.items()}
    for a, b in waits:
        if b <= a or not _inside(a, b, merged):
            continue
        result.count += 1
        result.wait_ns += (b - a) * 1e9
        for cpu, segs in segments.items():
            i = max(0, bisect.bisect_left(starts[cpu], a) - 1)
            while i < len(segs) and segs[i][0] < b:
                start, end, pid = segs[i]
                overlap = min(end, b) - max(start, a)
                if overlap > 0:
                    role = "idle" if pid == 0 else roles.get(pid, "others")
                    result.held_ns[role] = result.held_ns.get(role, 0.0) + overlap * 1e9
                    if role == "others" and comms is not None:
                        name = comms.get(pid, str(pid))
                        result.held_by_comm[name] = result.held_by_comm.get(name, 0.0) + overlap * 1e9
                i += 1
    return result


def processes(script: str) -> dict[int, int]:
    """thread id -> process id, from the events' own ``pid/tid`` (the task current on that CPU then)."""
    out: dict[int, int] = {}
    for line in script.splitlines():
        m = _LINE.match(line)
        if m is not None and m.group(1) is not None:
            out[int(m.group(2))] = int(m.group(1))
    return out


def with_processes(roles: dict[int, str], threads: dict[int, int]) -> dict[int, str]:
    """``roles`` (thread id -> role) extended to every thread of a process whose main thread has a role: threads the
    sampler never saw (short-lived ones) are their process's, not another session's."""
    out = dict(roles)
    for tid, pid in threads.items():
        if tid not in out and pid in roles:
            out[tid] = roles[pid]
    return out


def comms_of(script: str) -> dict[int, str]:
    """pid -> program name, from the switches' next_comm (for the ``others`` breakdown)."""
    out: dict[int, str] = {}
    for m in re.finditer(r"next_comm=(.*?) next_pid=(\d+) ", script):
        out[int(m.group(2))] = m.group(1)
    return out


def waits_table(waits: Waits, label: str) -> str:
    held = sum(waits.held_ns.values()) or 1.0
    parts = ", ".join(
        f"{role} {100 * ns / held:.0f} %" for role, ns in sorted(waits.held_ns.items(), key=lambda kv: -kv[1])
    )
    top = sorted(waits.held_by_comm.items(), key=lambda kv: -kv[1])[:6]
    others = ", ".join(f"{name} {100 * ns / held:.0f} %" for name, ns in top)
    return (
        f"    {label}: {waits.count} waits, {waits.wait_ns / 1e6:.1f} ms in all, mean "
        f"{waits.wait_ns / 1e3 / max(waits.count, 1):.0f} us; the CPUs meanwhile: {parts}"
        + (f"\n      others by program: {others}" if others else "")
    )
