"""A batch whose COMMIT got no answer is not applied twice, on a real PostgreSQL behind a proxy that cuts the
connection at that instant (a failover, pgbouncer or a cloud load balancer, the network).

PostgreSQL took the COMMIT and committed; the writer saw only a closed connection, kept the batch and applied it
again: measured with the reliability harness behind such a proxy, 5 cuts in 40 ticks left the minute roll-ups with 45
samples (each cut batch folded in twice; a decision row would be written twice). Now the batch's transaction id is
read in it (``txid_current()``) and its status (``txid_status``) settles it before it is applied again."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

import migrations
from store import repo
from store.buffer import BufferedWriter, _InDoubt
from store.db import make_engine, session_factory
from store.models import RollupRow
from tests.services.postgres import PostgresServer, fresh_database


class _CuttingProxy:
    """Passes bytes between kvpilot and PostgreSQL; once armed, cuts the next connection that sends ``at`` (b"COMMIT":
    after passing it on, never passing on the answer; another word: before passing it on)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port, self.armed, self.at, self.cuts = upstream_port, False, b"COMMIT", 0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            self.server = self.loop.run_until_complete(asyncio.start_server(self._pipe, "127.0.0.1", 0))
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        ready.wait(10)

    def close(self) -> None:
        """Ends every pipe on the proxy's own loop, then the loop: a pipe left pending when the loop stopped was closed
        by the garbage collector later, on a closed loop, in whichever test ran then (an unraisable RuntimeError)."""

        async def end() -> None:
            self.server.close()
            pipes = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in pipes:
                t.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(end(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    async def _pipe(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sr, sw = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        cut = asyncio.Event()

        async def up() -> None:
            while data := await cr.read(65536):
                if self.armed and self.at in data:
                    self.armed, self.cuts = False, self.cuts + 1
                    cut.set()  # from here the server's answers are not passed on
                    if self.at == b"COMMIT":
                        sw.write(data)
                        await sw.drain()
                        await asyncio.sleep(1.0)  # the server commits
                    return
                sw.write(data)
                await sw.drain()

        async def down() -> None:
            while (data := await sr.read(65536)) and not cut.is_set():
                cw.write(data)
                await cw.drain()

        try:
            await asyncio.wait([asyncio.ensure_future(up()), asyncio.ensure_future(down())], timeout=None,
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        finally:
            cw.transport.abort()
            sw.transport.abort()


@pytest.fixture
def behind_proxy(postgres: PostgresServer) -> Iterator[tuple[str, _CuttingProxy]]:
    url = fresh_database(postgres)
    migrations.upgrade(url)
    parsed = make_url(url)
    assert parsed.port is not None
    proxy = _CuttingProxy(parsed.port)
    yield parsed.set(port=proxy.port).render_as_string(hide_password=False), proxy
    proxy.close()


@pytest.mark.integration
@pytest.mark.parametrize(("at", "why"), [(b"COMMIT", "committed, its answer lost"), (b"rollups", "cut before it")])
def test_a_batch_is_applied_once_whether_or_not_its_lost_commit_went_through(
    behind_proxy: tuple[str, _CuttingProxy], at: bytes, why: str
) -> None:
    url, proxy = behind_proxy
    engine = make_engine(url, statement_timeout_s=5.0)
    factory = session_factory(engine)
    writer = BufferedWriter(factory, max_pending=100)
    try:
        writer.submit("rollup", lambda s: repo.record_rollup(session=s, deployment="llm/chat", t=60.0, signals={}))
        proxy.at, proxy.armed = at, True
        assert not writer.flush()  # the connection cut: kept
        assert proxy.cuts == 1
        assert writer.flush()
        with factory() as s:
            samples = s.scalars(select(RollupRow.samples)).all()
    finally:
        engine.dispose()
    # before (committed, its answer lost): [2], the batch applied twice; cut before its COMMIT: [1] on both
    assert samples == [1], why
    assert (writer.written_total, writer.pending, writer.lost_total) == (1, 0, 0)


def test_a_server_that_cannot_tell_has_the_batch_applied_again_as_before(
    factory: sessionmaker[Session], caplog: pytest.LogCaptureFixture
) -> None:
    # txid_status is PostgreSQL 10's: where it cannot answer (here SQLite, which has no such function), the batch in
    # doubt is applied again, as before, with one warning; the store is not held down by it
    writer = BufferedWriter(factory, max_pending=100)
    writer.submit("rollup", lambda s: repo.record_rollup(session=s, deployment="llm/chat", t=60.0, signals={}))
    with writer._lock:
        writer._in_doubt = _InDoubt(list(writer._pending), 12345, time.monotonic())
    with caplog.at_level(logging.WARNING, logger="store.buffer"):
        assert writer.flush()
    with factory() as s:
        assert s.scalars(select(RollupRow.samples)).all() == [1]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1
    assert said[0].startswith("store: cannot tell whether a COMMIT that got no answer went through: ")
    assert writer.up
