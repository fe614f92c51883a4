"""The KEDA external scaler over real gRPC on loopback, called the way KEDA calls it."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scaler.keda import externalscaler_pb2 as pb
from scaler.keda.servicer import ServicerSettings
from tests.unit.scaler.keda.harness import NOW, decision, keda_poll, ref, running_scaler

POLL_CASES = [
    # default metadata: the HPA lands on desired + warm pool, metric value = replicas with targetSize 1
    ({}, 3, 2, 5, True),
    # includeWarmPool "false": only the desired count is asked for
    ({"includeWarmPool": "false"}, 3, 2, 3, True),
    # an integer targetSize scales the value, ceil(value / target) still gives the replica count
    ({"targetSize": "10"}, 4, 1, 5, True),
    # a fractional targetSize goes through the float fields and still lands exactly
    ({"targetSize": "0.3"}, 7, 0, 7, True),
    # a large fleet: no float rounding drift at 1000 replicas with a fractional target
    ({"targetSize": "0.1"}, 1000, 7, 1007, True),
    # nothing needed: value 0 and inactive, so KEDA may scale to zero
    ({}, 0, 0, 0, False),
    # warm pool alone activates the deployment (pre-warming from zero before the demand arrives)
    ({}, 0, 1, 1, True),
    # activation threshold is separate from the target: 5 replicas do not activate with threshold 5
    ({"activationReplicas": "5"}, 5, 0, 5, False),
    # ... and 6 do
    ({"activationReplicas": "5"}, 6, 0, 6, True),
    # a negative warm pool from a confused policy never lowers the desired count
    ({}, 4, -3, 4, True),
]


@pytest.mark.parametrize(("metadata", "desired", "warm", "expected_replicas", "expected_active"), POLL_CASES)
async def test_keda_poll_cycle_lands_on_the_decided_replicas(
    metadata: dict[str, str], desired: int, warm: int, expected_replicas: int, expected_active: bool, serve_from: str
) -> None:
    async with running_scaler(serve_from=serve_from) as scaler:
        scaler.board.publish(decision(desired=desired, warm=warm))
        replicas, active, value, target = await keda_poll(scaler.stub, ref(**metadata))
    assert replicas == expected_replicas
    assert active is expected_active
    assert value == pytest.approx(expected_replicas * target)


async def test_both_int_and_float_fields_are_set(serve_from: str) -> None:
    async with running_scaler(serve_from=serve_from) as scaler:
        scaler.board.publish(decision(desired=6, warm=1))
        so = ref(targetSize="2")
        spec = (await scaler.stub.GetMetricSpec(so)).metricSpecs[0]
        value = (await scaler.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so, metricName=""))).metricValues[0]
    # older KEDA reads only the int64 fields: they must tell the same story as the float ones
    assert (spec.targetSize, spec.targetSizeFloat) == (2, 2.0)
    assert (value.metricValue, value.metricValueFloat) == (14, 14.0)
    assert value.metricName == spec.metricName == "kvpilot-replicas"


DEPLOYMENT_CASES = [
    # no `deployment` metadata: the ScaledObject's own namespace/name
    ("chat", "llm", {}, "llm/chat"),
    # a bare name: the ScaledObject's namespace
    ("so", "llm", {"deployment": "chat"}, "llm/chat"),
    # namespace/name: another namespace entirely
    ("so", "elsewhere", {"deployment": "llm/chat"}, "llm/chat"),
]


@pytest.mark.parametrize(("name", "namespace", "metadata", "expected"), DEPLOYMENT_CASES)
async def test_metadata_selects_the_deployment(
    name: str, namespace: str, metadata: dict[str, str], expected: str, serve_from: str
) -> None:
    async with running_scaler(serve_from=serve_from) as scaler:
        scaler.board.publish(decision("llm/chat", desired=2))
        scaler.board.publish(decision("other/chat", desired=9))
        scaler.board.publish(decision("elsewhere/so", desired=7))
        replicas, *_ = await keda_poll(scaler.stub, ref(name, namespace, **metadata))
    assert replicas == scaler.board.latest(expected).decision.desired_replicas  # type: ignore[union-attr]


ERROR_CASES = [
    # a deployment kvpilot has no decision for: NOT_FOUND naming it and listing what exists
    (ref("missing"), grpc.StatusCode.NOT_FOUND, "no decision for deployment llm/missing"),
    # targetSize that is not a number
    (ref(targetSize="ten"), grpc.StatusCode.INVALID_ARGUMENT, "`targetSize` 'ten' is not a number"),
    # targetSize 0 would divide by zero in the HPA
    (ref(targetSize="0"), grpc.StatusCode.INVALID_ARGUMENT, "`targetSize` '0' must be > 0"),
    # non-finite numbers are refused
    (ref(targetSize="nan"), grpc.StatusCode.INVALID_ARGUMENT, "finite"),
    # negative activation threshold
    (ref(activationReplicas="-1"), grpc.StatusCode.INVALID_ARGUMENT, "`activationReplicas` '-1' must be >= 0"),
    # booleans are "true"/"false" only
    (ref(includeWarmPool="yes"), grpc.StatusCode.INVALID_ARGUMENT, "`includeWarmPool` 'yes'"),
    # a typo in a key is named, not silently ignored
    (ref(activationReplica="1"), grpc.StatusCode.INVALID_ARGUMENT, "unknown metadata key(s) 'activationReplica'"),
    # a deployment with two slashes
    (ref(deployment="a/b/c"), grpc.StatusCode.INVALID_ARGUMENT, "namespace 'a/b'"),
    # upper case is not a Kubernetes name
    (ref(deployment="llm/Chat"), grpc.StatusCode.INVALID_ARGUMENT, "deployment name 'Chat'"),
    # an empty ref: nothing says which deployment
    (ref("", ""), grpc.StatusCode.INVALID_ARGUMENT, "cannot tell which deployment"),
]


@pytest.mark.parametrize("method", ["GetMetrics", "IsActive", "StreamIsActive"])
@pytest.mark.parametrize(("so", "code", "message"), ERROR_CASES)
async def test_errors_map_to_status_codes(
    so: pb.ScaledObjectRef, code: grpc.StatusCode, message: str, method: str, serve_from: str
):
    async with running_scaler(serve_from=serve_from) as scaler:
        scaler.board.publish(decision("llm/chat"))
        calls = {
            "GetMetrics": lambda: scaler.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so)),
            "IsActive": lambda: scaler.stub.IsActive(so),
            "StreamIsActive": lambda: scaler.stub.StreamIsActive(so).read(),
        }
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await calls[method]()
    assert raised.value.code() == code
    assert message in (raised.value.details() or "")


async def test_unknown_deployment_lists_the_known_ones(serve_from: str) -> None:
    async with running_scaler(serve_from=serve_from) as scaler:
        scaler.board.publish(decision("llm/chat"))
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await scaler.stub.IsActive(ref("code"))
    assert "deployments with decisions: llm/chat" in (raised.value.details() or "")


async def test_wrong_metric_name_is_not_found(serve_from: str) -> None:
    async with running_scaler(serve_from=serve_from) as scaler:
        scaler.board.publish(decision())
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await scaler.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="queue-length"))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    assert "'queue-length'" in (raised.value.details() or "")


async def test_stale_decision_is_unavailable_so_keda_fallback_applies() -> None:
    async with running_scaler(stale_after_s=60) as scaler:
        scaler.board.publish(decision(timestamp=NOW))
        assert (await scaler.stub.IsActive(ref())).result  # fresh: served
        scaler.clock.advance(61)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await scaler.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref()))
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "61 s old" in (raised.value.details() or "")


async def test_stream_metric_spec_is_unimplemented(serve_from: str) -> None:
    async with running_scaler(serve_from=serve_from) as scaler:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await scaler.stub.StreamMetricSpec(ref()).read()
    assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_stream_is_active_pushes_on_activity_change_only(serve_from: str) -> None:
    async with running_scaler(ServicerSettings(heartbeat_s=3600), serve_from=serve_from) as scaler:
        scaler.board.publish(decision(desired=2))
        stream = scaler.stub.StreamIsActive(ref())
        first = await stream.read()
        scaler.board.publish(decision(desired=3))  # still active: no message
        scaler.board.publish(decision(desired=0))  # inactive: pushed at once
        second = await stream.read()
        scaler.board.publish(decision(desired=1))  # active again
        third = await stream.read()
        stream.cancel()
    # had the 2 -> 3 change been pushed, the second message would read True
    assert [first.result, second.result, third.result] == [True, False, True]


async def test_stream_is_active_heartbeats_the_current_state(serve_from: str) -> None:
    async with running_scaler(ServicerSettings(heartbeat_s=0.01), serve_from=serve_from) as scaler:
        scaler.board.publish(decision(desired=0))
        stream = scaler.stub.StreamIsActive(ref())
        results = [(await stream.read()).result for _ in range(3)]  # no publish in between: heartbeats
        stream.cancel()
    assert results == [False, False, False]


async def test_stream_is_active_wakes_on_a_publish_from_another_thread(serve_from: str) -> None:
    async with running_scaler(ServicerSettings(heartbeat_s=3600), serve_from=serve_from) as scaler:
        scaler.board.publish(decision(desired=0))
        stream = scaler.stub.StreamIsActive(ref())
        assert not (await stream.read()).result
        publisher = threading.Thread(target=scaler.board.publish, args=(decision(desired=4),))
        publisher.start()
        pushed = await asyncio.wait_for(stream.read(), timeout=30)
        publisher.join()
        stream.cancel()
    assert pushed.result


async def test_stream_ends_not_found_when_the_deployment_is_forgotten(serve_from: str) -> None:
    async with running_scaler(ServicerSettings(heartbeat_s=3600), serve_from=serve_from) as scaler:
        scaler.board.publish(decision(desired=1))
        stream = scaler.stub.StreamIsActive(ref())
        await stream.read()
        scaler.board.forget("llm/chat")
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stream.read()
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND


async def test_garbage_bytes_are_refused_and_the_server_keeps_serving(serve_from: str) -> None:
    async with running_scaler(serve_from=serve_from) as scaler:
        scaler.board.publish(decision(desired=2))
        raw = scaler.channel.unary_unary("/externalscaler.ExternalScaler/GetMetrics")
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await raw(b"\xff\xff\xff\xff not a protobuf")
        replicas, *_ = await keda_poll(scaler.stub, ref())
    assert raised.value.code() != grpc.StatusCode.OK
    assert replicas == 2


async def test_a_refusal_echoing_huge_or_hidden_text_stays_a_short_printable_status(serve_from: str) -> None:
    # The refusals echo what they refuse; 100 KB of it is over gRPC's 16 KiB metadata limit, and KEDA got
    # RESOURCE_EXHAUSTED "Stream removed" instead of the refusal. A bidi override or NUL went into KEDA's log raw.
    # 7,000 characters: under the server's 8 KiB for a call (scaler.keda.server.MAX_REQUEST_BYTES; 60,000 under the
    # 64 KiB before session 31, over that limit), far over what a status echoes
    huge = ref(deployment="llm/" + "x" * 7_000)
    wrong_metric = pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="m" * 7_000)
    async with running_scaler(serve_from=serve_from) as scaler:
        scaler.board.publish(decision())
        refused = {}
        for what, call in (
            ("huge deployment", lambda: scaler.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=huge))),
            ("huge metricName", lambda: scaler.stub.GetMetrics(wrong_metric)),
            ("hidden name", lambda: scaler.stub.IsActive(ref("ch\u202eat\x00"))),
            ("huge stream", lambda: scaler.stub.StreamIsActive(huge).read()),
        ):  # fmt: skip
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await call()
            refused[what] = (raised.value.code(), raised.value.details() or "")
    codes = {what: code for what, (code, _) in refused.items()}
    assert codes == {
        "huge deployment": grpc.StatusCode.INVALID_ARGUMENT,
        "huge metricName": grpc.StatusCode.NOT_FOUND,
        "hidden name": grpc.StatusCode.INVALID_ARGUMENT,
        "huge stream": grpc.StatusCode.INVALID_ARGUMENT,
    }
    for _, details in refused.values():
        assert len(details) < 1100
        assert details.isprintable()
    assert refused["huge deployment"][1].endswith("' is not a valid Kubernetes object name")
    assert "characters left out" in refused["huge metricName"][1]
    assert "llm/ch\\u202eat\\x00: deployment name" in refused["hidden name"][1]


_text = st.text(max_size=40)
_keys = ["deployment", "targetSize", "activationReplicas", "includeWarmPool", "metricName", "scalerAddress"]
_metadata = st.dictionaries(
    st.sampled_from(_keys) | _text,
    _text,
    max_size=5,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=_text, namespace=_text, metadata=_metadata)
def test_fuzzed_refs_get_a_deliberate_status(name: str, namespace: str, metadata: dict[str, str]) -> None:
    async def call() -> grpc.StatusCode:
        async with running_scaler() as scaler:
            scaler.board.publish(decision("llm/chat"))
            so = pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=metadata)
            try:
                await scaler.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so))
                await scaler.stub.IsActive(so)
            except grpc.aio.AioRpcError as error:
                return error.code()
            return grpc.StatusCode.OK

    # never UNKNOWN/INTERNAL (an unhandled exception in the servicer): every outcome is a chosen one
    assert asyncio.run(call()) in {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND}


@settings(max_examples=50, deadline=None)
@given(payload=st.binary(max_size=200))
def test_fuzzed_wire_bytes_never_crash_the_servicer(payload: bytes) -> None:
    async def call() -> grpc.StatusCode:
        async with running_scaler() as scaler:
            scaler.board.publish(decision("llm/chat"))
            raw = scaler.channel.unary_unary("/externalscaler.ExternalScaler/GetMetrics")
            try:
                await raw(payload)
            except grpc.aio.AioRpcError as error:
                code = error.code()
            else:
                code = grpc.StatusCode.OK
            await keda_poll(scaler.stub, ref())  # still serving afterwards
            return code

    try:
        pb.GetMetricsRequest.FromString(payload)
    except DecodeError:
        # grpc's own deserialiser refuses it before the servicer runs (grpc.aio reports that as UNKNOWN)
        expected = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
    else:
        # anything that decodes reaches the servicer and gets a deliberate answer, never an escaped exception
        expected = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND}
    assert asyncio.run(call()) in expected
