"""Inter-token latency per deployment: from the engines' histograms through FleetState to `kvpilot_itl_seconds`,
and the dashboard panel follows `$deployment` (it read vLLM's raw series, the whole fleet, before)."""

from __future__ import annotations

from dataclasses import replace

from api.exposition import snapshot_families
from collector.samples import Histogram, ReplicaSample
from collector.state import FleetState
from dashboards.definitions import DASHBOARDS
from kvpilot.runtime.snapshot import Snapshot

BOUNDS = (0.01, 0.05, 0.1, float("inf"))


def _sample(replica: str, deployment: str, t: float, counts: tuple[float, ...]) -> ReplicaSample:
    base = ReplicaSample(
        namespace="prod", deployment=deployment, replica=replica, node="n0", engine="vllm", model="m", timestamp=t
    )
    return replace(base, itl=Histogram(bounds=BOUNDS, counts=counts, sum=0.0, count=counts[-1]))


def test_itl_quantiles_per_deployment() -> None:
    state = FleetState()
    # chat: 100 new tokens, all within 10 ms; batch: 100 new tokens, all between 50 and 100 ms
    state.observe([_sample("c0", "chat", 0.0, (0, 0, 0, 0)), _sample("b0", "batch", 0.0, (0, 0, 0, 0))], [], now=0.0)
    state.observe(
        [_sample("c0", "chat", 5.0, (100, 100, 100, 100)), _sample("b0", "batch", 5.0, (0, 0, 100, 100))], [], now=5.0
    )
    deployments = state.deployments()
    snap = Snapshot(tick=2, t=5.0, deployments=deployments)
    (family,) = [f for f in snapshot_families(snap) if f.name == "kvpilot_itl_seconds"]
    p50 = {s.labels["deployment"]: s.value for s in family.samples if s.labels["quantile"] == "0.5"}
    assert p50["prod/chat"] <= 0.01
    assert 0.05 <= p50["prod/batch"] <= 0.1


def test_the_panel_follows_the_deployment_variable() -> None:
    (panel,) = [p for p in DASHBOARDS["fleet-overview"]().panels() if p.title.startswith("Inter-token latency")]
    assert all("kvpilot_itl_seconds" in q.expr and "$deployment" in q.expr for q in panel.queries)
