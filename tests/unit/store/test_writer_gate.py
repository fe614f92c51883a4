"""SQLite's writers through the gate (store.writers), on a real SQLite file: served in the order they came, the
service's own writes before queued API writers, an API writer beyond the queue refused at once, one still queued
at its request's deadline gone from the queue, and a writer that waits out the busy timeout failing as a busy SQLite
does. Without the gate the writers waited in SQLite's busy handler, which serves whoever tries at the right moment:
24 API writers at once on a starved CPU had one wait past the 5 s busy timeout (a 503) while later ones went ahead.

Each write appends its name to ``served`` inside its transaction: one writer at a time, so the list is the order of
their turns. A writer is started only once the one before it is seen queued, so the order they came is known."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from scaler.decision import Decision
from store import repo, writers
from store.buffer import BufferedWriter, is_connectivity_error
from store.db import make_engine, request_deadline, session_factory, transaction
from store.errors import DeadlinePassed, WritersQueued
from tests.helpers.poll import wait_for

FAR_S = 60.0  # a request deadline or busy timeout that is only a hang guard


def _write(s: Session, t: float) -> None:
    repo.record_decision(session=s, decision=Decision("ns/chat", t, 1, 1, 1, 0, "steady", "", None, None, {}))


@dataclass
class Writers:
    """Writers on one engine, each in a thread of its own, the first one held in its transaction until ``let_go``."""

    engine: Engine
    sessions: sessionmaker[Session]
    served: list[str] = field(default_factory=list)
    errors: dict[str, BaseException] = field(default_factory=dict)
    threads: list[threading.Thread] = field(default_factory=list)
    holding: threading.Event = field(default_factory=threading.Event)
    let_go: threading.Event = field(default_factory=threading.Event)

    @property
    def gate(self) -> writers.WriterGate:
        gate = writers.gate_of(self.sessions)
        assert gate is not None
        return gate

    def start(self, name: str, *, deadline_s: float | None = FAR_S, hold: bool = False) -> None:
        """An API writer (``deadline_s`` from now) or, with None, one of the service's own."""

        def run() -> None:
            if deadline_s is not None:
                request_deadline.set(time.monotonic() + deadline_s)
            try:
                with transaction(self.sessions) as s:
                    _write(s, float(len(self.threads)))
                    self.served.append(name)
                    if hold:
                        self.holding.set()
                        self.let_go.wait(FAR_S)
            except BaseException as e:
                self.errors[name] = e

        thread = threading.Thread(target=run, name=name, daemon=True)
        self.threads.append(thread)
        thread.start()

    def queue(self, name: str, *, deadline_s: float | None = FAR_S) -> None:
        """Start a writer and wait until it is seen queued behind the others."""
        service, api = self.gate.queued
        self.start(name, deadline_s=deadline_s)
        lane = 0 if deadline_s is None else 1
        wait_for(lambda: self.gate.queued[lane] == (service, api)[lane] + 1, what=f"{name} queued")

    def join(self) -> None:
        self.let_go.set()
        for t in self.threads:
            t.join(FAR_S)
            assert not t.is_alive(), f"{t.name} never finished"


@pytest.fixture
def crowd(db_url: str) -> Iterator[Callable[..., Writers]]:
    made: list[Writers] = []

    def make(*, busy_timeout_s: float = FAR_S) -> Writers:
        engine = make_engine(db_url, statement_timeout_s=busy_timeout_s, pool_timeout_s=FAR_S)
        w = Writers(engine, session_factory(engine))
        made.append(w)
        return w

    yield make
    for w in made:
        w.join()
        w.engine.dispose()


def _held(crowd: Callable[..., Writers], **kw: float) -> Writers:
    w = crowd(**kw)
    w.start("holder", hold=True)
    assert w.holding.wait(FAR_S), "the first writer never began"
    return w


def test_api_writers_are_served_in_the_order_they_came(crowd: Callable[..., Writers]) -> None:
    w = _held(crowd)
    names = [f"api-{i}" for i in range(12)]
    for name in names:
        w.queue(name)
    w.join()
    assert not w.errors
    assert w.served == ["holder", *names]


