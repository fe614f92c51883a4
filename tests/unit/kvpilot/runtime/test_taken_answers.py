"""``StoredAnswers`` behind a real KEDA gRPC endpoint on loopback: what it answers for a shard just taken, and what it
never answers (issue 17). The shards held are a plain set the test changes, as a Lease round would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import grpc
import pytest

from collector.clock import VirtualClock
from kvpilot.runtime.lease import Leases
from kvpilot.runtime.shards import ShardCoordinator, shard_of
from kvpilot.runtime.taken_answers import StoredAnswers
from scaler.decision import Decision
from scaler.keda import externalscaler_pb2 as pb
from scaler.keda import externalscaler_pb2_grpc as pb_grpc
from scaler.keda.reader import DecisionReader
from scaler.keda.server import build_endpoint
from scaler.keda.servicer import ServicerSettings
from scaler.publish import DecisionBoard
from tests.fakekube import FakeKube
from tests.unit.scaler.keda.harness import NOW, decision

SHARDS = 4
STALE_S = 30.0
CHAT = "llm/chat"
SHARD = shard_of(CHAT, SHARDS)


@dataclass
class Held:
    owned: frozenset[int] = frozenset()
    in_force: dict[int, float] = field(default_factory=dict)  # what each shard's Lease said at the take

    def shard(self, deployment: str) -> int:
        return shard_of(deployment, SHARDS)

    def in_force_at(self, shard: int) -> float | None:
        return self.in_force.get(shard)


@dataclass
class Store:
    rows: dict[str, Decision] = field(default_factory=dict)
    fails: bool = False

    def latest(self) -> Mapping[str, Decision]:
        if self.fails:
            raise RuntimeError("database is locked")
        return dict(self.rows)


@dataclass
class Keda:
    board: DecisionBoard
    held: Held
    store: Store
    answers: StoredAnswers
    clock: VirtualClock
    stub: pb_grpc.ExternalScalerStub

    def take(self) -> None:
        """A Lease round taking chat's shard: the answers read before the shard counts as held."""
        self.answers.read_taken(frozenset({SHARD}))
        self.held.owned = self.held.owned | {SHARD}

    async def metrics(self) -> int:
        request = pb.GetMetricsRequest(scaledObjectRef=pb.ScaledObjectRef(name="chat", namespace="llm"))
        response = await self.stub.GetMetrics(request, timeout=5)
        return int(response.metricValues[0].metricValue)

    async def refused(self) -> grpc.StatusCode:
        with pytest.raises(grpc.aio.AioRpcError) as refusal:
            await self.metrics()
        return refusal.value.code()


@asynccontextmanager
async def keda() -> AsyncIterator[Keda]:
    board, held, store, clock = DecisionBoard(), Held(), Store(), VirtualClock(NOW)
    answers = StoredAnswers(board, held, store.latest)
    endpoint = build_endpoint("127.0.0.1:0", DecisionReader(answers, clock, STALE_S), ServicerSettings())
    stop = asyncio.Event()
    serving = asyncio.create_task(endpoint.serve(stop, grace_s=0.5))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{endpoint.port}")
    try:
        yield Keda(board, held, store, answers, clock, pb_grpc.ExternalScalerStub(channel))  # type: ignore[no-untyped-call]
    finally:
        await channel.close()
        stop.set()
        await serving


