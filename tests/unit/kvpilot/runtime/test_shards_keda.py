"""KEDA calls for another instance's deployments (scaler.keda.forward) over real gRPC on loopback: two endpoints,
each with its own board, and a router that says who owns what (the ShardCoordinator's role)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import grpc
import pytest

from collector.clock import VirtualClock
from kvpilot.runtime.shards import Route
from kvpilot.runtime.wiring import build_shards
from kvpilot.settings import SettingsError, load_settings
from scaler.keda import externalscaler_pb2 as pb
from scaler.keda import externalscaler_pb2_grpc as pb_grpc
from scaler.keda.forward import DECISION_AT, Forwarding, _decision_at
from scaler.keda.reader import DecisionReader
from scaler.keda.server import Endpoint, build_endpoint
from scaler.keda.servicer import ServicerSettings
from scaler.publish import DecisionBoard
from tests.unit.scaler.keda.harness import decision

NOW = 1_700_000_000.0
STALE_S = 30.0


@dataclass
class Router:
    """Who owns llm/chat: ``owner`` is "a", "b" or None (its shard has no live holder)."""

    identity: str
    table: dict[str, str | None]
    addresses: dict[str, str] = field(default_factory=dict)

    def route(self, deployment: str) -> Route:
        owner = self.table.get("owner")
        if owner == self.identity:
            return Route(0, local=True, owner=owner)
        return Route(0, local=False, owner=owner, address=self.addresses.get(owner) if owner else None)


@dataclass
class Node:
    board: DecisionBoard
    endpoint: Endpoint
    stub: pb_grpc.ExternalScalerStub
    forwarding: Forwarding


@asynccontextmanager
async def two_instances(
    clock: VirtualClock, b_clock: VirtualClock | None = None
) -> AsyncIterator[tuple[Node, Node, dict[str, str | None]]]:
    """``b_clock``: b's own clock (else both read ``clock``)."""
    table: dict[str, str | None] = {"owner": "b"}
    addresses: dict[str, str] = {}
    nodes, stops, tasks, channels = [], [], [], []
    for name in ("a", "b"):
        own = (b_clock or clock) if name == "b" else clock
        board = DecisionBoard()
        forwarding = Forwarding(Router(name, table, addresses), own, STALE_S)
        endpoint = build_endpoint(
            "127.0.0.1:0", DecisionReader(board, own, STALE_S), ServicerSettings(), forwarding=forwarding
        )
        addresses[name] = f"127.0.0.1:{endpoint.port}"
        stop = asyncio.Event()
        tasks.append(asyncio.create_task(endpoint.serve(stop, grace_s=0.5)))
        channel = grpc.aio.insecure_channel(addresses[name])
        stub = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
        nodes.append(Node(board, endpoint, stub, forwarding))
        stops.append(stop)
        channels.append(channel)
    try:
        yield nodes[0], nodes[1], table
    finally:
        for stop in stops:
            stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for channel in channels:
            await channel.close()


def _metrics() -> pb.GetMetricsRequest:
    return pb.GetMetricsRequest(scaledObjectRef=pb.ScaledObjectRef(name="chat", namespace="llm"))


async def _get(node: Node) -> tuple[int, float]:
    call = node.stub.GetMetrics(_metrics(), timeout=5)
    answer = await call
    return answer.metricValues[0].metricValue, float(dict(await call.trailing_metadata())[DECISION_AT])


async def test_a_call_for_anothers_deployment_is_answered_by_the_owner_then_kept_while_fresh() -> None:
    clock = VirtualClock(NOW)
    async with two_instances(clock) as (a, b, table):
        b.board.publish(decision(desired=5, timestamp=NOW))
        assert await _get(a) == (5, NOW)  # a has no decision of its own: b's, forwarded
        active = await a.stub.IsActive(pb.ScaledObjectRef(name="chat", namespace="llm"), timeout=5)
        assert active.result is True
        assert a.forwarding.forwarded_total == 2

        # b dies: its port closes; a answers from what it relayed, with the decision's own time
        await b.endpoint.server.stop(0)
        clock.advance(20)
        assert await _get(a) == (5, NOW)
        assert a.forwarding.served_kept_total == 1
        # ... until that decision is older than the staleness limit: then an error that names owner and address
        clock.advance(11)
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await _get(a)
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "owned by kvpilot b at 127.0.0.1:" in (failed.value.details() or "")

        table["owner"] = None  # its shard has no live holder and nothing fresh is kept
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await _get(a)
        assert "no live holder" in (failed.value.details() or "")


async def test_the_new_owner_answers_from_the_kept_decision_until_its_first_tick() -> None:
    clock = VirtualClock(NOW)
    async with two_instances(clock) as (a, b, table):
        b.board.publish(decision(desired=4, timestamp=NOW))
        assert await _get(a) == (4, NOW)
        table["owner"] = "a"  # a took the shard over; its loop has not decided llm/chat yet
        clock.advance(10)
        assert await _get(a) == (4, NOW)
        assert a.forwarding.served_kept_total == 1
        a.board.publish(decision(desired=6, timestamp=clock.now()))
        assert await _get(a) == (6, clock.now())


