"""Where kvpilot's replica-hours go, margin by margin, on one backtest case (issue 10).

Wraps the planner's `ReplicaPolicy.recommend` during `bench/planner_variants.py`'s run of a case and, at every
decision, rebuilds the replica count one margin at a time from the same inputs:

    point      ⌈forecast point / profile capacity⌉                    (no margin at all)
    +util      ⌈point / (profile × target utilisation)⌉
    +upper     ⌈upper bound / (profile × target utilisation)⌉
    +feedback  the same with the SLO feedback's multiplier on capacity (= the predictive part)
    +reactive  max(predictive, reactive)
    +window    what the policy asked for (tolerance, scale-down stabilisation, clamps)

Each line's replica-hours are the count held over the tick; `asked` is the last one, `billed` what the simulator
counted (loading replicas included). Throwaway analysis, not a benchmark with goals:

    .venv/bin/python bench/planner_decompose.py conv10 '{}'
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import planner_variants as pv  # noqa: E402

from kvpilot.commands.backtest import backtest_planner  # noqa: E402
from scaler import policy as pol  # noqa: E402
from scaler.backtest import run as bt  # noqa: E402

STAGES = ("point", "+util", "+upper", "+feedback", "+reactive", "+window")


def main() -> None:
    case, changes = sys.argv[1], json.loads(sys.argv[2] if len(sys.argv) > 2 else "{}")
    name, kw = pv.case(case)
    base, facts = backtest_planner(None, cold_start=None, slo_ttft=None, max_replicas=None)
    cfg = pv.variant(base, changes)
    rows: list[dict[str, float]] = []
    original = pol.ReplicaPolicy.recommend

    def recommend(self: pol.ReplicaPolicy, demand: pol.Demand, *, now: float) -> pol.Recommendation:
        rec = original(self, demand, now=now)
        cap = demand.capacity_rps
        if cap is None or demand.forecast_upper_rate is None or demand.forecast_rate is None:
            return rec
        mult = self._multiplier  # type: ignore[attr-defined]
        prof = cap / mult
        u = self.config.target_utilisation
        point, upper = demand.forecast_rate, demand.forecast_upper_rate
        row = {
            "t": now,
            "point": math.ceil(point / prof - 1e-9),
            "+util": math.ceil(point / (prof * u) - 1e-9),
            "+upper": math.ceil(upper / (prof * u) - 1e-9),
            "+feedback": rec.predictive_replicas or 0,
            "+reactive": max(rec.predictive_replicas or 0, rec.reactive_replicas or 0),
            "+window": rec.desired_replicas,
            "mult": mult,
            "u": u,
        }
        rows.append(row)
        return rec

    pol.ReplicaPolicy.recommend = recommend  # type: ignore[method-assign]
    from scaler import planner as pl

    original_decide = pl._DeploymentPlanner.decide

    def decide(self: Any, *a: Any, **k: Any) -> Any:
        self.policy._multiplier = self.feedback.multiplier
        return original_decide(self, *a, **k)

    pl._DeploymentPlanner.decide = decide  # type: ignore[method-assign]
    bcfg = bt.BacktestConfig(policies=("kvpilot",), frontier=False, planner=cfg, **facts, **kw)
    report = bt.backtest(str(pv.TRACES / name), bcfg)
    r = report.policies["kvpilot"]
    # The fluid level decides on its own, longer step: each decision holds until the next one.
    held = [b["t"] - a["t"] for a, b in itertools.pairwise(rows)] + [0.0]
    hours = {s: sum(row[s] * dt for row, dt in zip(rows, held, strict=True)) / 3600 for s in STAGES}
    cuts = sum(dt for row, dt in zip(rows, held, strict=True) if row["mult"] < 1.0) / 3600
    out = {
        "case": case,
        "variant": changes,
        "slo": round(100 * r.slo_attainment, 2),
        "billed": round(r.replica_hours, 3),
    }
    out |= {s: round(h, 3) for s, h in hours.items()} | {"hours_under_cut": round(cuts, 3)}
    out |= {"mean_u": round(sum(row["u"] for row in rows) / max(len(rows), 1), 3)}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
