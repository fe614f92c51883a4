"""Instructions counted by valgrind's callgrind, for bench/scrape.py where ``perf stat -e instructions`` cannot count (a
VM without a PMU: the kernel says "PMU not available due to virtualization, using software events only").

callgrind executes the program on a synthetic CPU and counts the instructions it executes (``Ir``: user space, every
thread); the count does not move with the machine's load, which CPU seconds on a shared VM do by +-30 %. The program
runs 5-10x slower uninstrumented and ~50x instrumented, so the warm-up runs uninstrumented (``--instr-atstart=no``)
and only the measured part is instrumented:

- a process of ours (the ticks below): it turns the instrumentation on and dumps the counts itself, through
  callgrind's client requests (``valgrind/callgrind.h``, compiled on demand into a small shared library);
- another process (Prometheus): ``callgrind_control -i on`` and ``-d`` from outside.

Kernel work (syscalls, page faults, the network stack) is not counted on either side.
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "bench" / "native" / "build"
SOURCE = """#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void cg_zero(void) { CALLGRIND_ZERO_STATS; }
void cg_dump(const char *label) { CALLGRIND_DUMP_STATS_AT(label); }
"""


def missing() -> list[str]:
    """What counting by callgrind needs and this machine lacks (empty when it can count)."""
    lacks = [tool for tool in ("valgrind", "callgrind_control", "cc") if shutil.which(tool) is None]
    if not Path("/usr/include/valgrind/callgrind.h").exists():
        lacks.append("/usr/include/valgrind/callgrind.h")
    return lacks


def client_library() -> Path:
    """The client-request library, built with ``cc`` when absent (git-ignored ``bench/native/build``)."""
    digest = hashlib.sha256(SOURCE.encode()).hexdigest()[:12]
    lib = BUILD / f"callgrind_requests-{digest}.so"
    if not lib.exists():
        BUILD.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "requests.c"
            src.write_text(SOURCE)
            out = Path(tmp) / lib.name
            subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
            out.replace(lib)
    return lib


class Requests:
    """callgrind's client requests for this process (no-ops when it does not run under valgrind)."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL(str(client_library()))
        self.lib.cg_dump.argtypes = [ctypes.c_char_p]

    def start(self) -> None:
        """Instrumentation on, and the counts so far (none while it was off) zeroed."""
        self.lib.cg_start()
        self.lib.cg_zero()

    def zero(self) -> None:
        """The counts since the last dump dropped."""
        self.lib.cg_zero()

    def dump(self, label: str) -> None:
        """The counts since the last dump (or the start) written to a dump file of their own, labelled."""
        self.lib.cg_dump(label.encode())

    def stop(self) -> None:
        self.lib.cg_stop()


def command(out_file: Path) -> list[str]:
    """The prefix that runs a program under callgrind, instrumentation off until asked, dumps to ``out_file``.N."""
    return [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out_file}",
        "--log-file=" + str(out_file) + ".log",
    ]


def totals(dump: Path) -> int:
    """The instructions (Ir) a dump file holds."""
    text = dump.read_text(errors="replace")
    m = re.search(r"^(?:totals|summary): (\d+)", text, re.M)
    if m is None:
        raise RuntimeError(f"no totals in the callgrind dump {dump}")
    return int(m[1])


def dumps(out_file: Path) -> list[Path]:
    """The dump files written so far (``out_file``.1, .2, ...), in order."""
    found = [p for p in out_file.parent.glob(out_file.name + ".*") if p.name.rsplit(".", 1)[1].isdigit()]
    return sorted(found, key=lambda p: int(p.name.rsplit(".", 1)[1]))


def control(pid: int, *flags: str) -> None:
    """``callgrind_control`` on another process run under callgrind (``-i on``, ``-z``, ``-d``)."""
    subprocess.run(["callgrind_control", *flags, str(pid)], check=True, capture_output=True, timeout=120)


def count_window(pid: int, out_file: Path, seconds: float) -> int:
    """Instructions another process under callgrind executes over the next ``seconds``: instrumentation on and the
    counts zeroed now, dumped (and instrumentation off) after."""
    control(pid, "-i", "on")
    control(pid, "-z")
    before = len(dumps(out_file))
    time.sleep(seconds)
    control(pid, "-d")
    control(pid, "-i", "off")
    deadline = time.monotonic() + 120
    while len(dumps(out_file)) <= before:
        if time.monotonic() > deadline:
            raise RuntimeError(f"callgrind wrote no dump to {out_file}.N")
        time.sleep(0.5)
    return totals(dumps(out_file)[-1])
