"""`kvpilot run` as an operator starts it: a real process with the embedded default (SQLite file, simulator fleet),
stopped with SIGTERM (clean exit, store flushed) and with SIGKILL (restart resumes from the store)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.helpers.poll import wait_for
from tests.services.ports import free_port, wait_http

pytestmark = pytest.mark.e2e

KVPILOT = str(Path(sys.executable).with_name("kvpilot"))


@contextmanager
def kvpilot_run(
    tmp: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    log = (tmp / f"run-{port}.log").open("wb")
    environment = {
        **os.environ,
        "XDG_DATA_HOME": str(tmp / "data"),
        "KVPILOT_GRPC_PORT": str(free_port()),
        "KVPILOT_COLLECTOR__INTERVAL_S": "1",
        "KVPILOT_COLLECTOR__TIMEOUT_S": "0.5",
        **(env or {}),
    }
    proc = subprocess.Popen(
        [KVPILOT, "run", "--port", str(port), *args], env=environment, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def _ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    wait_http(f"{url}/readyz", timeout_s=60, proc=proc)


def _keda_desired(port: int) -> int:
    import grpc

    from scaler.keda import externalscaler_pb2 as pb
    from scaler.keda import externalscaler_pb2_grpc as pb_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.ExternalScalerStub(channel)
        ref = pb.ScaledObjectRef(name="llama", namespace="inference", scalerMetadata={"includeWarmPool": "false"})
        answer = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref, metricName="kvpilot-replicas"), timeout=10)
    return round(answer.metricValues[0].metricValueFloat)


def test_zero_config_run_serves_the_simulated_fleet_and_stops_cleanly(tmp_path: Path) -> None:
    grpc_port = free_port()
    with kvpilot_run(tmp_path, env={"KVPILOT_GRPC_PORT": str(grpc_port)}) as (proc, url):
        _ready(url, proc)
        deployments = httpx.get(f"{url}/v1/deployments").json()["items"]
        assert [d["key"] for d in deployments] == ["inference/llama"]
        assert deployments[0]["live"] is True
        assert "kvpilot_scrape_up" in httpx.get(f"{url}/metrics").text
        assert httpx.get(f"{url}/docs").status_code == 200
        served = _keda_desired(grpc_port)
        after = httpx.get(f"{url}/v1/deployments").json()["items"][0]["desired_replicas"]
        assert served in {deployments[0]["desired_replicas"], after}  # KEDA is served the same decision
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    log = next(tmp_path.glob("run-*.log")).read_text()
    assert "SIGTERM: abandoning the tick in progress, flushing the store, stopping" in log
    assert "kvpilot stopped" in log
    assert (tmp_path / "data" / "kvpilot" / "kvpilot.db").exists()  # the embedded default store


def test_sigkill_and_restart_keeps_audit_and_decisions(tmp_path: Path) -> None:
    with kvpilot_run(tmp_path) as (proc, url):
        _ready(url, proc)
        drain = httpx.post(f"{url}/v1/drains", json={"node": "node-0", "reason": "test"}).json()
        httpx.post(f"{url}/v1/drains/{drain['id']}/approve", json={"message": "ok"})
        wait_http(f"{url}/readyz", proc=proc)
        decided = len(httpx.get(f"{url}/v1/decisions?limit=1000").json()["items"])
        assert decided >= 1
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    with kvpilot_run(tmp_path) as (proc, url):
        _ready(url, proc)
        back = httpx.get(f"{url}/v1/drains/{drain['id']}").json()
        # The audit trail survived the kill; the leader may since have executed the approved (dry-run) drain.
        assert [e["to_state"] for e in back["events"]][:2] == ["requested", "approved"]
        assert back["state"] in ("approved", "executing", "done")
        assert len(httpx.get(f"{url}/v1/decisions?limit=1000").json()["items"]) >= decided
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_port_in_use_fails_at_once_with_a_clear_message(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "XDG_DATA_HOME": str(tmp_path), "KVPILOT_GRPC_PORT": "0"}
        out = subprocess.run([KVPILOT, "run", "--port", str(port)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in out.stderr  # open (no tokens): loopback only
    assert "Traceback" not in out.stderr


def _simulator_url(tmp: Path) -> str:
    for line in next(tmp.glob("run-*.log")).read_text().splitlines():
        if "embedded simulator" in line:
            return line.rsplit(" ", 1)[-1]
    raise AssertionError("the embedded simulator's URL is not in the log")


def test_an_acknowledged_finding_survives_sigkill(tmp_path: Path) -> None:
    with kvpilot_run(tmp_path) as (proc, url):
        _ready(url, proc)
        fault = {"type": "xid", "node": "node-0", "gpu": 0, "xid": 79}
        assert httpx.post(f"{_simulator_url(tmp_path)}/control/faults", json=fault).status_code == 200

        def open_stuck_gpu() -> list[dict]:
            assert proc.poll() is None, "kvpilot exited"
            return httpx.get(f"{url}/v1/findings", params={"kind": "stuck_gpu", "state": "open"}).json()["items"]

        wait_for(open_stuck_gpu, what="the XID as an open stuck_gpu finding", timeout_s=120)  # after its hysteresis
        fid = open_stuck_gpu()[0]["id"]
        r = httpx.post(f"{url}/v1/findings/{fid}/acknowledge", json={"note": "RMA filed"})
        assert r.status_code == 200
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    with kvpilot_run(tmp_path) as (proc, url):
        _ready(url, proc)
        back = httpx.get(f"{url}/v1/findings/{fid}").json()
        assert (back["acknowledged_by"], back["acknowledge_note"]) == ("anonymous", "RMA filed")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


@pytest.mark.parametrize(
    ("config", "env", "named"),
    [
        # a negative interval is refused, naming the field
        ("collector:\n  interval_s: -1\n", {}, "collector.interval_s"),
        # an unknown key is refused rather than ignored
        ("scaler:\n  mood: happy\n", {}, "scaler.mood"),
        # production without an admin token is refused
        ("environment: production\n", {}, "api.admin_tokens"),
        # a well-known token is refused outside development
        ("environment: production\n", {"KVPILOT_ADMIN_TOKENS": "changeme"}, "api.admin_tokens[0]"),
    ],
)
def test_invalid_configuration_exits_2_naming_the_field(
    tmp_path: Path, config: str, env: dict[str, str], named: str
) -> None:
    path = tmp_path / "kvpilot.yaml"
    path.write_text(config)
    out = subprocess.run(
        [KVPILOT, "run", "--config", str(path)], env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert named in out.stderr


def test_an_invalid_configuration_is_refused_before_the_service_is_imported(tmp_path: Path) -> None:
    # The service's imports (FastAPI, gRPC, the collector) take seconds; a bad file must be told without them.
    path = tmp_path / "kvpilot.yaml"
    path.write_text("collector:\n  interval_s: -1\n")
    probe = (
        "import sys\n"
        "from kvpilot.cli import app\n"
        "try:\n"
        "    app(['run', '--config', sys.argv[1]])\n"
        "except SystemExit as e:\n"
        "    print(e.code, 'api.main' in sys.modules, 'kvpilot.runtime.runner' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["2", "False", "False"], out.stderr
    assert "collector.interval_s" in out.stderr


def test_postgres_outage_shows_in_readyz_and_metrics_then_recovers(tmp_path: Path) -> None:
    from tests.services.postgres import fresh_database, run_postgres

    def status(url: str) -> tuple[int, dict]:
        r = httpx.get(f"{url}/readyz", timeout=5)
        return r.status_code, r.json()

    def poll(url: str, proc: subprocess.Popen[bytes], want: int) -> dict:
        def answers() -> bool:
            assert proc.poll() is None, "kvpilot exited"
            return status(url)[0] == want

        wait_for(answers, what=f"/readyz answering {want}", timeout_s=120)
        return status(url)[1]

    with run_postgres() as pg:
        db = fresh_database(pg)
        with kvpilot_run(tmp_path, env={"KVPILOT_DATABASE_URL": db}) as (proc, url):
            _ready(url, proc)
            pg.stop()
            body = poll(url, proc, 503)
            assert body["checks"]["store_reachable"] is False
            assert "kvpilot_store_up 0.0" in httpx.get(f"{url}/metrics").text
            assert httpx.get(f"{url}/v1/replicas").status_code == 200  # live views keep answering
            pg.start()
            body = poll(url, proc, 200)
            assert body["checks"] == {"first_tick_done": True, "store_reachable": True}
            assert httpx.get(f"{url}/v1/decisions").json()["items"]  # what was buffered reached the store
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