async def test_a_shard_taken_answers_its_stored_decision_until_the_board_has_one() -> None:
    async with keda() as k:
        k.store.rows = {CHAT: decision(desired=5, timestamp=NOW - 10)}
        assert await k.refused() == grpc.StatusCode.NOT_FOUND  # not held: nothing read, nothing answered
        k.take()
        assert await k.metrics() == 5
        assert k.answers.served_total == 1
        k.board.publish(decision(desired=7, timestamp=NOW))  # the tick decided it: the board's from now on
        assert await k.metrics() == 7
        k.board.forget(CHAT)
        k.answers.decided(frozenset({SHARD}))  # a whole tick since the take: a deployment it forgot is gone
        assert await k.refused() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("shard lost", grpc.StatusCode.NOT_FOUND),  # never an answer for a shard this instance does not hold
        ("too old", grpc.StatusCode.UNAVAILABLE),  # older than the board's limit: KEDA's fallback, not a number
        ("store away", grpc.StatusCode.NOT_FOUND),  # the store failed: as before, until the tick decides it
        ("another shard's row", grpc.StatusCode.NOT_FOUND),  # rows of shards not taken are not answered
    ],
)
async def test_what_a_shard_taken_does_not_answer(case: str, expected: grpc.StatusCode) -> None:
    async with keda() as k:
        k.store.rows = {CHAT: decision(desired=5, timestamp=NOW - (STALE_S + 1 if case == "too old" else 1))}
        k.store.fails = case == "store away"
        if case == "another shard's row":
            k.answers.read_taken(frozenset({(SHARD + 1) % SHARDS}))
            k.held.owned = frozenset(range(SHARDS))
        else:
            k.take()
        if case == "shard lost":
            k.held.owned = frozenset()
        assert await k.refused() == expected


@pytest.mark.parametrize(
    ("row_age_s", "in_force_age_s", "answered"),
    [
        (40.0, 10.0, True),  # steady: stored 40 s ago, its holder's committed ticks said it in force 10 s ago
        (40.0, None, False),  # the Lease says nothing (an older kvpilot held it): the row's own age, past the limit
        (40.0, 35.0, False),  # its holder stopped deciding (loop or store) 35 s ago, whatever its Lease rounds did
        (70.0, 5.0, False),  # stored a heartbeat (60 s) or more before that time: not a deployment it was deciding
        (10.0, 20.0, True),  # a row newer than the Lease's time (a later holder's): its own age
    ],
)
async def test_a_stored_decision_s_age_counts_from_when_its_holder_last_had_it_in_force(
    row_age_s: float, in_force_age_s: float | None, answered: bool
) -> None:
    async with keda() as k:
        k.store.rows = {CHAT: decision(desired=5, timestamp=NOW - row_age_s)}
        if in_force_age_s is not None:
            k.held.in_force[SHARD] = NOW - in_force_age_s
        k.take()
        if answered:
            assert await k.metrics() == 5
            _, age = DecisionReader(k.answers, k.clock, STALE_S).read(CHAT)
            assert age == min(row_age_s, in_force_age_s or row_age_s)
        else:
            assert await k.refused() == grpc.StatusCode.UNAVAILABLE


async def test_a_stream_answered_from_the_store_moves_to_the_board_s_first_decision() -> None:
    """``StreamIsActive`` waits on the board for the first real decision (a stored answer is version 0, "none" to
    the board): it is pushed at once, and the stored answer is not read again meanwhile."""
    async with keda() as k:
        k.store.rows = {CHAT: decision(desired=0, timestamp=NOW - 1)}
        k.take()
        stream = k.stub.StreamIsActive(pb.ScaledObjectRef(name="chat", namespace="llm"))
        first = await asyncio.wait_for(stream.read(), 5)
        assert first.result is False
        k.board.publish(decision(desired=2, timestamp=NOW))
        second = await asyncio.wait_for(stream.read(), 5)
        assert second.result is True
        assert k.answers.served_total == 1
        stream.cancel()


def test_shards_held_again_after_their_renew_deadline_are_taken_anew(kube: FakeKube) -> None:
    """A round that hung past the renew deadline: its shards stopped counting as held (the loop let them go, the board
    forgot them), so the round that renews them takes them anew, stored answers read, as any other takeover."""
    clock = VirtualClock(NOW)
    a = ShardCoordinator(Leases(kube.api_client()), lease_name="taken", namespace="kv", identity="a", address="",
                         shards=3, clock=clock, lease_duration_s=15)  # fmt: skip
    gains: list[frozenset[int]] = []
    a.on_gain = gains.append
    a.round()  # joining: says who it is
    a.round()
    assert gains == [frozenset({0, 1, 2})]
    clock.advance(12.6)  # no round since: past the renew deadline (12.5 s of 15)
    assert a.owned == frozenset()
    a.round()  # renewed before anyone else took them
    assert a.owned == frozenset({0, 1, 2})
    assert gains == [frozenset({0, 1, 2})] * 2  # before: taken silently, KEDA's calls NOT_FOUND until the tick
