"""Three kvpilot services sharding one fleet: each built by `build_service` (real loop, detectors, planner, store,
board), one `ShardCoordinator` each against the in-process fake Kubernetes API (Leases through the official
client), one KEDA gRPC endpoint each on loopback; a KEDA client polls every deployment through the instances.
One instance is killed mid-run (no release: a crash). Virtual time throughout: the test moves a shared
``VirtualTimer`` in quarter-second steps and waits, after each, until every loop and Lease task sleeps again."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc
from sqlalchemy import select

from collector.clock import VirtualClock
from collector.samples import ReplicaSample, TargetInfo
from collector.scrape import CollectResult, ScrapeResult, VirtualTimer
from kvpilot.runtime.lease import Leases
from kvpilot.runtime.service import Service
from kvpilot.runtime.shards import ShardCoordinator, shard_of
from kvpilot.runtime.sources import Sources
from kvpilot.runtime.targets import StaticTargets
from kvpilot.runtime.wiring import build_service
from scaler.keda import externalscaler_pb2 as pb
from scaler.keda import externalscaler_pb2_grpc as pb_grpc
from scaler.keda.forward import DECISION_AT, Forwarding
from scaler.keda.reader import DecisionReader
from scaler.keda.server import Endpoint, build_endpoint
from scaler.keda.servicer import ServicerSettings
from store.db import make_engine, session_factory, transaction
from store.models import InstanceNodesRow
from tests.fakekube import FakeKube
from tests.helpers.poll import until
from tests.unit.kvpilot.fleet_double import START, settings_for

SHARDS = 3
LEASE_S = 15.0
RENEW_S = 5.0
INTERVAL_S = 5.0
STALE_S = 6 * INTERVAL_S  # keda.stale_after_ticks x collector.interval_s, as `kvpilot run` serves it
STEP_S = 0.25
DEPLOYMENTS = [f"m{i}" for i in range(9)]
TARGETS = [
    TargetInfo(url=f"http://{d}-{r}:8000/metrics", namespace="llm", deployment=d, pod=f"{d}-{r}", node=f"n{i % 4}")
    for i, d in enumerate(DEPLOYMENTS)
    for r in range(2)
]


@dataclass
class Fleet:
    """The collect stage: answers only the targets it is asked for, and remembers which deployments were asked."""

    clock: VirtualClock
    asked: list[set[str]] = field(default_factory=list)

    async def collect_once(self, targets: Sequence[TargetInfo]) -> CollectResult:
        t = self.clock.now()
        self.asked.append({x.deployment_key for x in targets})
        results = tuple(
            ScrapeResult(
                x,
                True,
                t,
                0.01,
                engine="vllm",
                replicas=(
                    ReplicaSample(
                        namespace=x.namespace,
                        deployment=x.deployment,
                        replica=x.pod,
                        node=x.node,
                        engine="vllm",
                        model="m",
                        timestamp=t,
                        requests_waiting=1,
                        requests_running=3,
                        kv_usage=0.4,
                        requests_finished=3.0 * (t - START),
                        prompt_tokens=1500.0 * (t - START),
                        generation_tokens=300.0 * (t - START),
                    ),
                ),
            )
            for x in targets
        )
        return CollectResult(timestamp=t, results=results)


@dataclass
class Instance:
    name: str
    service: Service
    shards: ShardCoordinator
    endpoint: Endpoint
    fleet: Fleet
    stop_grpc: asyncio.Event
    grpc_task: asyncio.Task[None]
    stub: pb_grpc.ExternalScalerStub
    channel: grpc.aio.Channel
    alive: bool = True


async def _instance(name: str, kube: FakeKube, clock: VirtualClock, timer: VirtualTimer, url: str) -> Instance:
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
        settings_for(url, ha={"renew_every_s": RENEW_S, "lease_duration_s": LEASE_S}),
        Sources(static, static),
        clock=clock,
        collector=fleet,
        sleep=timer.sleep,
        leadership=shards,
    )
    forwarding = Forwarding(shards, clock, STALE_S)
    reader = DecisionReader(service.loop.board, clock, STALE_S)  # type: ignore[arg-type]
    endpoint = build_endpoint("127.0.0.1:0", reader, ServicerSettings(), forwarding=forwarding)
    shards.address = f"127.0.0.1:{endpoint.port}"
    stop_grpc = asyncio.Event()
    grpc_task = asyncio.create_task(endpoint.serve(stop_grpc, grace_s=0.5))
    await service.start(restored)
    channel = grpc.aio.insecure_channel(shards.address)
    stub = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
    return Instance(name, service, shards, endpoint, fleet, stop_grpc, grpc_task, stub, channel)


async def _settle(timer: VirtualTimer, instances: list[Instance]) -> None:
    """Until every live instance's control loop and Lease task sleep in virtual time again."""
    live = sum(i.alive for i in instances)
    await until(lambda: timer.sleepers >= 2 * live, what="every loop and Lease task asleep")


async def _step(timer: VirtualTimer, instances: list[Instance]) -> None:
    await timer.advance(STEP_S)
    await _settle(timer, instances)


