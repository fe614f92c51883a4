"""XID 79 end to end, through real processes: the simulator (`kvpilot simulate --serve`) injects XID 79 on a
GPU; kvpilot (`kvpilot run`) scrapes it, its stuck_gpu detector flags the GPU and its /metrics exports
`kvpilot_finding_active`; a real Prometheus evaluates the generated rule file; a real Alertmanager delivers
`KvpilotGpuDrainRequired` to a webhook receiver in this test."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest
import yaml

from tests.e2e.live_fleet import static_targets
from tests.services.alertmanager import run_alertmanager, run_webhook
from tests.services.ports import free_port, running
from tests.services.prometheus import run_prometheus

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
KVPILOT = str(Path(sys.executable).parent / "kvpilot")
RULES = REPO / "alerts" / "kvpilot-rules.yaml"


def test_xid_79_is_delivered_by_alertmanager(tmp_path):
    sim_port, kv_port, grpc_port = free_port(), free_port(), free_port()
    sim_url, kv_url = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{kv_port}"
    for d in ("sim", "kvpilot", "prom", "am"):
        (tmp_path / d).mkdir()
    sim_args = [KVPILOT, "simulate", "--trace", "synthetic:duration_s=7200,rate=4", "--replicas", "2"]
    sim_log = tmp_path / "sim" / "sim.log"
    with running([*sim_args, "--serve", str(sim_port)], log=sim_log, ready_url=f"{sim_url}/healthz", timeout_s=60):
        targets = static_targets(sim_url)
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
            running(
                [KVPILOT, "run", "--config", str(cfg)],
                log=kv_log,
                ready_url=f"{kv_url}/metrics",
                cwd=kv_log.parent,
                timeout_s=60,
            ),
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
