"""Start Debian's real `prometheus` on loopback for a test, and query it."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.services.ports import free_port, running


@dataclass
class Prometheus:
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    # One client for every query: httpx.get() builds one (and its TLS context) per call, ~45 ms each on loopback,
    # which the tests that poll dozens of dashboard queries paid on every poll.
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=10), repr=False)

    def query(self, promql: str, *, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": promql}
        if at is not None:
            params["time"] = at
        r = self.http.get(f"{self.url}/api/v1/query", params=params)
        r.raise_for_status()
        body = r.json()
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_for(self, promql: str, *, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Poll until `promql` returns a non-empty result."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            result = self.query(promql)
            if result:
                return result
            time.sleep(0.5)
        raise TimeoutError(f"no result for {promql!r} within {timeout_s} s; log: {self.log.read_text()[-2000:]}")

    def targets(self) -> list[dict[str, Any]]:
        r = self.http.get(f"{self.url}/api/v1/targets")
        r.raise_for_status()
        active: list[dict[str, Any]] = r.json()["data"]["activeTargets"]
        return active


@contextmanager
def run_prometheus(
    tmp: Path,
    *,
    scrape_configs: list[dict[str, Any]] | None = None,
    rule_files: list[Path] | None = None,
    alertmanager_url: str | None = None,
    scrape_interval: str = "1s",
    evaluation_interval: str = "1s",
) -> Iterator[Prometheus]:
    """Run `prometheus` with the given scrape configs; stop it on exit."""
    port = free_port()
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval},
        "scrape_configs": scrape_configs or [],
    }
    if rule_files:
        config["rule_files"] = [str(p) for p in rule_files]
    if alertmanager_url:
        host = alertmanager_url.split("://", 1)[-1].rstrip("/")
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [host]}]}]}
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = tmp / "prometheus.log"
    url = f"http://127.0.0.1:{port}"
    argv = [
        "prometheus",
        f"--config.file={tmp / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-lifecycle",
    ]
    with running(argv, log=log, ready_url=f"{url}/-/ready") as proc:
        prom = Prometheus(url, proc, log)
        try:
            yield prom
        finally:
            prom.http.close()
