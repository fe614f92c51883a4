"""What beginning every SQLite transaction costs (store.db: BEGIN IMMEDIATE at each begin, session 19 F4), against
pysqlite's legacy begin (a transaction only from the first write) of a tree before it.

On a migrated SQLite store holding 2,000 decisions: a lone reading transaction (a count of decisions) and a lone
writing one (10 decision rows), in microseconds each; then 3 s of reading transactions while one thread writes
50-row transactions without pause: the reads done, their p50 and p99 in ms, the writes done, errors. Run it from
each tree (it imports the tree it sits in), interleaved, under the measure lock:

  PYTHONPATH=<tree> .venv/bin/python <tree>/bench/store_sqlite.py

The reading transaction is the API's read unit of the tree: ``transaction(sessions, reads_only=True)`` where the
tree's store.db.transaction takes it (a deferred BEGIN on SQLite, since the commit after a944659), a plain
``transaction(sessions)`` before. One JSON line ("reads_only": whether it was used).
"""

from __future__ import annotations

import inspect
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sqlalchemy import func, select

import migrations
from scaler.decision import Decision
from store import repo
from store.db import make_engine, session_factory, transaction
from store.models import DecisionRow


def _decision(t: float) -> Decision:
    return Decision("ns/chat", t, 1, 1, 1, 0, "steady", "", None, None, {})


def _lone_us(fn: Callable[[], object], n: int) -> float:
    for _ in range(50):
        fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    url = f"sqlite:///{Path(tempfile.mkdtemp()) / 'kvpilot.db'}"
    migrations.upgrade(url)
    sessions = session_factory(make_engine(url))
    with transaction(sessions) as s:
        for i in range(2000):
            repo.record_decision(session=s, decision=_decision(float(i)))

    reads_only = "reads_only" in inspect.signature(transaction).parameters
    read_unit: dict[str, bool] = {"reads_only": True} if reads_only else {}

    def read() -> int:
        with transaction(sessions, **read_unit) as s:
            return s.scalar(select(func.count()).select_from(DecisionRow)) or 0

    def write(rows: int = 10) -> None:
        with transaction(sessions) as s:
            for _ in range(rows):
                repo.record_decision(session=s, decision=_decision(1.0))

    out: dict[str, float] = {"read_us": _lone_us(read, 2000), "write_us": _lone_us(write, 1000)}
    stop = threading.Event()
    writes = [0]

    def writer() -> None:
        while not stop.is_set():
            write(50)
            writes[0] += 1

    thread = threading.Thread(target=writer)
    thread.start()
    latencies: list[float] = []
    errors = 0
    end = time.perf_counter() + 3.0
    while time.perf_counter() < end:
        start = time.perf_counter()
        try:
            read()
        except Exception:
            errors += 1
        latencies.append((time.perf_counter() - start) * 1e3)
    stop.set()
    thread.join()
    latencies.sort()
    out |= {
        "reads": len(latencies),
        "read_p50_ms": latencies[len(latencies) // 2],
        "read_p99_ms": latencies[int(len(latencies) * 0.99)],
        "writes": writes[0],
        "errors": errors,
    }
    print(json.dumps({"reads_only": reads_only} | {k: round(v, 3) for k, v in out.items()}))


if __name__ == "__main__":
    main()
