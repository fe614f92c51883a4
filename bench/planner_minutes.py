"""When a backtest case's requests fall outside the SLO, and what kvpilot's planner saw before (issue 10).

Replays one case (`bench/planner_variants.py`'s names, or `<trace>[:rate_scale=N,...]`) with the planner
`kvpilot backtest` builds, no frontier search, and prints JSON lines:

    {"decision": ...}  kvpilot's decisions up to --until s: the arrival rate read, forecast point and upper, the
                       model-free horizon spread and the observations it had, capacity a replica, replicas asked
                       and ready
    {"minute": ...}    every minute with a request outside the SLO, per policy: arrived, outside, fewest ready
    {"policy": ...}    each policy's in-SLO share, replica-hours and requests outside

Throwaway analysis, not a benchmark with goals:

    .venv/bin/python bench/planner_minutes.py code --policies kvpilot,reactive --until 900
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import _minutes  # noqa: E402

from scaler import planner as pl  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", help="a bench/planner_variants.py case, or <trace file>[:rate_scale=N,start_s=S,...]")
    ap.add_argument("--policies", default="kvpilot,reactive")
    ap.add_argument("--until", type=float, default=900.0, help="print kvpilot's decisions up to this second")
    args = ap.parse_args()
    decisions: list[dict[str, Any]] = []
    original = pl._DeploymentPlanner.decide

    def decide(self: Any, view: Any, now: float, *a: Any, **k: Any) -> Any:
        d = original(self, view, now, *a, **k)
        if now <= args.until:
            horizon = self.config.horizon_s
            spread = self.forecaster.horizon_spread(horizon)
            decisions.append(
                {
                    "t": now,
                    "rate_now": _round(d.forecast.get("arrival_rate_now")),
                    "point": _round(d.forecast.get("arrival_rate")),
                    "upper": _round(d.forecast.get("arrival_rate_upper")),
                    "spread": _round(spread),
                    "observations": len(self.forecaster.values),
                    "spread_steps": self.forecaster.horizon_steps(horizon),
                    "capacity_rps": _round(d.forecast.get("capacity_rps")),
                    "asked": d.desired_replicas,
                    "ready": d.ready_replicas,
                    "reason": d.reason,
                }
            )
        return d

    pl._DeploymentPlanner.decide = decide  # type: ignore[method-assign]
    _, report = _minutes.replay(args.case, tuple(args.policies.split(",")))
    for row in decisions:
        print(json.dumps({"decision": row}))
    for policy, r in report.policies.items():
        for m in sorted(r.worst_minutes, key=lambda m: m.start_s):
            out = {"policy": policy, "start_s": m.start_s, "arrived": m.arrived, "outside": m.outside}
            print(json.dumps({"minute": out | {"ready": m.ready}}))
    for policy, r in report.policies.items():
        outside = round(r.requests * (1 - r.slo_attainment))
        out = {"name": policy, "case": args.case, "slo": round(100 * r.slo_attainment, 3)}
        print(json.dumps({"policy": out | {"rh": round(r.replica_hours, 3), "outside": outside}}))


def _round(x: Any) -> float | None:
    return None if not isinstance(x, (int, float)) or not math.isfinite(x) else round(float(x), 3)


if __name__ == "__main__":
    main()
