"""A shard taken over answers KEDA from its first call (issue 17): three kvpilot services sharding one fleet (as in
``test_shards_service``: ``build_service``, a ``ShardCoordinator`` each against the fake Kubernetes API, a KEDA gRPC
endpoint each on loopback). KEDA's connection is pinned to one pod, as kube-proxy pins it: it asks each deployment
of the shard that dies only of the instance that takes it over, which never relayed an answer for it (nothing kept,
``scaler.keda.forward``). From the round that takes the Lease to the tick that decides the shard, that instance
answers from the decisions the dead one stored; before, it answered ``NOT_FOUND``."""

from __future__ import annotations

import asyncio
import contextlib

import grpc
import pytest
from prometheus_client import generate_latest

from collector.clock import VirtualClock
from collector.scrape import VirtualTimer
from kvpilot.runtime.lease import Leases
from kvpilot.runtime.shards import ShardCoordinator, shard_of
from kvpilot.runtime.sources import Sources
from kvpilot.runtime.taken_answers import StoredAnswers
from kvpilot.runtime.targets import StaticTargets
from kvpilot.runtime.wiring import build_service
from scaler.decision import Decision
from scaler.keda import externalscaler_pb2 as pb
from scaler.keda import externalscaler_pb2_grpc as pb_grpc
from scaler.keda.forward import DECISION_AT, Forwarding
from scaler.keda.reader import DecisionReader
from scaler.keda.server import build_endpoint
from scaler.keda.servicer import ServicerSettings
from store import repo
from store.db import make_engine, session_factory, transaction
from tests.fakekube import FakeKube
from tests.helpers.poll import until
from tests.unit.kvpilot.fleet_double import START, settings_for
from tests.unit.kvpilot.runtime.test_shards_service import (
    DEPLOYMENTS,
    INTERVAL_S,
    LEASE_S,
    RENEW_S,
    SHARDS,
    STALE_S,
    STEP_S,
    TARGETS,
    Fleet,
    Instance,
    _settle,
    _step,
)


async def _instance(
    name: str, kube: FakeKube, clock: VirtualClock, timer: VirtualTimer, url: str, renew_s: float = RENEW_S
) -> Instance:
    """As ``test_shards_service``'s, with KEDA reading what ``kvpilot run`` hands it: ``Service.decisions``."""
    shards = ShardCoordinator(
        Leases(kube.api_client()),
        lease_name="kvpilot",
        namespace="kv",
        identity=name,
        address="",
        shards=SHARDS,
        clock=clock,
        lease_duration_s=LEASE_S,
    )
    static = StaticTargets(list(TARGETS))
    fleet = Fleet(clock)
    service, restored = build_service(
        settings_for(url, ha={"renew_every_s": renew_s, "lease_duration_s": LEASE_S}),
        Sources(static, static),
        clock=clock,
        collector=fleet,
        sleep=timer.sleep,
        leadership=shards,
    )
    answers = service.decisions
    assert isinstance(answers, StoredAnswers)
    answers.wait_s = 30.0  # a store read slowed by a loaded machine still lands before the shard counts as held
    reader = DecisionReader(answers, clock, STALE_S)
    endpoint = build_endpoint("127.0.0.1:0", reader, ServicerSettings(), forwarding=Forwarding(shards, clock, STALE_S))
    shards.address = f"127.0.0.1:{endpoint.port}"
    stop_grpc = asyncio.Event()
    grpc_task = asyncio.create_task(endpoint.serve(stop_grpc, grace_s=0.5))
    await service.start(restored)
    channel = grpc.aio.insecure_channel(shards.address)
    stub = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
    return Instance(name, service, shards, endpoint, fleet, stop_grpc, grpc_task, stub, channel)


def _stored(url: str) -> dict[str, Decision]:
    engine = make_engine(url)
    try:
        with transaction(session_factory(engine), reads_only=True) as s:
            return repo.latest_decisions(session=s)
    finally:
        engine.dispose()


