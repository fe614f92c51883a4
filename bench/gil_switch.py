"""How long the event loop waits for the GIL while a worker thread computes, at two switch intervals (issue 17).

A TCP round trip on the loop (the shape of ``GET /healthz``: select, recv, send) every 5 ms for a few seconds while
one thread runs pure Python, at CPython's default switch interval (5 ms) and at kvpilot's (``GIL_SWITCH_S``),
alternated. Each interval runs in a fresh process.

  .venv/bin/python bench/gil_switch.py --rounds 2 --seconds 4

Last line: ``switch_ms 5 p99_ms X switch_ms 1 p99_ms Y`` (medians over the rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kvpilot.runtime.service import GIL_SWITCH_S


def _busy(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(i * i for i in range(1000))  # pure Python: gives the GIL up only at the switch interval


async def _round_trips(seconds: float) -> list[float]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(100):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    stop = threading.Event()
    worker = threading.Thread(target=_busy, args=(stop,))
    worker.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    ms: list[float] = []
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.perf_counter()
            writer.write(b"x")
            await writer.drain()
            await reader.read(100)
            ms.append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(0.005)
    finally:
        stop.set()
        worker.join()
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
    return ms


def _p99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.99 * len(s)))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--child", type=float, default=None, help=argparse.SUPPRESS)  # one interval, in this process
    args = p.parse_args()
    if args.child is not None:
        sys.setswitchinterval(args.child)
        ms = asyncio.run(_round_trips(args.seconds))
        print(f"{statistics.median(ms):.3f} {_p99(ms):.3f} {max(ms):.3f} {len(ms)}")
        return
    p99s: dict[float, list[float]] = {0.005: [], GIL_SWITCH_S: []}
    for _ in range(args.rounds):
        for switch in p99s:
            argv = [sys.executable, __file__, "--child", str(switch), "--seconds", str(args.seconds)]
            p50, p99, worst, n = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()
            p99s[switch].append(float(p99))
            print(f"  switch {switch * 1000:g} ms: {n} round trips, p50 {p50} p99 {p99} max {worst} ms", flush=True)
    print(" ".join(f"switch_ms {s * 1000:g} p99_ms {statistics.median(v):.1f}" for s, v in p99s.items()))


if __name__ == "__main__":
    main()
