"""The store away while a drain runs: the drain's end is stored once the store is back, and the drain rail's slot it
held is free again. A drain that ended (here: a PodDisruptionBudget that refuses every eviction, given up on after
its deadline) while the store could not take its result stayed `executing` in the store until a restart: its steps
and outcome never written, and with drains.max_concurrent 1 (the default) no other drain could be approved."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from sqlalchemy.engine import make_url

from detectors.drain_rails import DrainRails
from kvpilot.actuation import Actuation
from kvpilot.actuation.drain import Backoff, DrainResult, NodeDrainer
from kvpilot.runtime.service import Service
from tests.fakekube.eviction import install
from tests.fakekube.server import FakeKube
from tests.helpers.poll import wait_for
from tests.reliability.conftest import Recorder, Store
from tests.reliability.harness import A, R, running


def _cluster() -> FakeKube:
    """Nodes n0 and n1; on n0 the only pod of an app whose PDB needs one available: every eviction is a 429."""
    kube = install(FakeKube()).start()
    for node in ("n0", "n1"):
        kube.create("nodes", {"metadata": {"name": node}, "spec": {}})
    kube.create(
        "pods",
        {
            "metadata": {"name": "chat-0", "namespace": "llm", "labels": {"app": "chat"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "c", "uid": "u"}]},
            "spec": {"nodeName": "n0", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        },
        namespace="llm",
    )  # fmt: skip
    kube.create(
        "poddisruptionbudgets",
        {"metadata": {"name": "chat"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "chat"}}}},
        namespace="llm",
    )
    return kube


@contextlib.contextmanager
def _away(store: Store) -> Iterator[None]:
    """PostgreSQL stopped and started again; a SQLite file's folder moved aside and back (no connection opens it)."""
    if store.server is not None:
        store.server.stop()
        try:
            yield
        finally:
            store.server.start()
        return
    folder = Path(str(make_url(store.url).database)).parent
    aside = folder.with_name(folder.name + ".aside")
    os.rename(folder, aside)
    try:
        yield
    finally:
        os.rename(aside, folder)


def _state(c: Any, action: int) -> str:
    return str(c.get(f"/v1/drains/{action}", headers=R).json()["state"])


def test_a_drain_that_ends_while_the_store_is_away_is_stored_when_it_returns(
    store: Store, record: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    kube = _cluster()
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
            with _away(store):
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
