"""An old leader starts no eviction once it no longer leads (session 26, E).

Without sharding the new leader's first drain pass requeues every drain found executing (f6650e2) and runs it again.
The old leader's drain worker learned that it had lost the Lease only from its watch, which polls every ``poll_s``
(0.5 s): until then its drainer went on evicting, so both processes drove the same drain's evictions at once, the
same pods evicted by both. Now the drainer asks whether this instance still leads before each eviction (as it asks
whether the drain was cancelled), so the old leader's last eviction is the one in flight when its Lease ran out.
Against the fake API server, SQLite and a real PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from kubernetes import client

from collector.clock import VirtualClock
from detectors.drain_rails import DrainRails
from kvpilot.actuation import Actuation
from kvpilot.actuation.drain import NodeDrainer
from store import repo
from store.db import transaction
from tests.fakekube.eviction import evict, install
from tests.fakekube.server import FakeKube, Request
from tests.fakekube.store import Obj
from tests.helpers.drains import Pools, admin_approved

PODS = 12
EVICTION_S = 0.1  # each eviction's answer takes this long, as an API server's does


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    fake = install(FakeKube())

    def slow_evict(kube: FakeKube, req: Request) -> tuple[int, Obj]:
        time.sleep(EVICTION_S)
        return evict(kube, req)

    fake.subresources[("pods", "eviction")] = slow_evict
    fake.start()
    fake.create("nodes", {"metadata": {"name": "n0"}, "spec": {}})
    for i in range(PODS):
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"chat{i}", "uid": "u", "controller": True}
        fake.create(
            "pods",
            {
                "metadata": {"name": f"chat-{i}", "namespace": "ml", "labels": {"app": f"chat{i}"},
                             "ownerReferences": [owner]},
                "spec": {"nodeName": "n0", "containers": [{"name": "c", "image": "i"}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            },
            namespace="ml",
        )  # fmt: skip
    try:
        yield fake
    finally:
        fake.stop()


async def test_an_old_leader_starts_no_eviction_once_it_no_longer_leads(pools: Pools, kube: FakeKube) -> None:
    old_sessions, new_sessions = pools
    clock = VirtualClock(1000.0)
    started: list[tuple[str, str]] = []  # (instance, pod) as each eviction request starts

    def instance(name: str, sessions) -> tuple[Actuation, client.ApiClient]:  # type: ignore[no-untyped-def]
        api = kube.api_client()
        drainer = NodeDrainer(client.CoreV1Api(api), on_evict=lambda ref, _now: started.append((name, ref)))
        # poll_s as kvpilot run has it: the watch's cadence is what the old leader waited on
        return Actuation(sessions=sessions, clock=clock, rails=DrainRails(dry_run=False), drainer=drainer), api

    (old, old_api), (new, new_api) = instance("old", old_sessions), instance("new", new_sessions)
    try:
        action = admin_approved(old_sessions, "n0", clock.now())
        leads = threading.Event()
        leads.set()
        running = asyncio.ensure_future(old.execute_approved(asyncio.Event(), leading=leads.is_set))
        for _ in range(600):  # the old leader draining: two evictions started
            if sum(who == "old" for who, _ in started) >= 2:
                break
            await asyncio.sleep(0.01)
        leads.clear()  # its Lease ran out: from here it does not lead
        at_loss = len(started)
        # the new leader's first pass, as soon as it leads: the drain found executing, requeued and run again
        await asyncio.wait_for(new.execute_approved(asyncio.Event()), 60)
        await asyncio.wait_for(running, 60)
    finally:
        old_api.close()
        new_api.close()
    after_loss = [pod for who, pod in started[at_loss:] if who == "old"]
    twice = sorted(pod for pod, n in Counter(pod for _, pod in started).items() if n > 1)
    # before: the old leader started evictions for up to poll_s (0.5 s) after it no longer led, beside the new
    # leader's run of the same drain (c126946, load 15-22: 1 started after the loss; 2 pods evicted by both)
    assert after_loss == [], f"evictions the old leader started after it no longer led: {after_loss}; twice: {twice}"
    assert len(twice) <= 1  # at most the eviction in flight when the Lease ran out
    assert kube.store.list(kube.resource("pods"), "ml")[0] == []  # the node drained, by the new leader
    with transaction(new_sessions) as s:
        assert repo.get_drain(session=s, action_id=action).state == "done"