async def _get_metrics(via: Instance, deployment: str) -> tuple[int, float]:
    """KEDA's GetMetrics for ``llm/<deployment>``, straight to ``via``: the count and its decision's time; raises
    ``grpc.aio.AioRpcError`` on a refusal."""
    request = pb.GetMetricsRequest(
        scaledObjectRef=pb.ScaledObjectRef(name=deployment, namespace="llm"), metricName="kvpilot-replicas"
    )
    call = via.stub.GetMetrics(request, timeout=5)
    response = await call
    trailing = dict(await call.trailing_metadata() or ())
    return response.metricValues[0].metricValue, float(trailing[DECISION_AT])


async def _is_active(via: Instance, deployment: str) -> bool:
    response = await via.stub.IsActive(pb.ScaledObjectRef(name=deployment, namespace="llm"), timeout=5)
    return bool(response.result)


@pytest.mark.parametrize(
    "restart",
    [
        False,  # a survivor takes the dead instance's shard when its Lease expires
        # the dead instance restarted at once under its name (a StatefulSet's pod): it takes its own shard back at its
        # second round, 3 s in (its renew interval), its second tick 5 s in
        True,
    ],
)
async def test_a_shard_taken_over_answers_keda_from_the_lease_on(kube: FakeKube, tmp_path, restart: bool) -> None:
    clock = VirtualClock(START)
    timer = VirtualTimer(clock)
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    instances = [await _instance(n, kube, clock, timer, url) for n in ("a", "b", "c")]
    try:
        await _settle(timer, instances)
        for _ in range(int(3 * INTERVAL_S / STEP_S)):  # members meet, shards settle, a few ticks each
            await _step(timer, instances)
        victim = instances[0]
        lost = set(victim.shards.owned)
        assert len(lost) == 1, {i.name: i.shards.owned for i in instances}
        lost_deployments = [d for d in DEPLOYMENTS if shard_of(f"llm/{d}", SHARDS) in lost]
        assert lost_deployments
        last = {d: await _get_metrics(victim, d) for d in lost_deployments}  # KEDA pinned to the victim

        def stored_as_published() -> bool:  # the victim's store writer has caught up (it flushes after each tick)
            rows = _stored(url)
            return all(f"llm/{d}" in rows and rows[f"llm/{d}"].desired_replicas == last[d][0] for d in lost_deployments)

        await until(stored_as_published, what="the victim's decisions stored")
        rows = _stored(url)

        # a crash: nothing released, the gRPC port closes; the survivors never answered for its deployments
        victim.alive = False
        for task in victim.service.tasks:
            task.cancel()
        await asyncio.gather(*victim.service.tasks, return_exceptions=True)
        victim.stop_grpc.set()
        await victim.grpc_task
        survivors = instances[1:]
        if restart:
            survivors = [await _instance("a", kube, clock, timer, url, renew_s=3.0)]
            instances.append(survivors[0])
            await _settle(timer, instances)
        killed_at = clock.now()

        before_tick = 0  # calls answered by the new holder before its loop decided the deployment
        decided_by_new = set()
        while clock.now() - killed_at < LEASE_S + 3 * INTERVAL_S and len(decided_by_new) < len(lost_deployments):
            await _step(timer, instances)
            holder = next((i for i in survivors if lost <= i.shards.owned), None)
            if holder is None:
                continue
            for d in lost_deployments:  # KEDA's connection now pinned to the holder: every call has an answer
                undecided = holder.service.loop.board.latest(f"llm/{d}") is None
                value, at = await _get_metrics(holder, d)
                assert await _is_active(holder, d)
                assert clock.now() - at <= STALE_S, (d, clock.now() - at)
                if undecided:  # the dead holder's last decision, as it stored it (an unchanged one is not re-stored
                    before_tick += 1  # every tick: its row may be older than the answer it last gave)
                    assert value == last[d][0], (d, value, last[d])
                    assert at == rows[f"llm/{d}"].timestamp, (d, at, last[d])
                else:
                    decided_by_new.add(d)
                    assert at > killed_at
        assert decided_by_new == set(lost_deployments), "the new holder never decided the shard taken"
        # the window this is about was there: the Lease held, the tick not yet run (the round wakes just after the
        # dead Lease expires, or 3 s after the restart; the ticks keep their 5 s grid)
        assert before_tick >= len(lost_deployments), before_tick
        answers = holder.service.decisions
        assert isinstance(answers, StoredAnswers)
        assert answers.served_total >= 2 * before_tick
    finally:
        for i in instances:
            if i.alive:
                i.service.stop.set()
        for i in instances:
            if i.alive:
                await timer.advance(INTERVAL_S)
                await i.service.wait()
                i.stop_grpc.set()
                await i.grpc_task
            await i.channel.close()
            with contextlib.suppress(Exception):
                i.service.engine.dispose()