async def _poll(instances: list[Instance], deployment: str, via: Instance) -> tuple[int, float]:
    """KEDA's GetMetrics through ``via``: the replica count and the time of the decision behind it."""
    request = pb.GetMetricsRequest(
        scaledObjectRef=pb.ScaledObjectRef(name=deployment, namespace="llm"), metricName="kvpilot-replicas"
    )
    call = via.stub.GetMetrics(request, timeout=5)
    response = await call
    trailing = dict(await call.trailing_metadata() or ())
    return response.metricValues[0].metricValue, float(trailing[DECISION_AT])


def _kept_served(i: Instance) -> int:
    forwarding = i.endpoint.servicer.forwarding
    return forwarding.served_kept_total if forwarding is not None else 0


def _instance_nodes(url: str) -> dict[str, list[str]]:
    engine = make_engine(url)
    try:
        with transaction(session_factory(engine), reads_only=True) as s:
            return {r.instance: r.nodes for r in s.scalars(select(InstanceNodesRow))}
    finally:
        engine.dispose()


def _owners(instances: list[Instance]) -> dict[str, list[str]]:
    return {d: [i.name for i in instances if i.alive and i.shards.owns(f"llm/{d}")] for d in DEPLOYMENTS}


async def test_three_instances_partition_the_fleet_and_survive_one_killed(kube: FakeKube, tmp_path) -> None:
    clock = VirtualClock(START)
    timer = VirtualTimer(clock)
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    instances = [await _instance(n, kube, clock, timer, url) for n in ("a", "b", "c")]
    try:
        await _settle(timer, instances)
        for _ in range(int(3 * INTERVAL_S / STEP_S)):  # members meet, shards settle, a few ticks each
            await _step(timer, instances)

        # every deployment owned by exactly one instance, and every instance owns some
        owners = _owners(instances)
        assert all(len(o) == 1 for o in owners.values()), owners
        assert sorted(len(i.shards.owned) for i in instances) == [1, 1, 1]
        # each signs the view of a finding it stores with its name (store.repo.findings.Reporter)
        assert [i.service.loop.reporter for i in instances] == ["a", "b", "c"]

        # each stores the nodes its snapshot holds, for the drain breaker's fleet-wide share (actuation.FleetShare)
        def stored() -> tuple[set[str], set[str]]:
            rows = _instance_nodes(url)
            return set(rows), set().union(*rows.values())

        await until(lambda: stored() == ({"a", "b", "c"}, {"n0", "n1", "n2", "n3"}), what="every node set stored")
        for i in instances:  # each scraped only its own deployments, and decided only those
            mine = {f"llm/{d}" for d, o in owners.items() if o == [i.name]}
            assert i.fleet.asked[-1] == mine
            assert set(i.service.loop.board.deployments()) == mine
        assert len({shard_of(f"llm/{d}", SHARDS) for d in DEPLOYMENTS}) == SHARDS  # the fleet spans every shard

        # KEDA through any instance gets the owner's answer (forwarded when another owns it)
        for d in DEPLOYMENTS:
            for via in instances:
                value, at = await _poll(instances, d, via)
                assert value >= 1
                assert clock.now() - at <= INTERVAL_S + STEP_S

        victim = next(i for i in instances if i.name == owners[DEPLOYMENTS[0]][0])
        lost = set(victim.shards.owned)
        lost_deployments = [d for d in DEPLOYMENTS if shard_of(f"llm/{d}", SHARDS) in lost]
        survivors = [i for i in instances if i is not victim]
        # a crash: the tasks die where they are, nothing is released, the gRPC port closes
        victim.alive = False
        for task in victim.service.tasks:
            task.cancel()
        await asyncio.gather(*victim.service.tasks, return_exceptions=True)
        victim.stop_grpc.set()
        await victim.grpc_task
        killed_at = clock.now()

        taken_at: float | None = None
        newest: dict[str, float] = {}
        polls = 0
        while clock.now() - killed_at < LEASE_S + 3 * INTERVAL_S:
            await _step(timer, instances)
            if taken_at is None and lost <= set().union(*(i.shards.owned for i in survivors)):
                taken_at = clock.now()
            if round(clock.now() / STEP_S) % 4:  # KEDA polls every second of virtual time
                continue
            for n, d in enumerate(DEPLOYMENTS):
                via = survivors[(n + polls) % 2]
                value, at = await _poll(instances, d, via)  # raises on any error: KEDA must get an answer
                age = clock.now() - at
                assert value >= 1
                assert age <= STALE_S, (d, via.name, age)
                newest[d] = max(newest.get(d, at), at)
            polls += 1

        assert taken_at is not None, "the dead instance's shards were never taken over"
        assert taken_at - killed_at <= LEASE_S + STEP_S, taken_at - killed_at  # within one lease period
        # between the crash and the new owner's first tick, the survivors answered from the last relayed decision
        assert sum(_kept_served(i) for i in survivors) > 0
        owners = _owners(survivors)
        assert all(len(o) == 1 for o in owners.values()), owners
        for d in lost_deployments:  # decisions flow again from the new owner, made after the takeover
            assert newest[d] > taken_at, d
            owner = next(i for i in survivors if i.name == owners[d][0])
            assert f"llm/{d}" in owner.fleet.asked[-1]
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