def test_the_services_writes_go_before_queued_api_writers(crowd: Callable[..., Writers]) -> None:
    w = _held(crowd)
    for i in range(5):
        w.queue(f"api-{i}")
    w.queue("service-0", deadline_s=None)
    flushed: list[bool] = []
    writer = BufferedWriter(w.sessions, max_pending=10)
    writer.submit("the loop's write", lambda s: (_write(s, 99.0), w.served.append("loop")))
    flusher = threading.Thread(target=lambda: flushed.append(writer.flush()), daemon=True)
    flusher.start()
    wait_for(lambda: w.gate.queued[0] == 2, what="the loop's flush queued")
    w.join()
    flusher.join(FAR_S)
    assert not w.errors
    assert flushed == [True]
    assert w.served == ["holder", "service-0", "loop", *(f"api-{i}" for i in range(5))]


def test_an_api_writer_beyond_the_queue_is_refused_at_once(
    crowd: Callable[..., Writers], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writers, "MAX_QUEUED_REQUESTS", 3)
    w = _held(crowd)
    for i in range(3):
        w.queue(f"api-{i}")
    w.start("one too many")
    # refused while the holder still holds: it did not wait for a turn (nor for the busy timeout)
    wait_for(lambda: "one too many" in w.errors, what="the fourth API writer refused")
    assert isinstance(w.errors["one too many"], WritersQueued)
    assert w.holding.is_set()
    assert not w.let_go.is_set()
    w.queue("service-0", deadline_s=None)  # the service's own writes are never refused for a queue of API writers
    w.join()
    assert set(w.errors) == {"one too many"}
    assert w.served == ["holder", "service-0", "api-0", "api-1", "api-2"]
    assert w.gate.refused == {"queue_full": 1, "pace": 0, "deadline": 0}  # kvpilot_api_writes_refused_total


def test_an_api_writer_whose_turn_would_come_after_its_deadline_is_refused_at_once(
    crowd: Callable[..., Writers],
) -> None:
    w = _held(crowd)
    for i in range(2):
        w.queue(f"api-{i}")
    w.gate.turn_s = 2.0  # as if each turn took 2 s: the holder's, two queued, then this one's: 6 s ahead
    w.start("in a hurry", deadline_s=2.5)  # more than twice the time it has (writers.HOPELESS)
    wait_for(lambda: "in a hurry" in w.errors, what="the writer in a hurry refused")
    assert isinstance(w.errors["in a hurry"], WritersQueued)
    assert w.holding.is_set()
    assert not w.let_go.is_set()
    w.queue("patient", deadline_s=FAR_S)  # 8 s ahead of it, 60 s to go: it waits its turn
    w.join()
    assert set(w.errors) == {"in a hurry"}
    assert w.served == ["holder", "api-0", "api-1", "patient"]
    assert w.gate.refused == {"queue_full": 0, "pace": 1, "deadline": 0}


def test_an_api_writer_queued_past_its_deadline_leaves_the_queue(crowd: Callable[..., Writers]) -> None:
    w = _held(crowd)
    w.queue("api-0")
    w.start("late", deadline_s=0.5)
    wait_for(lambda: "late" in w.errors, what="the late writer gave up")
    assert isinstance(w.errors["late"], DeadlinePassed)
    assert w.gate.queued == (0, 1)
    w.join()
    assert w.served == ["holder", "api-0"]
    assert w.gate.refused == {"queue_full": 0, "pace": 0, "deadline": 1}


def test_a_writer_that_waits_out_the_busy_timeout_fails_as_a_busy_sqlite_does(
    crowd: Callable[..., Writers],
) -> None:
    w = _held(crowd, busy_timeout_s=0.3)
    w.start("service-0", deadline_s=None)
    wait_for(lambda: "service-0" in w.errors, what="the service's write gave up")
    e = w.errors["service-0"]
    assert isinstance(e, OperationalError)
    assert "database is locked" in str(e)
    assert is_connectivity_error(e, w.sessions)  # the write buffer keeps such a write for the next flush
    w.join()
    assert w.served == ["holder"]
    assert w.gate.queued == (0, 0)
    assert w.gate.refused_total == 0  # the service's own writes are not the API's refusals
