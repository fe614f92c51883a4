"""The store away while a drain runs: the drain's end is stored once the store is back, and the drain rail's slot it
held is free again. A drain that ended (here: a PodDisruptionBudget that refuses every eviction, given up on after
its deadline) while the store could not take its result stayed `executing` in the store until a restart: its steps
and outcome never written, and with drains.max_concurrent 1 (the default) no other drain could be approved."""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

import pytest
from kubernetes import client

from detectors.drain_rails import DrainRails
from kvpilot.actuation import Actuation
from kvpilot.actuation.drain import Backoff, DrainResult, NodeDrainer
from kvpilot.runtime.service import Service
from tests.helpers.poll import wait_for
from tests.reliability.conftest import Recorder, Store
from tests.reliability.harness import A, R, running
from tests.reliability.scenes import pdb_blocked_cluster, store_away


def _state(c: Any, action: int) -> str:
    return str(c.get(f"/v1/drains/{action}", headers=R).json()["state"])


def test_a_drain_that_ends_while_the_store_is_away_is_stored_when_it_returns(
    store: Store, record: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    kube = pdb_blocked_cluster()
    away, ended = threading.Event(), threading.Event()

    class Noted(NodeDrainer):
        """Its end handed back only once the store is away, however long stopping it takes under load."""

        def drain(self, *args: Any, **kwargs: Any) -> DrainResult:
            try:
                return super().drain(*args, **kwargs)
            finally:
                away.wait(60)
                ended.set()

    def actuation(service: Service) -> Actuation:
        drainer = Noted(client.CoreV1Api(kube.api_client()), backoff=Backoff(initial_s=0.2, max_s=0.2, deadline_s=3))
        return Actuation(sessions=service.sessions, clock=service.clock, rails=DrainRails(dry_run=False),
                         drainer=drainer, poll_s=0.1)  # fmt: skip

    try:
        with running(store.url, actuation=actuation) as r, r.client() as c:
            first = c.post("/v1/drains", json={"node": "n0"}, headers=A).json()["id"]
            assert c.post(f"/v1/drains/{first}/approve", json={}, headers=A).status_code == 200
            wait_for(lambda: _state(c, first) == "executing", timeout_s=10, what="the drain executing")
            with store_away(store):
                # the drain gives up on the PDB after its deadline, with the store away
                wait_for(lambda: c.get("/readyz").status_code == 503, timeout_s=20, what="/readyz 503")
                away.set()
                wait_for(ended.is_set, timeout_s=30, what="the drain ended (given up on after its deadline)")
                # its end's write tried, and refused, while the store is away (the worker says so)
                wait_for(lambda: any("drain worker: store unavailable" in m.getMessage() for m in list(caplog.records)),
                         timeout_s=30, what="the drain's end refused by the away store")  # fmt: skip
            wait_for(lambda: c.get("/readyz").status_code == 200, timeout_s=30, what="ready after the outage")
            with contextlib.suppress(AssertionError):  # recorded below
                wait_for(lambda: _state(c, first) != "executing", timeout_s=20, what="the drain's end stored")
            state = _state(c, first)
            second = c.post("/v1/drains", json={"node": "n1"}, headers=A).json()["id"]
            approve = c.post(f"/v1/drains/{second}/approve", json={}, headers=A)
    finally:
        away.set()
        kube.stop()
    record("a drain that ends while the store is away", "stored failed (blocked) once back; the rail's slot free",
           f"{state}; another drain's approval: {approve.status_code}",
           state == "failed" and approve.status_code == 200)  # fmt: skip
