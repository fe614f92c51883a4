"""`kvpilot run` answers its probes and KEDA while the forecasters' stored day is restored (review G F5, session 19).

Since 45bcc72 the warm start scores the restored history (~0.15 s of CPU per deployment-day): run on the event loop
before HTTP served, /healthz hung for as long (a few hundred deployments outlasted the liveness probe: a crash loop)
and KEDA's gRPC was not served. Here the warm start is held until the probes were tried: /healthz must answer 200,
/readyz 503 (no tick yet) and KEDA's gRPC an answer (NOT_FOUND: no decision stored), each within two seconds.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest

from kvpilot.runtime import runner
from kvpilot.runtime import service as service_module
from kvpilot.runtime.service import Service
from kvpilot.settings import load_settings
from scaler.keda import externalscaler_pb2_grpc as pb_grpc
from scaler.keda.server import Endpoint
from tests.unit.scaler.keda.harness import ref


def _status(url: str) -> int | str:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as e:
        return e.code
    except OSError as e:  # a timeout: nothing answered
        return type(e).__name__


def _grpc_code(port: int) -> str:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
        try:
            stub.IsActive(ref(), timeout=2.0)
        except grpc.RpcError as e:
            return str(e.code().name)  # type: ignore[attr-defined]
        return "OK"


async def test_probes_and_keda_answer_while_the_warm_start_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}
    built: list[Service] = []
    ports: list[int] = []
    endpoints: list[Endpoint | None] = []
    warm_start, build_service, listen, keda_endpoint = (
        service_module.warm_start,
        runner.build_service,
        runner._listen,
        runner._keda_endpoint,
    )

    def slow_warm_start(*args: Any) -> int:
        entered.set()
        release.wait(10.0)  # a long warm start, until the probes were tried (or 10 s where they never answer)
        return warm_start(*args)

    def build(*args: Any, **kwargs: Any) -> Any:
        service, restored = build_service(*args, **kwargs)
        built.append(service)
        return service, restored

    def bind(host: str, port: int) -> socket.socket:
        sock = listen(host, port)
        ports.append(sock.getsockname()[1])
        return sock

    def keda(*args: Any, **kwargs: Any) -> Endpoint | None:
        endpoints.append(keda_endpoint(*args, **kwargs))
        return endpoints[-1]

    def probe() -> None:  # in a thread: on the event loop it would be held by a warm start run there
        entered.wait(30.0)
        base = f"http://127.0.0.1:{ports[0]}"
        seen["healthz"] = _status(f"{base}/healthz")
        seen["readyz"] = _status(f"{base}/readyz")
        endpoint = endpoints[0]
        seen["keda"] = _grpc_code(endpoint.port) if endpoint is not None and endpoint.port else "no endpoint"
        seen["warming"] = not release.is_set()
        release.set()

    for module, name, double in (
        (service_module, "warm_start", slow_warm_start),
        (runner, "build_service", build),
        (runner, "_listen", bind),
        (runner, "_keda_endpoint", keda),
    ):
        monkeypatch.setattr(module, name, double)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    api = {"host": "127.0.0.1", "http_port": 0, "grpc_port": 0, "anonymous_read": True}
    settings = load_settings(api=api)
    prober = threading.Thread(target=probe, name="probe", daemon=True)
    prober.start()
    running = asyncio.create_task(runner.run(settings))
    try:
        await asyncio.to_thread(prober.join, 40.0)
        assert seen == {"healthz": 200, "readyz": 503, "keda": "NOT_FOUND", "warming": True}
    finally:
        release.set()
        await asyncio.to_thread(entered.wait, 30.0)
        for _ in range(300):  # the service is built in a thread
            if built:
                break
            await asyncio.sleep(0.1)
        built[0].stop.set()
        assert await asyncio.wait_for(running, 60.0) == 0