async def test_a_steady_deployment_is_answered_at_a_takeover_though_its_row_is_older_than_the_limit(
    kube: FakeKube, tmp_path
) -> None:
    """A steady deployment's decision is stored once, then again only at the heartbeat (a minute): at a takeover its
    row was past the staleness limit, and the new holder answered ``UNAVAILABLE`` until its tick (one failure towards
    KEDA's fallback per call). The old holder's Leases said until when its committed rows were in force: the answer
    is the row, its age counted from then."""
    clock = VirtualClock(START)
    timer = VirtualTimer(clock)
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    instances = [await _instance(n, kube, clock, timer, url) for n in ("a", "b", "c")]
    try:
        await _settle(timer, instances)
        for _ in range(int(3 * INTERVAL_S / STEP_S)):
            await _step(timer, instances)
        victim = instances[0]
        lost = set(victim.shards.owned)
        assert len(lost) == 1, {i.name: i.shards.owned for i in instances}
        keys = [f"llm/{d}" for d in DEPLOYMENTS if shard_of(f"llm/{d}", SHARDS) in lost]
        assert keys
        # steady: every row of the shard older than the limit (and a tick) by the time its Lease expires, still
        # younger than the heartbeat that stores it again
        while True:
            await _step(timer, instances)
            rows = _stored(url)
            if all(k in rows and clock.now() + LEASE_S - rows[k].timestamp > STALE_S + INTERVAL_S for k in keys):
                break
            assert clock.now() - START < 60.0, "the shard's decisions kept changing"
        last = {k: victim.service.loop.board.latest(k) for k in keys}

        victim.alive = False  # a crash: nothing released
        for task in victim.service.tasks:
            task.cancel()
        await asyncio.gather(*victim.service.tasks, return_exceptions=True)
        victim.stop_grpc.set()
        await victim.grpc_task
        survivors = instances[1:]
        killed_at = clock.now()

        answered = 0
        while clock.now() - killed_at < LEASE_S + 2 * INTERVAL_S:
            await _step(timer, instances)
            holder = next((i for i in survivors if lost <= i.shards.owned), None)
            if holder is None:
                continue
            undecided = [k for k in keys if holder.service.loop.board.latest(k) is None]
            if not undecided:
                break
            for k in undecided:  # before: UNAVAILABLE, "the decision ... is 36 s old (limit 30 s)"
                value, at = await _get_metrics(holder, k.split("/")[1])
                published = last[k]
                assert published is not None
                assert value == published.decision.desired_replicas, (k, value)
                assert rows[k].timestamp < at <= killed_at, (k, at, rows[k].timestamp, killed_at)
                assert clock.now() - at <= STALE_S
                answered += 1
        assert answered >= len(keys), answered  # the window between the take and the tick was there
        # on the holder's /metrics (before: the log line and an object's count only)
        page = generate_latest(holder.service.registry).decode()
        (served,) = [line for line in page.splitlines() if line.startswith("kvpilot_keda_stored_answers_total ")]
        assert float(served.split()[1]) >= answered
    finally:
        for i in instances:
            if i.alive:
                i.service.stop.set()
        for i in instances:
            if i.alive:
                await timer.advance(INTERVAL_S)
                await i.service.wait()
                i.stop_grpc.set()
                await i.grpc_task
            await i.channel.close()
            with contextlib.suppress(Exception):
                i.service.engine.dispose()
