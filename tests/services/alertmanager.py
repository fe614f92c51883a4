"""Start Debian's real `prometheus-alertmanager` on loopback for a test, delivering to a webhook, and a webhook
receiver that collects what Alertmanager posts."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tests.services.ports import free_port, running

BINARY = "prometheus-alertmanager"


@dataclass
class Alertmanager:
    url: str
    process: subprocess.Popen[bytes]
    log: Path


@dataclass
class Webhook:
    """Collects Alertmanager's webhook posts; `wait_for` blocks on a condition variable, not a sleep loop."""

    url: str = ""
    posts: list[dict[str, Any]] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def add(self, body: dict[str, Any]) -> None:
        with self._cond:
            self.posts.append(body)
            self._cond.notify_all()

    def alerts(self) -> list[dict[str, Any]]:
        with self._cond:
            return [a for p in self.posts for a in p.get("alerts", [])]

    def wait_for(self, alertname: str, *, timeout_s: float) -> dict[str, Any]:
        """The first delivered alert named `alertname`; TimeoutError naming what did arrive otherwise."""

        def found() -> dict[str, Any] | None:
            return next(
                (a for p in self.posts for a in p.get("alerts", []) if a["labels"].get("alertname") == alertname), None
            )

        with self._cond:
            if not self._cond.wait_for(lambda: found() is not None, timeout=timeout_s):
                seen = sorted({a["labels"].get("alertname", "?") for p in self.posts for a in p.get("alerts", [])})
                raise TimeoutError(f"{alertname} not delivered within {timeout_s} s; delivered: {seen}")
            alert = found()
            assert alert is not None
            return alert


@contextmanager
def run_webhook() -> Iterator[Webhook]:
    hook = Webhook()

    class _Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            hook.add(json.loads(self.rfile.read(length) or b"{}"))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    hook.url = f"http://127.0.0.1:{server.server_address[1]}/alerts"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, name="webhook", daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def run_alertmanager(tmp: Path, *, webhook_url: str) -> Iterator[Alertmanager]:
    """Run Alertmanager (clustering off) routing every alert to `webhook_url` at once; stop it on exit."""
    binary = shutil.which(BINARY)
    if binary is None:
        raise RuntimeError(f"{BINARY} not installed: run `make system-deps`")
    port = free_port()
    config = {
        "route": {
            "receiver": "test",
            "group_by": ["alertname", "node", "deployment"],
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [{"name": "test", "webhook_configs": [{"url": webhook_url, "send_resolved": False}]}],
    }
    (tmp / "alertmanager.yml").write_text(yaml.safe_dump(config))
    log = tmp / "alertmanager.log"
    url = f"http://127.0.0.1:{port}"
    argv = [
        binary,
        f"--config.file={tmp / 'alertmanager.yml'}",
        f"--storage.path={tmp / 'am-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    with running(argv, log=log, ready_url=f"{url}/-/ready") as proc:
        yield Alertmanager(url, proc, log)
