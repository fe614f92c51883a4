"""The service fed by a real Prometheus (Debian's, on loopback) that scrapes the simulator: with
``discovery.kind: promql`` the query API replaces the collect stage, and the same decisions come out."""

from __future__ import annotations

import pytest

from kvpilot.runtime.sources import EmbeddedSimulator, build
from kvpilot.runtime.wiring import build_service
from kvpilot.settings import load_settings
from tests.helpers.poll import until
from tests.services.prometheus import run_prometheus

pytestmark = pytest.mark.integration


async def test_promql_source_drives_the_loop(tmp_path) -> None:
    with EmbeddedSimulator(2) as sim:
        # The simulator serves every replica from one port: give each its own `instance`, as pods have in a cluster.
        relabel = [{"source_labels": ["__address__", "__metrics_path__"], "separator": "", "target_label": "instance"}]
        scrape = [
            {
                "job_name": "sim",
                "http_sd_configs": [{"url": f"{sim.url}/sd", "refresh_interval": "1s"}],
                "relabel_configs": relabel,
            }
        ]
        with run_prometheus(tmp_path, scrape_configs=scrape) as prom:
            prom.wait_for('vllm:num_requests_running{pod="llama-0001"}', timeout_s=60)
            settings = load_settings(
                store={"database_url": f"sqlite:///{tmp_path / 'k.db'}"},
                collector={"interval_s": 1, "timeout_s": 0.5, "discovery": {"kind": "promql", "promql_url": prom.url}},
            )
            with build(settings) as sources:
                service, restored = build_service(settings, sources)
                await service.start(restored)
                try:
                    await until(lambda: service.loop.tick_count >= 3, what="three ticks", timeout_s=20)
                    snap = service.snapshot()
                    assert snap is not None
                    assert set(snap.deployments) == {"inference/llama"}
                    assert {r.sample.replica for r in snap.replicas} == {"llama-0000", "llama-0001"}
                    assert "inference/llama" in snap.decisions
                    assert {t.pod for t in snap.targets if t.kind == "engine"} == {"llama-0000", "llama-0001"}
                finally:
                    service.stop.set()
                    await service.wait()
