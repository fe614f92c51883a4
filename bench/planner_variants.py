"""kvpilot's planner with one field changed, and constant fleets, on the backtest's traces (issue 10).

Each variant is the configuration `kvpilot backtest` builds from default settings (`backtest_planner`) with the
named `PlannerConfig` / `PolicyConfig` fields replaced; kvpilot alone, no frontier search (the costly part). The
frontier ratio is taken against the frontier points recorded in BENCHMARKS.md "Backtest" (`RECORDED` below: the
searches are minutes to hours; rerun `bench/backtest.py` to refresh them). `--constant N,M` replays fixed fleets
through the same loop and measure instead (the frontier's own `_Scheduled` policy holding one count).

    .venv/bin/python bench/planner_variants.py code4 '{}' '{"policy.headroom": "lean", "feedback_ceiling": 1.25}'
    .venv/bin/python bench/planner_variants.py conv10 '{"upper_weight": 0}'
    .venv/bin/python bench/planner_variants.py code4 --constant 2,3,4
    .venv/bin/python bench/planner_variants.py azure2023_code.csv:rate_scale=2 '{}'   # any shared trace
    .venv/bin/python bench/planner_variants.py servegen_m-large_days1-10:start_s=259200,duration_s=21600 '{}'

A case not named in CASES is `<file in ../shared/traces>[:field=value,...]` with BacktestConfig's `rate_scale`,
`start_s` and `duration_s`; it has no recorded frontier, so its ratio prints as null.

Prints one JSON line per variant: in SLO (%), replica-hours, frontier ratio, forecast MASE, wall seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kvpilot.commands.backtest import backtest_planner  # noqa: E402
from scaler.backtest import run as bt  # noqa: E402
from scaler.backtest import sim  # noqa: E402
from scaler.backtest.frontier import Frontier, FrontierPoint  # noqa: E402
from scaler.planner import PlannerConfig  # noqa: E402

TRACES = REPO.parent / "shared" / "traces"
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "code": ("azure2023_code.csv", {}),
    "code4": ("azure2023_code.csv", {"rate_scale": 4}),
    "conv": ("azure2023_conv.csv", {}),
    "conv10": ("azure2023_conv.csv", {"rate_scale": 10}),
    "mooncake": ("mooncake_synthetic_trace.jsonl", {}),
    "servegen": ("servegen_m-large_days1-10", {"duration_s": 21600}),
}
# (attainment, replica-hours) of the frontiers recorded in BENCHMARKS.md "Backtest" (conv10: the old search's).
RECORDED: dict[str, list[tuple[float, float]]] = {
    "code": [(0.9721, 0.95), (1.0, 1.00)],
    "code4": [
        (0.3440, 0.97),
        (0.5255, 1.17),
        (0.7582, 1.54),
        (0.9710, 2.39),
        (0.9902, 2.66),
        (0.9934, 2.76),
        (0.9999, 3.70),
        (1.0, 4.20),
    ],
    "conv": [(1.0, 0.97)],
    "conv10": [(1.0, 2.89)],
    "servegen": [(0.0028, 6.52), (0.9948, 153.55), (0.9970, 154.85), (1.0, 164.90)],
}


def case(text: str) -> tuple[str, dict[str, Any]]:
    """A named case, or a trace of ../shared/traces with BacktestConfig's replay fields as `:k=v,k=v`."""
    if text in CASES:
        return CASES[text]
    name, _, spec = text.partition(":")
    if not (TRACES / name).exists():
        raise SystemExit(f"{text!r}: neither a case ({', '.join(sorted(CASES))}) nor a file in {TRACES}")
    fields: dict[str, Any] = {}
    for item in filter(None, spec.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in ("rate_scale", "start_s", "duration_s"):
            raise SystemExit(f"{item!r}: use rate_scale=, start_s= or duration_s=")
        fields[key] = float(value)
    return name, fields


def variant(base: PlannerConfig, changes: dict[str, Any]) -> PlannerConfig:
    """``base`` with fields replaced: "policy.x" and "capacity.x" reach the nested configurations."""
    nested: dict[str, dict[str, Any]] = {"policy": {}, "capacity": {}}
    top: dict[str, Any] = {}
    for name, value in changes.items():
        section, _, field = name.rpartition(".")
        if section and section not in nested:
            raise SystemExit(f"unknown section {section!r} in {name!r}: use policy.<field> or capacity.<field>")
        (nested[section] if section else top)[field] = value
    for section, fields in nested.items():
        if fields:
            top[section] = dataclasses.replace(getattr(base, section), **fields)
    return dataclasses.replace(base, **top)


def ratio(case: str, slo: float, hours: float) -> float | None:
    points = RECORDED.get(case)
    if not points:
        return None
    return Frontier(tuple(FrontierPoint(a, h, float("nan")) for a, h in points)).ratio(slo, hours)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", help=f"one of {', '.join(sorted(CASES))}, or <trace file>[:rate_scale=N,start_s=S,...]")
    ap.add_argument("variants", nargs="*", default=["{}"], help="JSON objects of fields to replace")
    ap.add_argument("--constant", help="replay fixed fleets of these sizes instead (comma-separated)")
    args = ap.parse_args()
    name, kw = case(args.case)
    base, facts = backtest_planner(None, cold_start=None, slo_ttft=None, max_replicas=None)
    path = str(TRACES / name)
    if args.constant:
        cfg = bt.BacktestConfig(policies=("kvpilot",), frontier=False, planner=base, **facts, **kw)
        trace = sim.load_trace(path, rate_scale=cfg.rate_scale, seed=0, start_s=None, duration_s=cfg.duration_s)
        fidelity = bt.choose_fidelity(trace, None)
        profile = bt.serving_profile()
        ctx = bt.build_context(
            trace,
            cfg,
            bt.PLANNED_UTILISATION * profile.requests_per_s(bt.mean_mix(trace)),
            bt.kvpilot_planner(cfg, profile),
        )
        for n in (int(x) for x in args.constant.split(",")):
            r = bt.run_policy(trace, bt._Scheduled(ctx, [n] * 100_000), ctx, cfg, fidelity)
            out = {"case": args.case, "constant": n, "slo": round(100 * r.slo_attainment, 2)}
            out |= {
                "rh": round(r.replica_hours, 3),
                "ratio": _round(ratio(args.case, r.slo_attainment, r.replica_hours)),
            }
            print(json.dumps(out), flush=True)
        return
    for text in args.variants:
        changes = json.loads(text)
        cfg = bt.BacktestConfig(policies=("kvpilot",), frontier=False, planner=variant(base, changes), **facts, **kw)
        t0 = time.monotonic()
        report = bt.backtest(path, cfg)
        r = report.policies["kvpilot"]
        out = {"case": args.case, "variant": changes, "slo": round(100 * r.slo_attainment, 2)}
        out |= {"rh": round(r.replica_hours, 3), "ratio": _round(ratio(args.case, r.slo_attainment, r.replica_hours))}
        out |= {"mase": round(report.mase, 3), "wall_s": round(time.monotonic() - t0)}
        print(json.dumps(out), flush=True)


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


if __name__ == "__main__":
    main()
