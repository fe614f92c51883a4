"""The store away under a running kvpilot, said once: the drain passes that read it every tick (the actuator's drain
requests and the drain worker) each warn once for the outage and say once that the store answers again, as the store
writer does. Before, each warned every tick for the whole outage: two lines every 5 s at the default tick (a real
PostgreSQL stopped, a SQLite file that cannot be opened)."""

from __future__ import annotations

import logging

import pytest
from kubernetes import client

from detectors.drain_rails import DrainRails
from kvpilot.actuation import Actuation
from kvpilot.actuation.drain import NodeDrainer
from kvpilot.runtime.service import Service
from tests.fakekube.server import FakeKube
from tests.helpers.poll import wait_for
from tests.reliability.conftest import Recorder, Store
from tests.reliability.harness import running
from tests.reliability.scenes import store_away

PASSES = ("kvpilot.actuation", "kvpilot.runtime.service")  # the drain requests' and the drain worker's loggers


def _said(records: list[logging.LogRecord], level: int, words: str) -> int:
    return sum(r.name in PASSES and r.levelno == level and words in r.getMessage() for r in records)


def test_a_store_away_is_said_once_by_each_drain_pass_then_its_return(
    store: Store, record: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    kube = FakeKube().start()
    interval = 0.25

    def actuation(service: Service) -> Actuation:
        drainer = NodeDrainer(client.CoreV1Api(kube.api_client()))
        return Actuation(sessions=service.sessions, clock=service.clock, rails=DrainRails(dry_run=True),
                         drainer=drainer, poll_s=0.1)  # fmt: skip

    caplog.set_level(logging.INFO)
    try:
        with running(store.url, interval_s=interval, actuation=actuation) as r, r.client() as c:
            wait_for(lambda: c.get("/readyz").status_code == 200, timeout_s=20, what="ready before the outage")
            with store_away(store):
                wait_for(lambda: c.get("/readyz").status_code == 503, timeout_s=20, what="/readyz 503")
                caplog.clear()
                before = r.ticks()
                wait_for(lambda: r.ticks() - before >= 12, timeout_s=30, what="12 ticks while the store is away")
                during = list(caplog.records)
            wait_for(lambda: c.get("/readyz").status_code == 200, timeout_s=30, what="ready after the outage")
            back = r.service.actuator_passes_done
            wait_for(lambda: r.service.actuator_passes_done >= back + 4, timeout_s=20, what="4 passes after")
            after = list(caplog.records)
    finally:
        kube.stop()
    warned = _said(during, logging.WARNING, "store unavailable")
    record("the store away for 12 ticks", "at most 1 warning from each drain pass (2)",
           f"{warned} warnings", warned <= 2)  # fmt: skip
    again = _said(after, logging.INFO, "the store answers again")
    record("the store back", "each drain pass says so once (2)", f"{again} lines", again == 2)
