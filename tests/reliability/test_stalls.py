"""Nothing stalls the loop: it keeps its tick while a drain waits on a PodDisruptionBudget that keeps refusing
(tests/fakekube) and while the store hangs (a real PostgreSQL stopped with SIGSTOP, or a SQLite write lock held
by another connection); a cancel and SIGTERM end a waiting drain at once; nothing acknowledged is lost."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
from kubernetes import client

from detectors.drain_rails import DrainRails
from kvpilot.actuation import Actuation
from kvpilot.actuation.drain import Backoff, NodeDrainer
from kvpilot.runtime.service import Service
from tests.helpers.poll import wait_for
from tests.reliability.conftest import Recorder, Store
from tests.reliability.harness import A, R, Running, frozen_postgres, running
from tests.reliability.scenes import pdb_blocked_cluster

# Every check below is made while the stalled part is held (a PDB backoff longer than any guard, a store that does
# not answer until the test lets it): what the other parts did meanwhile is observed, never timed. The deadlines are
# hang guards.
GUARD_S = 60.0
BACKOFF_S = 2 * GUARD_S  # longer than any guard, short enough that a regression's test ends within minutes
TICKS = 8


def _state(c: Any, action: int) -> str:
    return str(_ok(c.get(f"/v1/drains/{action}", headers=R)).json()["state"])


def _ok(answer: httpx.Response) -> httpx.Response:
    assert answer.status_code in (200, 201), (
        f"{answer.request.method} {answer.request.url.path}: {answer.status_code} {answer.text[:300]}"
    )
    return answer


def _drain(c: Any, node: str) -> int:
    """Request a drain of ``node`` and approve it; its id. A 503 (the request deadline or SQLite's busy timeout on a
    loaded machine) is retried as a client would: a request is idempotent per node, an approval compare-and-set."""

    def answered(method: str, path: str, body: dict[str, str]) -> httpx.Response:
        box: list[httpx.Response] = []

        def sent() -> bool:
            box[:] = [c.request(method, path, json=body, headers=A)]
            return box[0].status_code != 503

        wait_for(sent, timeout_s=GUARD_S, what=f"{method} {path} answered other than 503", every_s=0.2)
        return box[0]

    action = int(_ok(answered("POST", "/v1/drains", {"node": node})).json()["id"])
    approved = answered("POST", f"/v1/drains/{action}/approve", {})
    if approved.status_code == 409:  # an approval that timed out but was applied, retried
        assert _state(c, action) != "requested", approved.text[:300]
    else:
        _ok(approved)
    return action


def _evictions(kube: Any) -> int:
    return sum(path.endswith("/eviction") for _, path in list(kube.requests))


def _ticks_while(r: Running, held: Callable[[], bool], what: str) -> tuple[int, bool]:
    """Wait for ``TICKS`` ticks of the loop; how many it made, and whether ``held()`` still holds after them."""
    before = r.ticks()
    wait_for(lambda: r.ticks() >= before + TICKS, timeout_s=GUARD_S, what=f"{TICKS} ticks while {what}")
    return r.ticks() - before, held()


def test_the_loop_ticks_while_a_drain_waits_and_cancel_and_sigterm_end_it(store: Store, record: Recorder) -> None:
    kube = pdb_blocked_cluster()
    api = kube.api_client()

    def actuation(service: Service) -> Actuation:
        # A PDB-refused eviction is retried after BACKOFF_S: the drain is held in its backoff for the whole test, its
        # evictions counted. A loop that waited on it, a cancel or SIGTERM that did not cut the wait short, would
        # outlast every hang guard.
        backoff = Backoff(initial_s=BACKOFF_S, max_s=BACKOFF_S, deadline_s=10 * BACKOFF_S)
        drainer = NodeDrainer(client.CoreV1Api(api), backoff=backoff)
        return Actuation(
            sessions=service.sessions, clock=service.clock, rails=DrainRails(dry_run=False), drainer=drainer,
            poll_s=0.1,
        )  # fmt: skip

    try:
        with running(store.url, request_timeout_s=GUARD_S, actuation=actuation) as r, r.client(GUARD_S) as c:
            first = _drain(c, "n0")
            wait_for(lambda: _evictions(kube) == 1, timeout_s=GUARD_S, what="the PDB's first refusal")
            ticks, held = _ticks_while(
                r, lambda: _evictions(kube) == 1 and _state(c, first) == "executing", "the drain is held"
            )
            record("ticks while a PDB keeps refusing an eviction", f"{TICKS} ticks, the drain held in its backoff",
                   f"{ticks} ticks; then {_evictions(kube)} eviction(s), drain {_state(c, first)}", held)  # fmt: skip

            _ok(c.post(f"/v1/drains/{first}/cancel", json={"message": "probe"}, headers=A))
            second = _drain(c, "n1")  # the worker is free again when a drain of n1 (no pods) runs to done
            wait_for(lambda: _state(c, second) == "done", timeout_s=GUARD_S, what="the next drain done after a cancel")
            record("cancel of a drain in PDB backoff", "the next drain done, the backoff never waited out",
                   f"{_state(c, first)}, next done; {_evictions(kube)} eviction(s)", _evictions(kube) == 1)  # fmt: skip

            third = _drain(c, "n0")
            wait_for(lambda: _evictions(kube) == 2, timeout_s=GUARD_S, what="the third drain's eviction refused")
            stopped = r.stop(timeout_s=GUARD_S)  # raises if it did not stop
            record("SIGTERM during a drain in PDB backoff", "stops, the backoff never waited out",
                   f"stopped in {stopped:.1f} s; {_evictions(kube)} eviction(s)", _evictions(kube) == 2)  # fmt: skip
        with running(store.url, request_timeout_s=GUARD_S) as r2, r2.client(GUARD_S) as c2:
            after = _state(c2, third)
            events = [e["message"] for e in _ok(c2.get(f"/v1/drains/{third}", headers=R)).json()["events"]]
        record("drain interrupted by SIGTERM", "back to approved, audited", f"{after}: {events[-1][:48]}",
               after == "approved" and "shutdown" in events[-1])  # fmt: skip
    finally:
        api.close()
        kube.stop()


@contextlib.contextmanager
def _hung(store: Store) -> Iterator[None]:
    """The store stops answering until the block ends: PostgreSQL frozen with SIGSTOP; SQLite's write lock held by
    another process's connection (BEGIN EXCLUSIVE), so every writer waits out its busy timeout."""
    if store.backend == "postgresql":
        with frozen_postgres(store.data_dir):
            yield
        return
    path = store.url.removeprefix("sqlite:///")
    conn = sqlite3.connect(path, timeout=1, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


def test_the_loop_ticks_while_the_store_hangs_and_nothing_acknowledged_is_lost(store: Store, record: Recorder) -> None:
    with running(store.url, request_timeout_s=2.0, store_hang_s=1.5) as r, r.client(GUARD_S) as c:
        wait_for(lambda: c.get("/readyz").status_code == 200, timeout_s=GUARD_S, what="ready before the hang")
        _drain(c, "before-hang")
        with _hung(store):  # everything below, to the block's end, is answered while the store answers nothing
            post = c.post("/v1/drains", json={"node": "during-hang"}, headers=A)
            record("POST while the store hangs", "503 (the request deadline), the store still held",
                   f"{post.status_code}: {post.text[:60]}", post.status_code == 503)  # fmt: skip
            wait_for(lambda: c.get("/readyz").status_code == 503, timeout_s=GUARD_S, what="/readyz 503 in the hang")
            ready = c.get("/readyz")
            said = f"{ready.status_code}: {ready.json()['store_error']}"
            record("/readyz while the store hangs", "503, no host or port", said,
                   ready.status_code == 503 and "127.0.0.1" not in ready.text and "port" not in ready.text)  # fmt: skip
            health = [c.get("/healthz").status_code for _ in range(20)]
            record("/healthz while the store hangs", "20 of 20 answered 200 (never waits on the store)",
                   f"{health.count(200)} of 20", health == [200] * 20)  # fmt: skip
            ticks, held = _ticks_while(r, lambda: c.get("/readyz").status_code == 503, "the store hangs")
            record("ticks while the store hangs", f"{TICKS} ticks, the store still away", f"{ticks}", held)
        wait_for(lambda: c.get("/readyz").status_code == 200, timeout_s=GUARD_S, what="ready after the hang")
        record("/readyz after the store returns", "200", "200", True)
        time.sleep(2.5)  # time for a late COMMIT, had the timed-out POST been applied after all (not a speed check)
        nodes = {d["node"] for d in _ok(c.get("/v1/drains", headers=R)).json()["items"]}
        w = r.service.writer
        wait_for(lambda: w.pending == 0, timeout_s=GUARD_S, what="buffered writes flushed")
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
