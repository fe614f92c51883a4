"""/healthz while `kvpilot run` restores the forecasters' stored day (review G F5, session 19 helper B).

``run``: an in-process `kvpilot run` (embedded simulator, a fresh store) whose warm start is fed N deployments x
1,440 per-minute arrival rates (a diurnal series with noise, seed 0); a thread asks /healthz every 0.2 s with a 2 s
timeout while the warm start runs. Prints the warm start's wall time, the probes answered 200 (their median and
largest latency) and the ones that were not. ``alone``: the same warm start, synchronously, nothing else running.
Run it in a tree (``PYTHONPATH=<tree>``) to compare.

    .venv/bin/python bench/warm_start_probes.py run 100
    .venv/bin/python bench/warm_start_probes.py alone 100
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path.cwd()))

from kvpilot.runtime import restore, runner
from kvpilot.runtime import service as service_module
from kvpilot.settings import load_settings
from scaler.planner import Planner, PlannerConfig
from store.repo.rollups import RollupPoint


def day(n: int) -> list[RollupPoint]:
    rnd = random.Random(0)
    t0 = time.time() - 86_400.0
    points = []
    for d in range(n):
        base = 2 + 8 * rnd.random()
        for m in range(1440):
            rate = base * (1 + 0.6 * math.sin(2 * math.pi * m / 1440)) + rnd.gauss(0, 0.5)
            points.append(RollupPoint(f"ns/d{d}", t0 + 60.0 * m, 1, {"arrival_rate": max(rate, 0.0)}))
    return sorted(points, key=lambda p: p.t)


def probed(points: list[RollupPoint]) -> dict[str, Any]:
    ports: list[int] = []
    built: list[Any] = []
    warm: dict[str, float] = {}
    warmed = threading.Event()
    answered: list[float] = []
    unanswered: list[float] = []
    listen, build, real = runner._listen, runner.build_service, service_module.warm_start

    def bind(host: str, port: int) -> socket.socket:
        sock = listen(host, port)
        ports.append(sock.getsockname()[1])
        return sock

    def build_and_keep(*args: Any, **kwargs: Any) -> Any:
        service, restored = build(*args, **kwargs)
        built.append(service)
        return service, restored

    def warm_start(planner: Any, rollups: Any) -> int:
        warm["start"] = time.monotonic()
        fed = real(planner, points)
        warm["end"] = time.monotonic()
        warmed.set()
        return fed

    def probe() -> None:
        while "start" not in warm:
            time.sleep(0.01)
        while "end" not in warm:
            t = time.monotonic()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ports[0]}/healthz", timeout=2.0) as answer:
                    ok = answer.status == 200
            except OSError:
                ok = False
            (answered if ok else unanswered).append(time.monotonic() - t)
            time.sleep(0.2)

    runner._listen, runner.build_service, service_module.warm_start = bind, build_and_keep, warm_start  # type: ignore[assignment]

    async def main() -> None:
        os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp()
        settings = load_settings(api={"host": "127.0.0.1", "http_port": 0, "grpc_port": 0, "anonymous_read": True})
        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        running = asyncio.create_task(runner.run(settings))
        await asyncio.to_thread(warmed.wait, 3600.0)
        await asyncio.to_thread(prober.join, 5.0)
        built[0].stop.set()
        await asyncio.wait_for(running, 60.0)

    asyncio.run(main())
    return {
        "warm_s": warm["end"] - warm["start"],
        "probes": len(answered),
        "fails": len(unanswered),
        "p50_ms": 1000 * statistics.median(answered) if answered else None,
        "max_ms": 1000 * max(answered) if answered else None,
    }


def main() -> None:
    mode, n = sys.argv[1], int(sys.argv[2])
    points = day(n)
    if mode == "alone":
        t = time.monotonic()
        restore.warm_start(Planner(PlannerConfig()), points)
        figures: dict[str, Any] = {"warm_s": time.monotonic() - t}
    else:
        figures = probed(points)
    print(json.dumps({"mode": mode, "N": n, **figures}))


if __name__ == "__main__":
    main()
