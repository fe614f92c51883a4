"""Every query of every dashboard panel returns data from a real Prometheus that scrapes the live simulator (its
engine and dcgm-exporter pages, found through its http_sd endpoint) and `kvpilot run` (job "kvpilot") watching it.

Faults go in first through the simulator's control API (an application XID, a drain-class XID 79, a KV-pressure
burst) so the XID, finding and drain panels have series. The few queries that are empty for a stated reason are in
`EXPECTED_EMPTY`, and the test also checks they *are* empty, so an entry cannot outlive its reason.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from dashboards.definitions import DASHBOARDS
from tests.e2e.live_fleet import has_data, live_simulator, poll, static_targets
from tests.services.ports import free_port, running
from tests.services.prometheus import run_prometheus

pytestmark = pytest.mark.e2e

KVPILOT = str(Path(sys.executable).parent / "kvpilot")
SUBSTITUTIONS = {"$deployment": ".*", "$node": ".*"}  # what Grafana sends for "All"

# expr (after substitution) -> why it has no data in this run. Keep this to the minimum.
EXPECTED_EMPTY: dict[str, str] = {}


def panel_queries() -> list[tuple[str, str, str]]:
    """(dashboard, panel title, expr with template variables as Grafana's "All" sends them), for every query."""
    out = []
    for name, build in DASHBOARDS.items():
        for panel in build().panels():
            for q in panel.queries:
                expr = q.expr
                for var, value in SUBSTITUTIONS.items():
                    expr = expr.replace(var, value)
                out.append((name, panel.title, expr))
    return out


def variable_queries() -> list[tuple[str, str]]:
    """(dashboard, the metric a label_values() template variable reads): a variable with no values empties its
    dashboard just as surely as a broken panel."""
    out = []
    for name, build in DASHBOARDS.items():
        for v in build().variables:
            inner = v.query.removeprefix("label_values(").rstrip(")")
            metric, _, label = inner.rpartition(",")
            out.append((name, f"count by ({label.strip()}) ({metric.strip()})"))
    return out


# -- processes ----------------------------------------------------------------------------------------------------


@contextmanager
def kvpilot_run(tmp: Path, targets: list[dict[str, Any]]) -> Iterator[str]:
    port, grpc_port = free_port(), free_port()
    config = {
        "environment": "development",
        "data_dir": str(tmp),
        "collector": {
            "interval_s": 1.0,
            "timeout_s": 0.8,
            "stale_after_s": 5.0,
            "discovery": {"kind": "static", "static_targets": targets},
        },
        # The forecast horizon at the cold start: the live-MASE panel has data once 12 forecasts were scored a
        # horizon after they were made, ~22 s in rather than ~53 s with the default horizon (cold start + tick +
        # half the 60 s rate window); the panel still reads kvpilot's exported MASE, so an empty one still fails.
        "scaler": {"mode": "advisory", "cold_start_s": 10.0, "horizon_s": 10.0},
        "drains": {"breaker_share": 1.0},  # a small test fleet: one flagged node must not trip the breaker
        "api": {"host": "127.0.0.1", "http_port": port, "grpc_port": grpc_port, "anonymous_read": True},
    }
    cfg = tmp / "kvpilot.yaml"
    cfg.write_text(yaml.safe_dump(config))
    url = f"http://127.0.0.1:{port}"
    argv = [KVPILOT, "run", "--config", str(cfg)]
    with running(argv, log=tmp / "kvpilot.log", ready_url=f"{url}/metrics", cwd=tmp, timeout_s=60):
        yield url


def inject(sim_url: str, fault: dict[str, Any]) -> None:
    r = httpx.post(f"{sim_url}/control/faults", json=fault, timeout=5)
    assert r.status_code == 200, f"{fault}: {r.status_code} {r.text}"


# -- the test -----------------------------------------------------------------------------------------------------


def test_every_dashboard_query_returns_data(tmp_path: Path) -> None:
    prom_dir, kv_dir = tmp_path / "prom", tmp_path / "kvpilot"
    prom_dir.mkdir()
    kv_dir.mkdir()
    with live_simulator(replicas=4) as sim_url:
        targets = static_targets(sim_url)
        nodes = sorted({t["node"] for t in targets if t["kind"] == "gpu"})
        assert len(nodes) >= 3, targets
        sim_host = sim_url.removeprefix("http://")
        with (
            kvpilot_run(kv_dir, targets) as kv_url,
            run_prometheus(
                prom_dir,
                scrape_configs=[
                    {"job_name": "kvpilot", "static_configs": [{"targets": [kv_url.removeprefix("http://")]}]},
                    {"job_name": "simulator", "http_sd_configs": [{"url": f"{sim_url}/sd", "refresh_interval": "5s"}]},
                ],
            ) as prom,
        ):
            prom.wait_for('up{job="simulator"} == 1', timeout_s=60)
            prom.wait_for('kvpilot_scrape_up{job="kvpilot"} == 1', timeout_s=60)
            assert any(sim_host in t["scrapeUrl"] for t in prom.targets())
            # an application-class XID (stays exported), a drain-class XID (opens stuck_gpu and a drain request),
            # and a burst of long prompts with long outputs that fills the KV pools (KV pressure, queueing)
            inject(sim_url, {"type": "xid", "node": nodes[0], "gpu": 0, "xid": 13})
            inject(sim_url, {"type": "xid", "node": nodes[1], "gpu": 0, "xid": 79})
            burst = {
                "type": "kv_pressure",
                "count": 80,
                "prompt_tokens": 20000,
                "output_tokens": 2000,
                "duration_s": 20.0,
            }
            inject(sim_url, burst)

            deadline = time.monotonic() + 180
            empty = []
            for dashboard, title, expr in panel_queries():
                if expr in EXPECTED_EMPTY:
                    continue
                if not has_data(poll(prom, expr, deadline)):
                    empty.append(f"{dashboard} / {title}: {expr}")
            for dashboard, expr in variable_queries():
                if not has_data(poll(prom, expr, deadline)):
                    empty.append(f"{dashboard} / template variable: {expr}")
            log = (kv_dir / "kvpilot.log").read_text()[-2000:]
            assert not empty, "queries without data:\n  " + "\n  ".join(empty) + f"\nkvpilot log tail:\n{log}"

            for expr, reason in EXPECTED_EMPTY.items():
                assert not has_data(prom.query(expr)), f"{expr} has data now; remove it from EXPECTED_EMPTY ({reason})"


def test_expected_empty_names_only_real_dashboard_queries() -> None:
    # an entry for a query no panel runs would silence nothing and hide a rename
    exprs = {expr for _, _, expr in panel_queries()}
    assert set(EXPECTED_EMPTY) <= exprs
