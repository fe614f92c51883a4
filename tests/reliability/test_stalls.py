"""Nothing stalls the loop: it keeps its tick while a drain waits on a PodDisruptionBudget that keeps refusing
(tests/fakekube) and while the store hangs (a real PostgreSQL stopped with SIGSTOP, or a SQLite write lock held
by another connection); a cancel and SIGTERM end a waiting drain at once; nothing acknowledged is lost."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

from kubernetes import client

from detectors.drain_rails import DrainRails
from kvpilot.actuation import Actuation
from kvpilot.actuation.drain import Backoff, NodeDrainer
from kvpilot.runtime.service import Service
from tests.helpers.poll import wait_for
from tests.reliability.conftest import Recorder, Store
from tests.reliability.harness import A, R, Running, frozen_postgres, running
from tests.reliability.scenes import pdb_blocked_cluster


def _state(c: Any, action: int) -> str:
    return str(c.get(f"/v1/drains/{action}", headers=R).json()["state"])


def _ticks_during(r: Running, seconds: float) -> int:
    before = r.ticks()
    time.sleep(seconds)
    return r.ticks() - before


def test_the_loop_ticks_while_a_drain_waits_and_cancel_and_sigterm_end_it(store: Store, record: Recorder) -> None:
    kube = pdb_blocked_cluster()
    api = kube.api_client()
    interval = 0.25

    def actuation(service: Service) -> Actuation:
        # A PDB-refused eviction is retried after 30 s: a cancel or SIGTERM that did not cut the wait short would take
        # ten times the 3 s they are allowed (with 1-5 s, one that waited out the backoff could still pass).
        drainer = NodeDrainer(client.CoreV1Api(api), backoff=Backoff(initial_s=30.0, max_s=60.0, deadline_s=600.0))
        return Actuation(
            sessions=service.sessions, clock=service.clock, rails=DrainRails(dry_run=False), drainer=drainer,
            poll_s=0.1,
        )  # fmt: skip

    try:
        with running(store.url, interval_s=interval, actuation=actuation) as r, r.client() as c:
            first = c.post("/v1/drains", json={"node": "n0"}, headers=A).json()["id"]
            c.post(f"/v1/drains/{first}/approve", json={}, headers=A)
            wait_for(lambda: _state(c, first) == "executing", timeout_s=10, what="the drain executing")
            wait_for(lambda: any(p.endswith("/eviction") for _, p in kube.requests), timeout_s=10, what="a 429")
            seconds = 3.0
            ticks = _ticks_during(r, seconds)
            expected = int(seconds / interval * 0.5)
            record("ticks while a PDB keeps refusing an eviction", f">= {expected} ticks in {seconds:g} s",
                   f"{ticks} ticks, drain {_state(c, first)}", ticks >= expected)  # fmt: skip

            t0 = time.monotonic()
            c.post(f"/v1/drains/{first}/cancel", json={"message": "probe"}, headers=A)
            # The worker is free again when a drain of n1 (no pods) runs to done.
            second = c.post("/v1/drains", json={"node": "n1"}, headers=A).json()["id"]
            c.post(f"/v1/drains/{second}/approve", json={}, headers=A)
            wait_for(lambda: _state(c, second) == "done", timeout_s=15, what="the next drain done after a cancel")
            took = time.monotonic() - t0
            record("cancel of a drain in PDB backoff", "worker free within 3 s", f"{took:.1f} s", took < 3.0)

            third = c.post("/v1/drains", json={"node": "n0"}, headers=A).json()["id"]
            c.post(f"/v1/drains/{third}/approve", json={}, headers=A)
            wait_for(lambda: _state(c, third) == "executing", timeout_s=10, what="the third drain executing")
            time.sleep(0.5)
            stopped = r.stop()
            record("SIGTERM during a drain in PDB backoff", "stops within 3 s", f"{stopped:.1f} s", stopped < 3.0)
        with running(store.url, interval_s=interval) as r2, r2.client() as c2:
            after = _state(c2, third)
            events = [e["message"] for e in c2.get(f"/v1/drains/{third}", headers=R).json()["events"]]
        record("drain interrupted by SIGTERM", "back to approved, audited", f"{after}: {events[-1][:48]}",
               after == "approved" and "shutdown" in events[-1])  # fmt: skip
    finally:
        api.close()
        kube.stop()


@contextlib.contextmanager
def _hung(store: Store, seconds: float) -> Iterator[None]:
    """The store stops answering: PostgreSQL frozen with SIGSTOP; SQLite's write lock held by another process's
    connection (BEGIN EXCLUSIVE), so every writer waits out its busy timeout."""
    if store.backend == "postgresql":
        with frozen_postgres(store.data_dir):
            yield
            time.sleep(max(0.0, seconds))
        return
    path = store.url.removeprefix("sqlite:///")
    conn = sqlite3.connect(path, timeout=1, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    try:
        yield
        time.sleep(max(0.0, seconds))
    finally:
        conn.execute("ROLLBACK")
        conn.close()


def test_the_loop_ticks_while_the_store_hangs_and_nothing_acknowledged_is_lost(store: Store, record: Recorder) -> None:
    interval = 0.25
    with running(store.url, interval_s=interval, request_timeout_s=2.0, store_hang_s=1.5) as r, r.client() as c:
        wait_for(lambda: c.get("/readyz").status_code == 200, timeout_s=20, what="ready before the hang")
        acked = c.post("/v1/drains", json={"node": "before-hang"}, headers=A)
        assert acked.status_code == 201
        with _hung(store, 0.0):
            t0 = time.monotonic()
            post = c.post("/v1/drains", json={"node": "during-hang"}, headers=A)
            post_s = time.monotonic() - t0
            record("POST while the store hangs", "503 within 3 s", f"{post.status_code} in {post_s:.1f} s",
                   post.status_code == 503 and post_s < 3.0)  # fmt: skip
            not_ready = wait_for(lambda: c.get("/readyz").status_code == 503, timeout_s=6, what="/readyz 503")
            ready = c.get("/readyz")
            record("/readyz while the store hangs", "503 within 4 s, no host or port",
                   f"503 after {not_ready + post_s:.1f} s: {ready.json()['store_error']}",
                   not_ready + post_s < 4.0 and "127.0.0.1" not in ready.text and "port" not in ready.text)  # fmt: skip
            latencies = []
            for _ in range(20):
                t1 = time.monotonic()
                c.get("/healthz")
                latencies.append(time.monotonic() - t1)
            p99 = max(latencies)
            record("/healthz while the store hangs", "max < 250 ms (never waits on the store)",
                   f"{p99 * 1000:.0f} ms max of 20", p99 < 0.25)  # fmt: skip
            seconds = 2.0
            ticks = _ticks_during(r, seconds)
            expected = int(seconds / interval * 0.5)
            record("ticks while the store hangs", f">= {expected} in {seconds:g} s", f"{ticks}", ticks >= expected)
        back = wait_for(lambda: c.get("/readyz").status_code == 200, timeout_s=20, what="ready after the hang")
        record("/readyz after the store returns", "200 within 10 s", f"{back:.1f} s", back < 10)
        time.sleep(2.5)  # time for a late COMMIT, had the timed-out POST been applied after all
        nodes = {d["node"] for d in c.get("/v1/drains", headers=R).json()["items"]}
        w = r.service.writer
        wait_for(lambda: w.pending == 0, timeout_s=10, what="buffered writes flushed")
        record("after the hang: acknowledged kept, timed-out not applied",
               "before-hang kept, during-hang absent, 0 writes lost",
               f"drains {sorted(nodes)}, lost {w.lost_total}, pending {w.pending}",
               nodes == {"before-hang"} and w.lost_total == 0 and w.pending == 0)  # fmt: skip


def test_one_oversized_value_never_blocks_the_batch(store: Store, record: Recorder) -> None:
    from tests.reliability.harness import WallFleet

    fleet = WallFleet(model="m" * 300)  # over the 255 of deployments.model
    with running(store.url, fleet=fleet) as r, r.client() as c:
        w = r.service.writer

        def bad(_: Any) -> None:
            raise ValueError("a write that is wrong in itself")

        w.submit("probe: bad row", bad)
        wait_for(lambda: r.ticks() >= 4 and w.pending == 0, timeout_s=20, what="four ticks written")
        detail = c.get("/v1/deployments/llm/chat", headers=R)
        metrics = c.get("/metrics").text
        dropped = next(
            (
                line.split()[-1]
                for line in metrics.splitlines()
                if line.startswith("kvpilot_store_dropped_writes_total")
            ),
            "?",
        )
        record("300-char model name + 1 bad write", "rows written, exactly the bad one dropped and counted",
               f"deployment {detail.status_code}, failed {w.failed_total}, dropped_writes_total {dropped}, up {w.up}",
               detail.status_code == 200 and w.failed_total == 1 and float(dropped) == 1.0 and w.up)  # fmt: skip
