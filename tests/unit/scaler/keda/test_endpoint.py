"""The KEDA endpoint `kvpilot run` serves (`scaler.keda.server.build_endpoint`), over real gRPC on loopback: streams
end cleanly on shutdown, the standard health service, bearer tokens, and a taken port — served from the loop's
process and from a process of its own (`keda.serve_from`, `scaler.keda.process`) alike."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from collector.clock import VirtualClock, WallClock
from kvpilot.runtime.runner import _keda_endpoint, _keda_process, keda_from_process, keda_reader
from kvpilot.settings import Settings, SettingsError, load_settings
from scaler.keda import externalscaler_pb2 as pb
from scaler.keda import externalscaler_pb2_grpc as pb_grpc
from scaler.keda.process import ChildConfig, KedaProcess
from scaler.keda.reader import DecisionReader
from scaler.keda.server import SERVICE_NAME, build_endpoint
from scaler.keda.servicer import ServicerSettings
from scaler.publish import DecisionBoard
from tests.unit.scaler.keda.harness import decision, ref
from tests.unit.scaler.keda.test_tls import Pki, pki  # noqa: F401  (the module's certificates, made by openssl)

TOKEN = "0123456789abcdef-kvpilot-test-token"


def _mtls_channel(certs: Pki, port: int | None) -> grpc.aio.Channel:
    """A channel to ``localhost:port`` that presents the test PKI's client certificate."""
    credentials = grpc.ssl_channel_credentials(
        root_certificates=certs.ca.read_bytes(),
        private_key=certs.client_key.read_bytes(),
        certificate_chain=certs.client_cert.read_bytes(),
    )
    return grpc.aio.secure_channel(f"localhost:{port}", credentials)


def _tls_settings(certs: Pki, tmp_path: Path, serve_from: str) -> Settings:
    """`kvpilot run`'s settings with mTLS, one bearer token and 2 s ticks (a staleness limit of 12 s)."""
    return load_settings(
        store={"database_url": f"sqlite:///{tmp_path / 'k.db'}"},
        api={"host": "127.0.0.1", "grpc_port": 0},
        collector={"interval_s": 2, "timeout_s": 1},
        keda={
            "tls_cert_file": str(certs.server_cert),
            "tls_key_file": str(certs.server_key),
            "tls_client_ca_file": str(certs.ca),
            "bearer_tokens": TOKEN,
            "serve_from": serve_from,
        },
    )


@asynccontextmanager
async def serving(
    settings: ServicerSettings | None = None, board: DecisionBoard | None = None, serve_from: str = "loop"
) -> AsyncIterator[tuple[int, grpc.aio.Channel, asyncio.Event, DecisionBoard]]:
    """The endpoint on a free port: built in this process, or started in a process of its own over a mirror of
    ``board``; yields its port."""
    board = board or DecisionBoard()
    board.publish(decision(desired=2, timestamp=WallClock().now()))
    stop = asyncio.Event()
    task: asyncio.Task[None]
    if serve_from == "process":
        keda = KedaProcess(board, ChildConfig("127.0.0.1:0", settings or ServicerSettings(), 30.0, grace_s=2.0))
        port = await keda.start()
        task = asyncio.create_task(keda.run(stop))
    else:
        endpoint = build_endpoint("127.0.0.1:0", DecisionReader(board, WallClock()), settings or ServicerSettings())
        port = endpoint.port
        task = asyncio.create_task(endpoint.serve(stop, grace_s=2.0))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield port, channel, stop, board
    finally:
        stop.set()
        await task
        await channel.close()


async def test_shutdown_ends_open_streams_with_ok_and_turns_health_not_serving(serve_from: str) -> None:
    async with serving(serve_from=serve_from) as (_, channel, stop, _board):
        stub = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
        stream = stub.StreamIsActive(ref())
        health = health_pb2_grpc.HealthStub(channel)
        watch = health.Watch(health_pb2.HealthCheckRequest(service=SERVICE_NAME))
        assert (await stream.read()).result is True
        assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
        stop.set()
        # KEDA's runStreamIsActive resets its reconnect backoff only on io.EOF, i.e. a stream that ends with OK
        assert await asyncio.wait_for(stream.read(), timeout=5) is grpc.aio.EOF
        assert await stream.code() == grpc.StatusCode.OK
        assert (await asyncio.wait_for(watch.read(), timeout=5)).status == health_pb2.HealthCheckResponse.NOT_SERVING


async def test_health_check_answers_for_the_server_and_the_external_scaler(serve_from: str) -> None:
    async with serving(serve_from=serve_from) as (_, channel, _stop, _board):
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE_NAME):
            answer = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert answer.status == health_pb2.HealthCheckResponse.SERVING


