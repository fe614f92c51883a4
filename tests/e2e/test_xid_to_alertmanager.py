"""XID 79 end to end, through real processes: the simulator (`kvpilot simulate --serve`) injects XID 79 on a
GPU; kvpilot (`kvpilot run`) scrapes it, its stuck_gpu detector flags the GPU and its /metrics exports
`kvpilot_finding_active`; a real Prometheus evaluates the generated rule file; a real Alertmanager delivers
`KvpilotGpuDrainRequired` to a webhook receiver in this test."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml

from tests.services.alertmanager import run_alertmanager, run_webhook
from tests.services.ports import free_port, wait_http
from tests.services.prometheus import run_prometheus

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
KVPILOT = str(Path(sys.executable).parent / "kvpilot")
RULES = REPO / "alerts" / "kvpilot-rules.yaml"


@contextmanager
def _process(args: list[str], log: Path, ready_url: str) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=log.parent)
    try:
        try:
            wait_http(ready_url, proc=proc, timeout_s=60)
        except (RuntimeError, TimeoutError) as e:
            raise RuntimeError(f"{args[:2]} did not start: {e}\n{log.read_text()[-3000:]}") from None
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _static_targets(sim_url: str) -> list[dict[str, str]]:
    """The simulator's discovery answer as kvpilot's static targets (its `dcgm` kind is kvpilot's `gpu`)."""
    out = []
    for t in httpx.get(f"{sim_url}/targets", timeout=5).json():
        gpu = t["kind"] == "dcgm"
        entry = {k: t[k] for k in ("url", "namespace", "deployment", "pod", "node")}
        entry["kind"] = "gpu" if gpu else "engine"
        if not gpu and t.get("engine"):
            entry["engine"] = t["engine"]
        out.append(entry)
    return out


def test_xid_79_is_delivered_by_alertmanager(tmp_path):
    sim_port, kv_port, grpc_port = free_port(), free_port(), free_port()
    sim_url, kv_url = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{kv_port}"
    for d in ("sim", "kvpilot", "prom", "am"):
        (tmp_path / d).mkdir()
    sim_args = [KVPILOT, "simulate", "--trace", "synthetic:duration_s=7200,rate=4", "--replicas", "2"]
    with _process([*sim_args, "--serve", str(sim_port)], tmp_path / "sim" / "sim.log", f"{sim_url}/healthz"):
        targets = _static_targets(sim_url)
        node = next(t["node"] for t in targets if t["kind"] == "gpu")
        config = {
            "environment": "development",
            "data_dir": str(tmp_path / "kvpilot"),
            "collector": {
                "interval_s": 1.0,
                "timeout_s": 0.8,
                "stale_after_s": 5.0,
                "discovery": {"kind": "static", "static_targets": targets},
            },
            "api": {"host": "127.0.0.1", "http_port": kv_port, "grpc_port": grpc_port, "anonymous_read": True},
        }
        cfg = tmp_path / "kvpilot" / "kvpilot.yaml"
        cfg.write_text(yaml.safe_dump(config))
        kv_log = tmp_path / "kvpilot" / "kvpilot.log"
        with (
            _process([KVPILOT, "run", "--config", str(cfg)], kv_log, f"{kv_url}/metrics"),
            run_webhook() as hook,
            run_alertmanager(tmp_path / "am", webhook_url=hook.url) as am,
            run_prometheus(
                tmp_path / "prom",
                scrape_configs=[{"job_name": "kvpilot", "static_configs": [{"targets": [f"127.0.0.1:{kv_port}"]}]}],
                rule_files=[RULES],
                alertmanager_url=am.url,
            ) as prom,
        ):
            # kvpilot is scraping the simulator and Prometheus is scraping kvpilot, and nothing is firing yet.
            prom.wait_for('kvpilot_gpu_utilisation_ratio{job="kvpilot"}', timeout_s=60)
            assert prom.query('ALERTS{alertname="KvpilotGpuDrainRequired"}') == []

            r = httpx.post(f"{sim_url}/control/faults", json={"type": "xid", "node": node, "gpu": 0, "xid": 79})
            assert r.status_code < 300, r.text

            try:
                alert = hook.wait_for("KvpilotGpuDrainRequired", timeout_s=120)
            except TimeoutError as e:
                findings = prom.query('kvpilot_finding_active{job="kvpilot"}')
                raise AssertionError(f"{e}; findings: {findings}; kvpilot log: {kv_log.read_text()[-2000:]}") from None
            assert alert["status"] == "firing"
            assert alert["labels"]["node"] == node
            assert alert["labels"]["severity"] == "critical"
            assert alert["labels"]["kind"] == "stuck_gpu"
            assert alert["annotations"]["runbook_url"].endswith("/KvpilotGpuDrainRequired.md")
