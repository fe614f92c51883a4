"""A crowd of API writers on SQLite, through the whole service: while one change is being written, those that can
no longer queue for SQLite's one writer are answered 503 with ``Retry-After`` at once, the queued ones are written
when their turn comes, and the service stays ready. Before the writer gate (store.writers) every one of them waited in
SQLite's busy handler and, once the write ahead took longer than the 5 s busy timeout, got a 503 without
``Retry-After`` ("database is locked"), after 5 s. Each refusal is counted on ``/metrics``
(``kvpilot_api_writes_refused_total{reason}``), as many as the clients got."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from anyio import to_thread

import migrations
from api.handoff import writers_limiter
from store import repo, writers
from tests.helpers.poll import wait_for
from tests.reliability.harness import A, R, Running, running

HANG_GUARD_S = 60.0
# How long the read may take while the crowd waits: a read waits for no writer (ms on an idle VM); a read stuck
# behind the crowd waits for as long as the held write is held (until this test lets it go).
READ_PATIENCE_S = 20.0
QUEUE = 4  # writers.MAX_QUEUED_REQUESTS, small so that a handful of clients overflows it
CROWD = 10


def _store_holding_the_first_drain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, queue: int | None = QUEUE
) -> tuple[str, threading.Event, threading.Event]:
    """A migrated SQLite store whose write of the drain for node ``held`` holds its turn at the writer gate: it sets
    ``holding`` once inside its transaction and waits for ``let_go``, so the crowd arrives while it writes. ``queue``:
    the gate's ``MAX_QUEUED_REQUESTS`` (None: its own)."""
    url = f"sqlite:///{tmp_path / 'kvpilot.db'}"
    migrations.upgrade(url)
    if queue is not None:
        monkeypatch.setattr(writers, "MAX_QUEUED_REQUESTS", queue)
    holding, let_go = threading.Event(), threading.Event()
    request_drain: Callable[..., Any] = repo.request_drain

    def held_first(**kw: Any) -> Any:
        row = request_drain(**kw)
        if kw["node"] == "held":  # inside its transaction, holding the turn: the crowd comes now
            holding.set()
            let_go.wait(HANG_GUARD_S)
        return row

    monkeypatch.setattr(repo, "request_drain", held_first)
    return url, holding, let_go


@contextmanager
def _serving(url: str, clients: int) -> Iterator[tuple[Running, httpx.Client, Callable[[str], Future[httpx.Response]]]]:
    """kvpilot serving the store at ``url``, a client of it, and ``post(node)``: a drain requested for ``node`` from one
    of ``clients`` threads (its answer a future)."""
    with (
        running(url, request_timeout_s=HANG_GUARD_S) as r,
        ThreadPoolExecutor(clients) as pool,
        httpx.Client(base_url=r.base, timeout=HANG_GUARD_S, trust_env=False) as c,
    ):

        def post(node: str) -> Future[httpx.Response]:
            return pool.submit(c.post, "/v1/drains", json={"node": node}, headers=A)

        yield r, c, post


def test_writers_beyond_the_queue_are_refused_at_once_and_the_queued_ones_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, holding, let_go = _store_holding_the_first_drain(tmp_path, monkeypatch)
    with _serving(url, CROWD + 1) as (_, c, post):
        try:
            first = post("held")
            assert holding.wait(HANG_GUARD_S), "the first POST never reached its write"
            crowd: dict[str, Future[httpx.Response]] = {f"n{i}": post(f"n{i}") for i in range(CROWD)}
            wait_for(
                lambda: sum(f.done() for f in crowd.values()) >= CROWD - QUEUE,
                what=f"{CROWD - QUEUE} of the crowd answered while the first write is held",
                timeout_s=HANG_GUARD_S,
            )
            refused = {node: f.result() for node, f in crowd.items() if f.done()}
            assert not let_go.is_set()
        finally:
            let_go.set()
        answers = {node: f.result() for node, f in crowd.items()}
        assert first.result().status_code == 201
        assert {a.status_code for a in refused.values()} == {503}
        assert all(int(a.headers["retry-after"]) >= 1 for a in refused.values())  # when the writes ahead are done
        written = {node for node, a in answers.items() if a.status_code == 201}
        assert len(refused) == CROWD - QUEUE
        assert written == set(crowd) - set(refused)
        stored = {d["node"] for d in c.get("/v1/drains", params={"limit": 100}, headers=R).json()["items"]}
        assert stored == {"held", *written}
        # ready again once the service's own writes went through (served first; on a starved CPU the one queued
        # behind the held write may have waited out the busy timeout meanwhile, and is then flushed again)
        wait_for(lambda: c.get("/readyz").status_code == 200, what="/readyz 200", timeout_s=HANG_GUARD_S)


