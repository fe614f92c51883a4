"""`kvpilot backtest --pools`: the disaggregated replays of scaler.backtest.disagg on one trace, as one report with
dollars per policy (and its JSON)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scaler.backtest.disagg import (
    COLOCATED_GPU,
    DisaggRun,
    DynamoRule,
    KvpilotPools,
    PoolGpus,
    measure_frontier,
    run_colocated,
    run_disaggregated,
)
from scaler.backtest.pool_frontier import PoolFrontier


def _quiet(_: str) -> None:
    pass


@dataclass
class PoolsReport:
    """`kvpilot backtest --pools`: each policy's replay of one trace, keyed as ``--policies`` names them."""

    trace: str
    requests: int
    duration_s: float
    gpus: PoolGpus
    runs: dict[str, DisaggRun]
    frontier: PoolFrontier | None = None

    def to_json(self) -> dict[str, Any]:
        """{"pools": {"trace", "requests", "duration_s", "gpus": {pool: type}, "price_per_gpu_hour_usd": {type: $},
        "policies": {key: {"name", "slo_attainment", "p99_ttft_s", "replica_hours": {pool: h}, "cost_usd",
        "frontier_ratio"}}, "frontier": [{"slo_attainment", "cost_usd", "replica_hours"}…] or null}}."""
        types = {"prefill": self.gpus.prefill, "decode": self.gpus.decode, "both": COLOCATED_GPU}
        policies = {
            key: {
                "name": r.name,
                "slo_attainment": round(r.slo_attainment, 6),
                "p99_ttft_s": round(r.p99_ttft_s, 4),
                "replica_hours": {k: round(v, 4) for k, v in r.replica_hours.items()},
                "cost_usd": round(r.cost_usd, 2),
                "frontier_ratio": None if r.frontier_ratio is None else round(r.frontier_ratio, 4),
            }
            for key, r in self.runs.items()
        }
        return {
            "pools": {
                "trace": self.trace,
                "requests": self.requests,
                "duration_s": self.duration_s,
                "gpus": types,
                "price_per_gpu_hour_usd": {t: self.gpus.price(t) for t in sorted(set(types.values()))},
                "policies": policies,
                "frontier": None if self.frontier is None else [p.to_json() for p in self.frontier.runs],
            }
        }


def backtest_pools(
    path: str,
    *,
    gpus: PoolGpus | None = None,
    rate_scale: float = 1.0,
    seed: int = 0,
    start_s: float | None = None,
    duration_s: float | None = None,
    colocated: bool = True,
    frontier: bool = False,
    progress: Callable[[str], None] = _quiet,
) -> PoolsReport:
    """kvpilot per pool and Dynamo's SLA rule (ARIMA) on the disaggregated fleet, the co-located kvpilot run unless
    ``colocated`` is off, and the two-pool frontier (minutes to hours) where ``frontier`` is on, with each pooled
    policy's ratio to it. Raises FileNotFoundError or ValueError for a trace that cannot be read."""
    from scaler.backtest.sim import load_trace

    gpus = gpus or PoolGpus()
    trace = load_trace(path, rate_scale=rate_scale, seed=seed, start_s=start_s, duration_s=duration_s)
    runs: dict[str, DisaggRun] = {}
    if colocated:
        progress("replaying co-located kvpilot")
        runs["kvpilot-colocated"] = run_colocated(
            path, rate_scale, start_s=start_s, duration_s=duration_s, seed=seed, gpus=gpus
        )
    progress("replaying kvpilot per pool")
    runs["kvpilot"] = run_disaggregated(trace, KvpilotPools(gpus), gpus)
    progress("replaying Dynamo SLA rule")
    runs["dynamo-sla"] = run_disaggregated(trace, DynamoRule("arima", gpus), gpus)
    front = None
    if frontier:
        front = measure_frontier(trace, gpus=gpus, progress=progress)
        for r in runs.values():
            if "both" not in r.replica_hours:  # the pools' frontier bounds the pooled fleets only
                r.frontier_ratio = front.ratio(r.slo_attainment, r.cost_usd)
    name = str(getattr(trace, "name", path))
    return PoolsReport(name, len(trace.columns), float(trace.duration_s), gpus, runs, front)
