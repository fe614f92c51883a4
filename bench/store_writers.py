"""Many API writers at once on SQLite: what they are answered, how fast, and what the service's own loop and store
writer go through meanwhile (issue 17; the writer gate of store.writers).

The whole service (``tests/reliability/harness.running``: wiring, loop ticking every second, store writer, the
FastAPI app under uvicorn) runs in a child process on a fresh SQLite file with the default store bounds (5 s busy
timeout, 5 s pool wait, ``api.request_timeout_s`` 10 s, ``store.hang_after_s`` 10 s). This process then sends N
``POST /v1/drains`` (each its own node, its own connection) released together, and meanwhile ``GET /readyz`` every
50 ms and a reader's ``GET /v1/drains?limit=1`` (one at a time, 100 ms apart: a store read, in a worker thread). Per
run: the answers by status (503s with and without ``Retry-After``), p50/p99 of every POST's latency and of the 503s',
/readyz answers other than 200, the reads' count and their slowest, the child's longest gap between two loop ticks and
whether its store writer ever read as down during the burst, and every 201's node stored (``lost``: a 201 not).
Run it from each tree (it imports the tree it sits in); ``--busy`` also runs a busy loop beside it (under
``taskset -c 0``, one CPU shared three ways):

  nice -n 19 .venv/bin/python bench/store_writers.py --clients 24 100 400 --runs 3
  nice -n 19 taskset -c 0 .venv/bin/python bench/store_writers.py --clients 24 100 400 --runs 3 --busy

One JSON line per run; the last line ``clients N errors E refused_503 R p99_ms P`` for the last run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import itertools

import httpx

BURST_GUARD_S = 120.0


def _serve(conn: Connection, url: str, no_pace: bool) -> None:
    """The child: the service, and a sampler of its tick count and store writer every 5 ms, until told to stop."""
    import migrations
    from tests.reliability.harness import running

    if no_pace:  # an experiment: the gate refuses by its queue's bound only, never by its pace
        from store import writers

        writers.PACE_WEIGHT = 0.0

    migrations.upgrade(url)
    with running(url, interval_s=1.0, request_timeout_s=10.0, store_hang_s=10.0) as r:
        samples: list[tuple[float, int, bool]] = []
        stop = threading.Event()
        gate = _gate(r.service.sessions)
        queued_max = [0]

        def sample() -> None:
            while not stop.is_set():
                samples.append((time.monotonic(), r.ticks(), r.service.writer.up))
                if gate is not None:
                    queued_max[0] = max(queued_max[0], sum(gate.queued))
                stop.wait(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        conn.send(r.base)
        while (ask := conn.recv()) != "stop":
            t0, t1 = ask
            window = [s for s in samples if t0 - 1.5 <= s[0] <= t1 + 1.5]
            tick_at = [b[0] for a, b in itertools.pairwise(window) if b[1] > a[1]]
            gaps = [b - a for a, b in itertools.pairwise(tick_at)]
            down = any(not s[2] for s in window)
            stats = {"tick_gap_max_s": round(max(gaps, default=0.0), 2), "writer_down": down}
            if gate is not None:  # a tree with the writer gate (store.writers)
                stats.update(
                    gate_refused=gate.refused_total, gate_queued_max=queued_max[0], gate_turn_ms=gate.turn_s * 1e3
                )
            conn.send(stats)
        stop.set()


def _gate(sessions: Any) -> Any:
    try:
        from store import writers
    except ImportError:
        return None
    return writers.gate_of(sessions)


async def _stored(c: httpx.AsyncClient, headers: dict[str, str]) -> set[str]:
    """Every drain's node in the store, once it answers the listing (a starved service may answer its deadline's 503
    first: the listing is asked again, for up to ``BURST_GUARD_S``)."""
    give_up = time.monotonic() + BURST_GUARD_S
    while True:
        page = await c.get("/v1/drains", params={"limit": 1000}, headers=headers)
        if page.status_code == 200 or time.monotonic() > give_up:
            page.raise_for_status()
            return {d["node"] for d in page.json()["items"]}
        await asyncio.sleep(0.5)


async def _burst(base: str, clients: int, token: str, run: int) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(base_url=base, timeout=BURST_GUARD_S, limits=limits, trust_env=False) as c:
        go = asyncio.Event()
        answers: list[tuple[int, float, str | None]] = []
        ready_bad: list[int] = []
        reads: list[tuple[int, float]] = []
        created: list[str] = []  # the nodes answered 201
        done = asyncio.Event()

        async def post(i: int) -> None:
            await go.wait()
            t0 = time.monotonic()
            try:
                a = await c.post("/v1/drains", json={"node": f"r{run}-n{i}"}, headers=headers)
                answers.append((a.status_code, time.monotonic() - t0, a.headers.get("retry-after")))
                if a.status_code == 201:
                    created.append(f"r{run}-n{i}")
            except httpx.HTTPError as e:
                answers.append((0, time.monotonic() - t0, type(e).__name__))

        async def readyz() -> None:
            await go.wait()
            while not done.is_set():
                try:
                    status = (await c.get("/readyz")).status_code
                except httpx.HTTPError:  # a connection the server closed (its head's deadline) or refused
                    status = 0
                if status != 200:
                    ready_bad.append(status)
                await asyncio.sleep(0.05)

        async def reader() -> None:
            await go.wait()
            while not done.is_set():
                t = time.monotonic()
                try:
                    status = (await c.get("/v1/drains", params={"limit": 1}, headers=headers)).status_code
                except httpx.HTTPError:
                    status = 0
                reads.append((status, time.monotonic() - t))
                await asyncio.sleep(0.1)

        tasks = [asyncio.create_task(post(i)) for i in range(clients)]
        probe = asyncio.create_task(readyz())
        reading = asyncio.create_task(reader())
        await asyncio.sleep(0.2)  # every task waiting on `go`
        t0 = time.monotonic()
        go.set()
        await asyncio.gather(*tasks)
        t1 = time.monotonic()
        done.set()
        await probe
        await reading
        stored = await _stored(c, headers)
    lat = sorted(s for _, s, _ in answers)
    refused = sorted(s for code, s, _ in answers if code == 503)
    by_status: dict[str, int] = {}
    for code, _, _ in answers:
        by_status[str(code)] = by_status.get(str(code), 0) + 1
    return {
        "t0": t0,
        "t1": t1,
        "by_status": by_status,
        "503_with_retry_after": sum(1 for code, _, ra in answers if code == 503 and ra is not None),
        "p50_ms": round(statistics.median(lat) * 1000, 1),
        "p99_ms": round(lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1000, 1),
        "refused_p50_ms": round(statistics.median(refused) * 1000, 1) if refused else None,
        "burst_s": round(t1 - t0, 2),
        "readyz_not_200": len(ready_bad),
        "created": by_status.get("201", 0),
        "stored_of_run": sum(1 for n in stored if n.startswith(f"r{run}-")),
        "lost": sum(1 for node in created if node not in stored),
        "reads": len(reads),
        "reads_not_200": sum(1 for status, _ in reads if status != 200),
        "read_max_ms": round(max((s for _, s in reads), default=0.0) * 1000, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, nargs="+", default=[24, 100, 400])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--busy", action="store_true", help="a busy loop beside the service (pin both with taskset)")
    p.add_argument("--no-pace", action="store_true", help="the writer gate refuses by its queue's bound only")
    args = p.parse_args()
    from tests.reliability.harness import ADMIN

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    ctx = mp.get_context("spawn")
    last: dict[str, Any] = {}
    try:
        for clients in args.clients:
            for run in range(args.runs):
                url = f"sqlite:///{Path(tempfile.mkdtemp()) / 'kvpilot.db'}"
                ours, theirs = ctx.Pipe()
                child = ctx.Process(target=_serve, args=(theirs, url, args.no_pace), daemon=True)
                child.start()
                base = ours.recv()
                time.sleep(2.0)  # a couple of ticks before the burst
                result = asyncio.run(_burst(base, clients, ADMIN, run))
                time.sleep(1.5)
                ours.send((result.pop("t0"), result.pop("t1")))
                result.update(ours.recv())
                ours.send("stop")
                child.join(60)
                if child.is_alive():
                    child.kill()
                last = {"clients": clients, "run": run, "busy": args.busy, "no_pace": args.no_pace, **result}
                print(json.dumps(last), flush=True)
    finally:
        if busy is not None:
            busy.kill()
    errors = sum(n for code, n in last["by_status"].items() if code != "201")
    print(
        f"clients {last['clients']} errors {errors} refused_503 {last['by_status'].get('503', 0)} "
        f"p99_ms {last['p99_ms']}"
    )


if __name__ == "__main__":
    main()
