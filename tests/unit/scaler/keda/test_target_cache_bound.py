"""A ScaledObjectRef far larger than KEDA sends is answered as any other, and not kept (session 26, E).

The trigger-metadata parse is cached per distinct ref (16,384 of them), and the cache kept each whole. A call may
carry 1 MiB, and nothing bounded a ref's name beside a `deployment` key, or a `scalerAddress` value. So 300 distinct
calls with 0.9 MB names grew `kvpilot run` by 337 MB, never released, and 16,384 of them would hold 15 GB. Now a ref
larger than ``CACHED_REF_MAX_CHARS`` is parsed at each call and not cached. Real gRPC on loopback, served from the
test's process, whose memory tracemalloc reads."""

from __future__ import annotations

import gc
import tracemalloc

from scaler.keda import externalscaler_pb2 as pb
from tests.unit.scaler.keda.harness import decision, ref, running_scaler

CALLS = 40
SIZE = 250_000  # characters in each call's name: 10 MB over the calls


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