def _refused(c: httpx.Client) -> dict[str, float]:
    """``kvpilot_api_writes_refused_total`` by reason, from kvpilot's own /metrics page."""
    page = c.get("/metrics").text
    return {
        m[0]: float(m[1]) for m in re.findall(r'^kvpilot_api_writes_refused_total\{reason="(\w+)"\} (\S+)$', page, re.M)
    }


def test_the_refused_writers_are_counted_on_metrics_as_the_clients_got_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    crowd_size = 40
    url, holding, let_go = _store_holding_the_first_drain(tmp_path, monkeypatch)
    with _serving(url, crowd_size + 1) as (_, c, post):
        # every reason from 0, before any refusal (an increase() sees the first)
        assert _refused(c) == {"queue_full": 0, "pace": 0, "deadline": 0}
        try:
            first = post("held")
            assert holding.wait(HANG_GUARD_S), "the first POST never reached its write"
            crowd = [post(f"n{i}") for i in range(crowd_size)]
            wait_for(
                lambda: sum(f.done() for f in crowd) >= crowd_size - QUEUE,
                what="the crowd beyond the queue answered while the first write is held",
                timeout_s=HANG_GUARD_S,
            )
            held_count = _refused(c)  # read while the queued ones still wait
        finally:
            let_go.set()
        answers = [f.result() for f in crowd]
        assert first.result().status_code == 201
        told_to_retry = sum(a.status_code == 503 and "retry-after" in a.headers for a in answers)
        assert told_to_retry == crowd_size - QUEUE
        assert sorted(a.status_code for a in answers) == [201] * QUEUE + [503] * told_to_retry
        assert held_count == {"queue_full": told_to_retry, "pace": 0, "deadline": 0}
        assert sum(_refused(c).values()) == told_to_retry  # nothing more once the queued ones were written


def _writers_waiting(r: Running) -> int:
    """API writers waiting for the store: at the writer gate, or for a worker thread (anyio's shared ones, or the
    writers' own: api.handoff)."""

    async def off_the_gate() -> int:
        limiters = (to_thread.current_default_thread_limiter(), writers_limiter())
        return sum(limiter.statistics().tasks_waiting for limiter in limiters)

    at_gate = writers.gate_of(r.service.sessions).queued[1]  # type: ignore[union-attr]  # SQLite: it has one
    return at_gate + asyncio.run_coroutine_threadsafe(off_the_gate(), r.loop).result(HANG_GUARD_S)


def test_reads_are_answered_while_more_writers_than_worker_threads_wait_for_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """50 changes wait for one being written: at most 16 of them in threads of their own, the rest on the event loop,
    none in the 40 worker threads reads share, so a read is still answered meanwhile (before, the writers held every
    thread until the one ahead was written, and the read waited for a thread as long), and every one of them is
    written once the store is free."""
    crowd_size = 50  # more than anyio's 40 worker threads
    url, holding, let_go = _store_holding_the_first_drain(tmp_path, monkeypatch, queue=None)
    with _serving(url, crowd_size + 1) as (r, c, post):
        try:
            first = post("held")
            assert holding.wait(HANG_GUARD_S), "the first POST never reached its write"
            crowd = {f"n{i}": post(f"n{i}") for i in range(crowd_size)}
            wait_for(lambda: _writers_waiting(r) == crowd_size, what="the whole crowd waiting", timeout_s=HANG_GUARD_S)
            try:
                read = c.get("/v1/drains", params={"limit": 1}, headers=R, timeout=READ_PATIENCE_S)
            except httpx.TimeoutException:
                pytest.fail(f"a read waited over {READ_PATIENCE_S} s behind writers waiting for the store")
            assert read.status_code == 200
            assert not any(f.done() for f in crowd.values())  # the read was answered while they all still waited
        finally:
            let_go.set()
        assert first.result().status_code == 201
        assert {node: f.result().status_code for node, f in crowd.items()} == dict.fromkeys(crowd, 201)
        stored = {d["node"] for d in c.get("/v1/drains", params={"limit": 100}, headers=R).json()["items"]}
        assert stored == {"held", *crowd}