async def test_a_forwarded_call_is_never_forwarded_again() -> None:
    # a and b disagree (each thinks the other owns it): the forwarded call is answered where it lands
    clock = VirtualClock(NOW)
    async with two_instances(clock) as (a, b, _table):
        b.forwarding.router = Router("b", {"owner": "a"}, {"a": f"127.0.0.1:{a.endpoint.port}"})
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await _get(a)
        assert failed.value.code() == grpc.StatusCode.NOT_FOUND  # b's own answer: it has no decision
        assert "owned by kvpilot b" in (failed.value.details() or "")
        assert b.forwarding.forwarded_total == 0


async def test_a_stream_is_relayed_and_ends_ok_when_the_shard_moves() -> None:
    clock = VirtualClock(NOW)
    async with two_instances(clock) as (a, b, table):
        b.board.publish(decision(desired=0, timestamp=NOW))
        stream = a.stub.StreamIsActive(pb.ScaledObjectRef(name="chat", namespace="llm"))
        assert (await asyncio.wait_for(stream.read(), 5)).result is False
        b.board.publish(decision(desired=2, timestamp=NOW + 1))  # the owner's push reaches KEDA through a
        assert (await asyncio.wait_for(stream.read(), 5)).result is True
        table["owner"] = "a"  # the shard moved: b's loop withdraws the decision, its stream ends, so does a's
        b.board.forget("llm/chat")
        assert await asyncio.wait_for(stream.read(), 5) is grpc.aio.EOF
        assert await stream.code() == grpc.StatusCode.OK  # KEDA reconnects at once and is answered by a


async def test_channels_to_addresses_no_longer_used_are_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    from scaler.keda import forward

    monkeypatch.setattr(forward, "MAX_CHANNELS", 2)
    fw = Forwarding(Router("a", {}), VirtualClock(NOW), STALE_S)
    first = fw.channel("10.0.0.1:9090")
    fw.channel("10.0.0.2:9090")
    assert fw.channel("10.0.0.1:9090") is first  # reused, and now the most recently used
    fw.channel("10.0.0.3:9090")  # past the cap: 10.0.0.2, the least recently used, is closed
    assert sorted(fw._channels) == ["10.0.0.1:9090", "10.0.0.3:9090"]
    await fw.close()
    assert fw._channels == {}
    assert not fw._closing


def test_sharding_with_keda_tls_is_refused_in_one_line(tmp_path) -> None:
    settings = load_settings(
        sharding={"shards": 3},
        keda={"tls_cert_file": str(tmp_path / "c.pem"), "tls_key_file": str(tmp_path / "k.pem")},
    )
    with pytest.raises(SettingsError, match=r"^sharding\.shards > 1 with keda\.tls_cert_file: .*[^\n]$"):
        build_shards(settings, VirtualClock(), api_client=object())


class SteppedClock(VirtualClock):
    """A wall clock that NTP may step backwards."""

    def step_back(self, seconds: float) -> None:
        self._now -= seconds


async def test_a_kept_answer_ages_on_this_instances_clock() -> None:
    # before: a kept answer's age was our clock minus the owner's stamp, so an owner whose clock ran an hour ahead
    # had its answer served for an hour after its death
    clock, b_clock = VirtualClock(NOW), VirtualClock(NOW + 3600)
    async with two_instances(clock, b_clock) as (a, b, _table):
        b.board.publish(decision(desired=5, timestamp=b_clock.now()))
        assert await _get(a) == (5, NOW + 3600)  # relayed from b, with b's stamp
        await b.endpoint.server.stop(0)
        clock.advance(STALE_S - 1)
        assert (await _get(a))[0] == 5  # kept: 29 s old on a's clock
        clock.advance(2)
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await _get(a)
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("stamp", ["nan", "inf", "-inf", "1e999"])
def test_a_stamp_that_is_not_a_finite_time_is_not_kept(stamp: str) -> None:
    # before: 'nan' compared false and 'inf' was never old: the answer was served forever once its owner was gone
    fw = Forwarding(Router("a", {}), VirtualClock(NOW), STALE_S)
    request = _metrics()
    fw.keep("GetMetrics", request, "answer", _decision_at(((DECISION_AT, stamp),)))
    assert fw.kept("GetMetrics", request) is None
    fw.keep("GetMetrics", request, "answer", _decision_at(((DECISION_AT, repr(NOW)),)))
    assert fw.kept("GetMetrics", request) == ("answer", NOW)


async def test_a_kept_answer_is_not_served_after_this_instances_clock_steps_back() -> None:
    # before: its age went below zero, so it was served as fresh for as long as the step (an hour)
    clock = SteppedClock(NOW)
    async with two_instances(clock) as (a, b, _table):
        b.board.publish(decision(desired=5, timestamp=NOW))
        assert await _get(a) == (5, NOW)
        await b.endpoint.server.stop(0)
        clock.advance(10)
        assert await _get(a) == (5, NOW)  # kept, 10 s old
        clock.step_back(3600)
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await _get(a)
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
