"""A ScaledObjectRef far larger than KEDA sends is answered as any other, and not kept (session 26, E); one past
8 KiB is refused before it is read whole, saying its size and the bound (64 KiB: session 28, B; 8 KiB: session 31, C).

The trigger-metadata parse is cached per distinct ref (16,384 of them), and the cache kept each whole. A call could
carry 1 MiB then (8 KiB since session 31: scaler.keda.server.MAX_REQUEST_BYTES), and nothing bounded a ref's name
beside a `deployment` key, or a `scalerAddress` value. So 300 distinct calls with 0.9 MB names grew `kvpilot run` by
337 MB, never released, and 16,384 of them would hold 15 GB. Now a ref larger than ``CACHED_REF_MAX_CHARS`` is parsed
at each call and not cached. Real gRPC on loopback, served from the test's process, whose memory tracemalloc
reads."""

from __future__ import annotations

import gc
import tracemalloc

import grpc
import pytest

from scaler.keda import externalscaler_pb2 as pb
from tests.unit.scaler.keda.harness import decision, ref, running_scaler

CALLS = 1_000
SIZE = 7_000  # characters in each call's name, under the server's 8 KiB (past the cache's 4,096): 7 MB over the calls


async def test_large_refs_are_answered_and_not_kept() -> None:
    async with running_scaler() as scaler:
        scaler.board.publish(decision(desired=3))
        await scaler.stub.IsActive(ref(deployment="llm/chat"))  # the server's first call made before measuring
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i in range(CALLS):
                big = ref(name=f"{i}-" + "x" * SIZE, deployment="llm/chat", scalerAddress="k" * 100)
                answer = await scaler.stub.IsActive(big)
                assert answer == pb.IsActiveResponse(result=True)  # answered as any ref
                spec = await scaler.stub.GetMetricSpec(big)
                assert spec.metricSpecs[0].targetSizeFloat == 1.0
            gc.collect()
            kept = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    # before: every ref kept whole by the parse cache, 40 x 250 kB (10.1 MB measured)
    assert kept < 2_000_000, f"{kept:,} bytes kept after {CALLS} refs of {SIZE:,} characters"


async def test_a_ref_of_kedas_size_is_still_cached() -> None:
    from scaler.keda.target import CACHED_REF_MAX_CHARS, _parse_cached

    async with running_scaler() as scaler:
        scaler.board.publish(decision(desired=3))
        usual = ref(deployment="llm/chat", scalerAddress="kvpilot.kvpilot.svc.cluster.local:9090")
        assert len(usual.name) + len(usual.namespace) < CACHED_REF_MAX_CHARS
        await scaler.stub.IsActive(usual)
        hits = _parse_cached.cache_info().hits
        await scaler.stub.IsActive(usual)
        assert _parse_cached.cache_info().hits == hits + 1


@pytest.mark.parametrize("size", [9_000, 60_000, 100_000])
async def test_a_ref_past_8_kib_is_refused_before_it_is_read_whole(size: int) -> None:
    # before session 28: up to 1 MiB was taken, and one client's 3,000 concurrent calls of 0.9 MB (one channel) took
    # the server to 1.96 GB at its peak; before session 31 up to 64 KiB, and 5,000 calls of 60 KB at once 297 MB
    async with running_scaler() as scaler:
        scaler.board.publish(decision(desired=3))
        near = ref(name="n-" + "x" * SIZE, deployment="llm/chat")  # under the bound: answered
        assert await scaler.stub.IsActive(near) == pb.IsActiveResponse(result=True)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await scaler.stub.IsActive(ref(name="n-" + "x" * size, deployment="llm/chat"))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert refused.value.details() == f"SERVER: Received message larger than max ({refused_size(size)} vs. 8192)"
        assert await scaler.stub.IsActive(near) == pb.IsActiveResponse(result=True)  # the channel still serves


def refused_size(size: int) -> int:
    """The serialized size of the refused ref, as grpc says it."""
    return ref(name="n-" + "x" * size, deployment="llm/chat").ByteSize()
