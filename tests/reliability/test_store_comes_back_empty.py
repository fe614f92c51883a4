"""The store comes back empty under a running kvpilot: a PostgreSQL database restored or recreated without its data
(its schema dropped), a SQLite file removed (the next connection creates an empty one). With store.auto_migrate on,
kvpilot creates the schema again, as a restart would, and its buffered writes follow: ready again, writes taken, none
lost. Before, every write and read failed ("no such table", "relation does not exist") until a restart: /readyz 503
for good while /healthz stayed 200 (so nothing restarted it), the buffer filling, then dropping its oldest writes."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

import migrations
from tests.helpers.poll import wait_for
from tests.reliability.conftest import Recorder, Store
from tests.reliability.harness import A, R, running


def _emptied(store: Store) -> None:
    """The store's data gone: the SQLite file and its WAL removed; PostgreSQL's schema dropped and made again, empty
    (tried again where it deadlocks with the running kvpilot's own statements)."""
    if store.server is None:
        path = Path(str(make_url(store.url).database))
        for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            p.unlink(missing_ok=True)
        return
    _on_postgres(store, ("DROP SCHEMA public CASCADE", "CREATE SCHEMA public"))


def _on_postgres(store: Store, statements: tuple[str, ...]) -> None:
    """``statements`` in one transaction on the store's PostgreSQL, tried again where they deadlock with the running
    kvpilot's own statements."""
    url = store.url.replace("+psycopg", "")
    for _ in range(50):
        try:
            with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
                for statement in statements:
                    conn.execute(statement)
            return
        except (psycopg.errors.DeadlockDetected, psycopg.errors.LockNotAvailable):
            time.sleep(0.1)
    raise AssertionError(f"{statements} could not run in 50 tries")


def test_a_store_that_comes_back_empty_gets_its_schema_again_and_the_buffered_writes(
    store: Store, record: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with running(store.url, recreate_after_s=1.0) as r, r.client() as c:
        wait_for(lambda: c.get("/readyz").status_code == 200, timeout_s=20, what="ready before")
        assert c.post("/v1/drains", json={"node": "before"}, headers=A).status_code == 201
        w = r.service.writer
        _emptied(store)
        written = w.written_total
        # a write fails on the empty store; the schema may be back before a poll sees it down, but not unsaid
        wait_for(lambda: not w.up or _said(caplog), timeout_s=20, what="a write failing on the empty store")
        try:
            back = wait_for(lambda: c.get("/readyz").status_code == 200, timeout_s=20, what="ready again")
        except AssertionError:
            back = None
        record("the store emptied under kvpilot run", "ready again within 20 s",
               "never" if back is None else f"{back:.1f} s", back is not None)  # fmt: skip
        at = migrations.current(store.url)
        after = c.post("/v1/drains", json={"node": "after"}, headers=A)
        nodes = sorted(d["node"] for d in c.get("/v1/drains", headers=R).json()["items"])
        wait_for(lambda: w.pending == 0, timeout_s=20, what="buffered writes flushed")
        record("after it", "schema at head, a new drain taken, the buffered writes stored, 0 writes lost",
               f"schema {at}, POST {after.status_code}, drains {nodes}, {w.written_total - written} writes stored, "
               f"lost {w.lost_total}",
               at == migrations.head() and after.status_code == 201 and nodes == ["after"]
               and w.written_total > written and w.lost_total == 0)  # fmt: skip
    said = _said(caplog)
    record("said", "one warning that the schema was created again", f"{said}", said == 1)


def _aside(store: Store, back: bool) -> None:
    """The store's data moved aside (``back``: moved back) as an operator restoring a backup does: the SQLite file and
    its WAL renamed; PostgreSQL's schema renamed and an empty one made in its place (tried again where it deadlocks
    with the running kvpilot's own statements)."""
    if store.server is None:
        path = Path(str(make_url(store.url).database))
        for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            src, dst = (p.with_name(p.name + ".aside"), p) if back else (p, p.with_name(p.name + ".aside"))
            if back:
                dst.unlink(missing_ok=True)
            if src.exists():
                src.rename(dst)
        return
    _on_postgres(
        store,
        ("DROP SCHEMA public CASCADE", "ALTER SCHEMA aside RENAME TO public")
        if back
        else ("ALTER SCHEMA public RENAME TO aside", "CREATE SCHEMA public"),
    )


def test_a_store_brought_back_within_recreate_after_s_keeps_its_data_and_takes_the_held_writes(
    store: Store, record: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with running(store.url, recreate_after_s=60.0) as r, r.client() as c:
        wait_for(lambda: c.get("/readyz").status_code == 200, timeout_s=20, what="ready before")
        assert c.post("/v1/drains", json={"node": "before"}, headers=A).status_code == 201
        w = r.service.writer
        _aside(store, back=False)
        written = w.written_total
        wait_for(lambda: _waiting(caplog) > 0, timeout_s=20, what="the schema's absence said")
        _aside(store, back=True)
        try:
            back = wait_for(lambda: c.get("/readyz").status_code == 200, timeout_s=20, what="ready again")
        except AssertionError:
            back = None
        wait_for(lambda: w.pending == 0, timeout_s=20, what="held writes flushed")
        wait_for(lambda: _again(caplog) > 0, timeout_s=20, what="its return said (by the next store probe)")
        nodes = sorted(d["node"] for d in c.get("/v1/drains", headers=R).json()["items"])
        record("the store moved aside and back within recreate_after_s", "ready again, its data kept, the held "
               "writes stored in it, 0 lost, no schema created meanwhile",
               f"ready {'never' if back is None else f'{back:.1f} s'}, drains {nodes}, "
               f"{w.written_total - written} writes stored, lost {w.lost_total}, created {_said(caplog)}",
               back is not None and nodes == ["before"] and w.written_total > written and w.lost_total == 0
               and _said(caplog) == 0)  # fmt: skip
    said = (_waiting(caplog), _again(caplog))
    record("said", "its absence once, its return once", f"{said}", said == (1, 1))


def _waiting(caplog: pytest.LogCaptureFixture) -> int:
    return sum("holds no kvpilot schema" in m.getMessage() for m in list(caplog.records))


def _again(caplog: pytest.LogCaptureFixture) -> int:
    return sum("holds kvpilot's schema again" in m.getMessage() for m in list(caplog.records))


def _said(caplog: pytest.LogCaptureFixture) -> int:
    return sum("without kvpilot's schema" in m.getMessage() for m in list(caplog.records))
