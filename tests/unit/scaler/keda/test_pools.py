"""KEDA per pool: one ScaledObject per pool of a disaggregated deployment, its metadata naming the pool."""

from __future__ import annotations

import grpc
import pytest

from scaler.keda.target import MetadataError, parse_target
from tests.unit.scaler.keda.harness import decision, keda_poll, ref, running_scaler


async def test_each_pool_gets_its_own_decision(serve_from: str) -> None:
    async with running_scaler(serve_from=serve_from) as scaler:
        scaler.board.publish(decision("llm/chat@prefill", desired=6))
        scaler.board.publish(decision("llm/chat@decode", desired=2))
        scaler.board.publish(decision("llm/chat", desired=9))  # a co-located deployment of the same name
        prefill, *_ = await keda_poll(scaler.stub, ref("chat-prefill", "llm", deployment="chat", pool="prefill"))
        decode, *_ = await keda_poll(scaler.stub, ref("chat-decode", "llm", deployment="chat", pool="decode"))
        both, *_ = await keda_poll(scaler.stub, ref("chat", "llm", pool="both"))
        with pytest.raises(grpc.aio.AioRpcError, match="must be one of prefill, decode, both"):
            await keda_poll(scaler.stub, ref("chat", "llm", pool="encode"))
    assert (prefill, decode, both) == (6, 2, 9)


def test_pool_metadata_is_parsed_once() -> None:
    # case and spaces as operators type them
    assert parse_target("so", "llm", {"deployment": "chat", "pool": " Decode"}).deployment == "llm/chat@decode"
    with pytest.raises(MetadataError, match="`pool` 'prefil'"):
        parse_target("so", "llm", {"pool": "prefil"})
