"""A rolling update in `kvpilot demo`, with and without kvpilot's surge, beside the same window without a rollout.

Three demo runs on the same seed (issue 16's question, on the demo's own trace and schedule of faults):

- `surge`: `kvpilot demo --rollout-at T` (the rollout stage surges for each wave);
- `no-surge`: the same with `--no-surge` (the planner's count is published);
- `reference`: no rollout, its TTFT measured over both runs' rollout windows (`DemoConfig.windows`).

Printed: per run the window, in-SLO share and TTFT p99 of the requests that arrived in it, the same for the window
of equal length just before it, the surge's peak and replica-hours above the planner, the run's total replica-hours
(the surge's cost as bench/rollout.py counts it: against the run without it), and the rollout finding.

Run: `KVPILOT_PURE=1 nice .venv/bin/python bench/demo_rollout.py --at 1645 [--wave 1] [--duration 3600] [--seed 0]`
(about three demo runs, ~3.5 min each on one core).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvpilot.demo.replay import DemoConfig, DemoSummary, run_demo  # noqa: E402


def _run(cfg: DemoConfig) -> DemoSummary:
    return asyncio.run(run_demo(cfg, on_update=lambda *_: None))


def _fared(w: dict[str, Any]) -> str:
    return (
        f"{w['start_s']:>6.0f}-{w['end_s']:<6.0f} {100 * w['slo_attainment']:6.2f} % in SLO, "
        f"p99 {w['p99_ttft_s']:7.2f} s, {w['requests']:>6} req"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--at", type=float, required=True, help="rollout start, simulated seconds")
    ap.add_argument("--wave", type=int, default=1)
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--duration", type=float, default=3600.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print the three summaries' rollout parts as JSON")
    args = ap.parse_args()
    base = DemoConfig(speed=0, duration_s=args.duration, seed=args.seed)
    rolled = {"rollout_at_s": args.at, "rollout_wave": args.wave, "rollout_speed": args.speed}
    out: dict[str, dict[str, Any]] = {}
    windows: list[tuple[float, float]] = []
    for name, surge in (("surge", True), ("no-surge", False)):
        started = time.process_time()
        s = _run(DemoConfig(**{**base.__dict__, **rolled, "surge": surge}))
        j = s.to_json()
        out[name] = {
            "rollout": j["rollout"],
            "replica_hours": j["replica_hours"],
            "cpu_s": time.process_time() - started,
        }
        w = j["rollout"]["window"]
        windows.append((w["start_s"], w["end_s"]))
    ref = _run(DemoConfig(**{**base.__dict__, "windows": tuple(windows)})).to_json()
    out["reference"] = {"windows": ref["windows"], "replica_hours": ref["replica_hours"]}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    for (name, r), same in zip(((k, out[k]) for k in ("surge", "no-surge")), ref["windows"], strict=True):
        ro = r["rollout"]
        finding = "none" if ro["finding_after_s"] is None else f"+{ro['finding_after_s']:g}s"
        print(f"{name}:")
        print(f"  during the rollout  {_fared(ro['window'])}{'' if ro['ended'] else ' (not done)'}")
        print(f"  the window before   {_fared(ro['before'])}")
        print(f"  same, no rollout    {_fared(same)}")
        print(
            f"  surge peak +{ro['peak_surge_replicas']}, {ro['surge_replica_hours']:.3f} replica-h above the planner; "
            f"run {r['replica_hours']:.3f} replica-h (no rollout {ref['replica_hours']:.3f}); "
            f"rollout finding {finding}"
        )


if __name__ == "__main__":
    main()