TOKEN_CASES = [
    # KEDA's way: the trigger's `bearerTokenFromEnv`, resolved from the scale target's environment
    ({"bearerTokenFromEnv": TOKEN}, (), None),
    # the same from a Secret written with echo: KEDA forwards the environment's value, newline and all
    ({"bearerTokenFromEnv": TOKEN + "\n"}, (), None),
    # other clients' way: a gRPC authorization header
    ({}, (("authorization", f"Bearer {TOKEN}"),), None),
    # no token
    ({}, (), "no bearer token"),
    # a wrong one
    ({"bearerTokenFromEnv": "not-the-token-at-all"}, (), "not one kvpilot accepts"),
    ({}, (("authorization", "Bearer nope-nope-nope-nope"),), "not one kvpilot accepts"),
]


@pytest.mark.parametrize(("metadata", "headers", "refused"), TOKEN_CASES)
async def test_bearer_token(
    metadata: dict[str, str], headers: tuple[tuple[str, str], ...], refused: str | None, serve_from: str
) -> None:
    tokens = ServicerSettings(tokens=frozenset({TOKEN}))
    async with serving(tokens, serve_from=serve_from) as (_, channel, _stop, _board):
        stub = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
        so = ref(**metadata)
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: stub.IsActive(so, metadata=headers),
            lambda: stub.GetMetricSpec(so, metadata=headers),
            lambda: stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so, metricName=""), metadata=headers),
            lambda: stub.StreamIsActive(so, metadata=headers).read(),
        ]
        for call in calls:
            if refused is None:
                await call()
                continue
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await call()
            assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert refused in (error.value.details() or "")
            assert "nope" not in (error.value.details() or "")  # the offered token is never echoed
        # the health service stays open for probes
        health = health_pb2_grpc.HealthStub(channel)
        assert (await health.Check(health_pb2.HealthCheckRequest())).status == health_pb2.HealthCheckResponse.SERVING


async def test_a_taken_port_is_a_bind_error_not_a_second_listener(serve_from: str) -> None:
    async with serving(serve_from=serve_from) as (port, _channel, _stop, board):
        # gRPC core would otherwise bind with SO_REUSEPORT beside the first server and share its connections
        with pytest.raises(ValueError, match=f"cannot bind the KEDA gRPC server to '127.0.0.1:{port}'"):
            build_endpoint(f"127.0.0.1:{port}", DecisionReader(board, WallClock()), ServicerSettings())


