"""KEDA served from a process of its own (`scaler.keda.process`): a real child process, a real grpc client, and
the parent's board mirrored into it — answers, newer versions, forgets, staleness, pushed streams, tokens, a
killed child restarted, and no child outliving its parent."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from scaler.keda import externalscaler_pb2 as pb
from scaler.keda import externalscaler_pb2_grpc as pb_grpc
from scaler.keda.process import ChildConfig, KedaProcess
from scaler.keda.servicer import ServicerSettings
from scaler.publish import DecisionBoard, Published
from tests.helpers.poll import until
from tests.unit.scaler.keda.harness import decision, ref

TOKEN = "0123456789abcdef-kvpilot-test-token"


def fresh(desired: int, deployment: str = "llm/chat", age_s: float = 0.0) -> object:
    return decision(deployment, desired=desired, timestamp=time.time() - age_s)


@dataclass
class Child:
    board: DecisionBoard
    keda: KedaProcess
    stub: pb_grpc.ExternalScalerStub
    channel: grpc.aio.Channel
    stop: asyncio.Event


@asynccontextmanager
async def child(
    settings: ServicerSettings | None = None, *, stale_after_s: float = 30.0, ping_interval_s: float = 5.0
) -> AsyncIterator[Child]:
    board = DecisionBoard()
    board.publish(fresh(3))  # type: ignore[arg-type]
    keda = KedaProcess(board, ChildConfig("127.0.0.1:0", settings or ServicerSettings(), stale_after_s, grace_s=2.0),
                       backoff_s=0.1, ping_interval_s=ping_interval_s, ping_misses=3)  # fmt: skip
    port = await keda.start()
    stop = asyncio.Event()
    supervisor = asyncio.create_task(keda.run(stop))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield Child(board, keda, pb_grpc.ExternalScalerStub(channel), channel, stop)  # type: ignore[no-untyped-call]
    finally:
        stop.set()
        await supervisor
        await channel.close()


async def metric(stub: pb_grpc.ExternalScalerStub, so: pb.ScaledObjectRef | None = None) -> float:
    answer = await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so or ref(), metricName=""), timeout=10)
    return float(answer.metricValues[0].metricValueFloat)


async def refused(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await call  # type: ignore[misc]
    return error.value.code()


async def test_answers_the_published_decisions_and_every_newer_one() -> None:
    async with child() as c:
        assert await metric(c.stub) == 3.0  # published before the process started: its first copy of the board
        assert (await c.stub.IsActive(ref())).result is True
        for desired in (5, 0, 2):
            c.board.publish(fresh(desired))  # type: ignore[arg-type]
            await c.keda.synced()
            assert await metric(c.stub) == float(desired)
        c.board.publish(fresh(4, "llm/other"))  # type: ignore[arg-type]
        await c.keda.synced()
        assert await metric(c.stub, ref(name="other")) == 4.0


async def test_forget_is_not_found_and_stale_is_unavailable() -> None:
    async with child(stale_after_s=30.0) as c:
        c.board.forget("llm/chat")
        await c.keda.synced()
        assert await refused(c.stub.IsActive(ref())) == grpc.StatusCode.NOT_FOUND
        c.board.publish(fresh(3, age_s=31.0))  # type: ignore[arg-type]  # decided 31 s ago on the wall clock
        await c.keda.synced()
        assert await refused(c.stub.IsActive(ref())) == grpc.StatusCode.UNAVAILABLE
        c.board.publish(fresh(3))  # type: ignore[arg-type]
        await c.keda.synced()
        assert (await c.stub.IsActive(ref())).result is True


async def test_stream_is_pushed_on_change_and_ends_ok_on_shutdown() -> None:
    async with child() as c:
        stream = c.stub.StreamIsActive(ref(activationReplicas="2"))
        assert (await asyncio.wait_for(stream.read(), 10)).result is True
        c.board.publish(fresh(1))  # type: ignore[arg-type]  # below the activation threshold: pushed at once
        assert (await asyncio.wait_for(stream.read(), 10)).result is False
        c.board.publish(fresh(4))  # type: ignore[arg-type]
        assert (await asyncio.wait_for(stream.read(), 10)).result is True
        health = health_pb2_grpc.HealthStub(c.channel)
        watch = health.Watch(health_pb2.HealthCheckRequest(service=""))
        assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
        c.stop.set()  # kvpilot's SIGTERM
        # KEDA resets its reconnect backoff only on a stream that ends with OK (scaler/keda/servicer.py)
        assert await asyncio.wait_for(stream.read(), 10) is grpc.aio.EOF
        assert await stream.code() == grpc.StatusCode.OK
        assert (await asyncio.wait_for(watch.read(), 10)).status == health_pb2.HealthCheckResponse.NOT_SERVING


TOKEN_CASES = [
    ({"bearerTokenFromEnv": TOKEN}, (), None),  # KEDA's way: the trigger metadata
    ({}, (("authorization", f"Bearer {TOKEN}"),), None),  # a gRPC authorization header
    ({}, (), grpc.StatusCode.UNAUTHENTICATED),  # none
    ({"bearerTokenFromEnv": "not-the-token-at-all"}, (), grpc.StatusCode.UNAUTHENTICATED),  # a wrong one
]


async def test_bearer_tokens_are_checked_in_the_process() -> None:
    async with child(ServicerSettings(tokens=frozenset({TOKEN}))) as c:
        for metadata, headers, code in TOKEN_CASES:
            call = c.stub.IsActive(ref(**metadata), metadata=headers)
            if code is None:
                assert (await call).result is True
            else:
                assert await refused(call) == code


async def test_a_killed_process_is_restarted_and_serves_the_board_again() -> None:
    async with child() as c:
        first = c.keda.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        c.board.publish(fresh(7))  # type: ignore[arg-type]  # while it is down: the restarted one starts from this
        await until(
            lambda: c.keda.serving and c.keda.pid not in (None, first),
            what="the killed KEDA process restarted and serving",
            timeout_s=30,
        )
        assert c.keda.restarts_total == 1
        assert c.keda.pid != first
        assert await metric(c.stub) == 7.0  # same port, same answers
        c.board.publish(fresh(2))  # type: ignore[arg-type]
        await c.keda.synced()
        assert await metric(c.stub) == 2.0


async def test_a_hung_process_is_killed_and_restarted(caplog: pytest.LogCaptureFixture) -> None:
    """A child that lives but runs nothing (SIGSTOP: as a deadlocked loop looks from outside) answers no pings;
    after 3 unanswered at 0.2 s the parent kills it and it is restarted as one that died."""
    async with child(ping_interval_s=0.2) as c:
        first = c.keda.pid
        assert first is not None
        await asyncio.sleep(1.0)  # pings answered meanwhile: a live child is left alone
        assert c.keda.pid == first
        assert c.keda.restarts_total == 0
        os.kill(first, signal.SIGSTOP)
        try:
            await until(
                lambda: c.keda.serving and c.keda.pid not in (None, first),
                what="the hung KEDA process killed, restarted and serving",
                timeout_s=30,
            )
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(first, signal.SIGKILL)
        assert c.keda.restarts_total == 1
        assert any("pings unanswered" in r.getMessage() and f"pid {first}" in r.getMessage() for r in caplog.records)
        c.board.publish(fresh(4))  # type: ignore[arg-type]
        await c.keda.synced()
        assert await metric(c.stub) == 4.0


async def test_a_stalled_parent_does_not_blame_the_child() -> None:
    """The parent's own loop blocked for ten ping intervals sends no pings meanwhile, so the child's answers, read
    once it runs again, keep it alive: pings are counted, not seconds."""
    async with child(ping_interval_s=0.2) as c:
        first = c.keda.pid
        await asyncio.sleep(0.5)
        time.sleep(2.0)  # noqa: ASYNC251  # the parent's loop stalls (a long tick on it, a GC pause, a loaded node)
        await asyncio.sleep(1.0)
        assert c.keda.pid == first
        assert c.keda.serving
        assert c.keda.restarts_total == 0
        assert await metric(c.stub) == 3.0


def test_ping_settings_are_checked() -> None:
    config = ChildConfig("127.0.0.1:0", ServicerSettings(), 30.0)
    with pytest.raises(ValueError, match="ping_interval_s must be positive"):
        KedaProcess(DecisionBoard(), config, ping_interval_s=0)
    with pytest.raises(ValueError, match="ping_misses at least 1"):
        KedaProcess(DecisionBoard(), config, ping_misses=0)


async def test_a_taken_port_is_a_bind_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        keda = KedaProcess(DecisionBoard(), ChildConfig(f"127.0.0.1:{port}", ServicerSettings(), 30.0))
        with pytest.raises(ValueError, match=f"cannot bind the KEDA gRPC server to '127.0.0.1:{port}'"):
            await keda.start()
        assert keda.pid is None


def test_mirror_keeps_versions_and_wakes_on_a_reset() -> None:
    source, mirror = DecisionBoard(), DecisionBoard()
    ops: list[tuple[str, object]] = []
    source.publish(decision("llm/a", desired=1))
    source.mirror_to(ops.append)
    source.publish(decision("llm/b", desired=2))
    source.forget("llm/a")
    for op in ops:
        mirror.apply(op)
    assert [kind for kind, _ in ops] == ["reset", "publish", "forget"]
    assert mirror.deployments() == ["llm/b"]
    assert mirror.latest("llm/b") == source.latest("llm/b")  # the same version, not one of its own
    mirror.apply(("reset", [Published(decision("llm/c"), 9)]))
    assert mirror.deployments() == ["llm/c"]
    source.mirror_to(None)
    source.publish(decision("llm/d"))
    assert len(ops) == 3


# -- kvpilot run --------------------------------------------------------------------------------------------------


def _kvpilot_run(tmp_path: Path) -> tuple[subprocess.Popen[str], list[str]]:
    kvpilot = str(Path(sys.executable).with_name("kvpilot"))
    env = {
        **os.environ,
        "XDG_DATA_HOME": str(tmp_path),
        "KVPILOT_GRPC_PORT": "0",
        "KVPILOT_KEDA__SERVE_FROM": "process",
        "KVPILOT_API__HOST": "127.0.0.1",
    }
    proc = subprocess.Popen(
        [kvpilot, "run", "--port", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    assert proc.stdout is not None
    deadline = time.monotonic() + 90
    for line in proc.stdout:
        lines.append(line)
        if "KEDA external scaler" in line or time.monotonic() > deadline:
            break
    # keep reading, so that kvpilot never blocks on a full pipe
    threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True).start()
    return proc, lines


def _child_pid(lines: list[str]) -> int:
    found = re.search(r"own process (\d+)\) on [^:]+:(\d+)", "".join(lines))
    assert found, "".join(lines)[-3000:]
    return int(found.group(1))


def _gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        status = Path(f"/proc/{pid}/stat")
        if status.exists() and status.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return True  # exited, waiting for a parent to reap it
        time.sleep(0.05)
    return False


@pytest.mark.e2e
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_kvpilot_run_leaves_no_keda_process_behind(tmp_path: Path, sig: signal.Signals) -> None:
    """SIGTERM: the parent stops its KEDA process in order; SIGKILL: the process sees its pipe close and goes."""
    proc, lines = _kvpilot_run(tmp_path)
    try:
        pid = _child_pid(lines)
        if sig == signal.SIGTERM:  # while it serves: readiness and kvpilot's own /metrics say so
            api = re.search(r"API on (http://[^ ]+:\d+)", "".join(lines))
            assert api, "".join(lines)[-3000:]
            ready = httpx.get(f"{api.group(1)}/readyz", timeout=10, trust_env=False).json()
            assert ready["checks"]["keda_serving"] is True
            page = httpx.get(f"{api.group(1)}/metrics", timeout=10, trust_env=False).text
            assert "kvpilot_keda_server_up 1.0" in page
            assert "kvpilot_keda_server_restarts_total 0.0" in page
        proc.send_signal(sig)
        proc.wait(timeout=60)
        assert _gone(pid, 30), f"KEDA's process {pid} outlived kvpilot"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