@pytest.mark.e2e
@pytest.mark.parametrize(("mode", "exit_code"), [("keda", 1), ("advisory", None)])
def test_kvpilot_run_with_the_grpc_port_taken(
    tmp_path: Path, mode: str, exit_code: int | None, serve_from: str
) -> None:
    kvpilot = str(Path(sys.executable).with_name("kvpilot"))
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        env = {
            **os.environ,
            "XDG_DATA_HOME": str(tmp_path),
            "KVPILOT_GRPC_PORT": str(taken.getsockname()[1]),
            "KVPILOT_SCALER__MODE": mode,
            "KVPILOT_KEDA__SERVE_FROM": serve_from,
        }
        proc = subprocess.Popen(
            [kvpilot, "run", "--port", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        lines: list[str] = []
        refused = threading.Event()

        def pump() -> None:  # read the output as it comes: start-up takes seconds on a loaded machine
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if "cannot bind the KEDA gRPC server" in line:
                    refused.set()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            if exit_code is not None:
                code: int | None = proc.wait(timeout=60)
            else:
                assert refused.wait(60), "no bind error within 60 s"
                code = proc.poll()  # still serving HTTP and deciding: the KEDA port is only needed in keda mode
        finally:
            if proc.poll() is None:
                proc.terminate()
            proc.wait(timeout=30)
            reader.join(timeout=10)
    out = "".join(lines)
    assert code == exit_code
    assert "cannot bind the KEDA gRPC server" in out
    assert "Traceback" not in out


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
async def test_settings_configure_mutual_tls_tokens_and_staleness(pki: Pki, tmp_path: Path) -> None:  # noqa: F811
    """What `kvpilot run` builds from its settings: mTLS, a bearer token and the loop-derived staleness limit."""
    settings = _tls_settings(pki, tmp_path, "loop")
    assert settings.decision_stale_after_s == 12.0  # 6 ticks of 2 s
    clock = VirtualClock(1_700_000_000.0)
    board = DecisionBoard()
    board.publish(decision(desired=3, timestamp=clock.now()))
    reader = keda_reader(board, settings, clock)
    endpoint = _keda_endpoint(reader, settings)
    assert endpoint is not None
    assert endpoint.servicer.reader is reader  # gRPC answers through the reader the metrics-api route gets
    stop = asyncio.Event()
    task = asyncio.create_task(endpoint.serve(stop))
    channel = _mtls_channel(pki, endpoint.port)
    try:
        stub = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
        assert (await stub.IsActive(ref(bearerTokenFromEnv=TOKEN), timeout=10)).result is True
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.IsActive(ref(), timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        clock.advance(13.0)  # the loop missed more than six ticks
        with pytest.raises(grpc.aio.AioRpcError) as stale:
            await stub.IsActive(ref(bearerTokenFromEnv=TOKEN), timeout=10)
        assert stale.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        stop.set()
        await task
        await channel.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
async def test_settings_configure_mutual_tls_tokens_and_staleness_in_a_process(pki: Pki, tmp_path: Path) -> None:  # noqa: F811
    """The same settings served from KEDA's own process: mTLS, the token, and the limit on the wall clock."""
    settings = _tls_settings(pki, tmp_path, "process")
    board = DecisionBoard()
    board.publish(decision(desired=3, timestamp=WallClock().now()))
    keda = await _keda_process(board, keda_reader(board, settings, WallClock()), settings)
    assert keda is not None
    assert keda.port is not None
    stop = asyncio.Event()
    task = asyncio.create_task(keda.run(stop))
    channel = _mtls_channel(pki, keda.port)
    try:
        stub = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
        assert (await stub.IsActive(ref(bearerTokenFromEnv=TOKEN), timeout=10)).result is True
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.IsActive(ref(), timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        board.publish(decision(desired=3, timestamp=WallClock().now() - 13.0))  # older than six ticks of 2 s
        await keda.synced()
        with pytest.raises(grpc.aio.AioRpcError) as stale:
            await stub.IsActive(ref(bearerTokenFromEnv=TOKEN), timeout=10)
        assert stale.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        stop.set()
        await task
        await channel.close()


SETTINGS_ERRORS = [
    ({"tls_cert_file": "/x.crt"}, "must be set together"),
    ({"tls_client_ca_file": "/ca.crt"}, "needs keda.tls_cert_file"),
    ({"bearer_tokens": "short"}, "shorter than 16"),
    ({"stale_after_ticks": 1}, "stale_after_ticks"),
]


@pytest.mark.parametrize(("keda", "message"), SETTINGS_ERRORS)
def test_keda_settings_errors_name_the_field(keda: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(keda=keda)


def test_unreadable_tls_file_is_fatal_only_in_keda_mode(tmp_path: Path) -> None:
    missing = {"tls_cert_file": str(tmp_path / "no.crt"), "tls_key_file": str(tmp_path / "no.key")}
    api = {"host": "127.0.0.1", "grpc_port": 0}
    keda_mode = load_settings(scaler={"mode": "keda"}, api=api, keda=missing)
    board = DecisionBoard()
    with pytest.raises(SettingsError, match=r"TLS certificate .*no\.crt.*scaler\.mode is keda"):
        _keda_endpoint(keda_reader(board, keda_mode, WallClock()), keda_mode)
    other = load_settings(api=api, keda=missing)
    assert _keda_endpoint(keda_reader(board, other, WallClock()), other) is None


async def test_unreadable_tls_file_is_fatal_only_in_keda_mode_in_a_process(tmp_path: Path) -> None:
    missing = {"tls_cert_file": str(tmp_path / "no.crt"), "tls_key_file": str(tmp_path / "no.key")}
    api = {"host": "127.0.0.1", "grpc_port": 0}
    keda_mode = load_settings(scaler={"mode": "keda"}, api=api, keda={**missing, "serve_from": "process"})
    board = DecisionBoard()
    with pytest.raises(SettingsError, match=r"TLS certificate .*no\.crt.*scaler\.mode is keda"):
        await _keda_process(board, keda_reader(board, keda_mode, WallClock()), keda_mode)
    other = load_settings(api=api, keda={**missing, "serve_from": "process"})
    assert await _keda_process(board, keda_reader(board, other, WallClock()), other) is None


@pytest.mark.parametrize(
    ("serve_from", "clock", "sharded", "expected"),
    [
        ("process", WallClock(), False, True),  # kvpilot run: its own process
        ("process", VirtualClock(0.0), False, False),  # the demo's virtual time: the child would call all stale
        ("process", WallClock(), True, False),  # sharding: forwarding needs the loop's shard ownership
        ("loop", WallClock(), False, False),  # the default
    ],
)
def test_where_keda_is_served_from(serve_from: str, clock: object, sharded: bool, expected: bool) -> None:
    settings = load_settings(keda={"serve_from": serve_from})
    shards = object() if sharded else None
    assert keda_from_process(settings, clock, shards) is expected  # type: ignore[arg-type]
