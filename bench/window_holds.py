"""What kvpilot's replicas above its need were held for, tick by tick, on one backtest case (issue 10, goal 3).

Wraps the planner's `ReplicaPolicy.recommend` during a run of one case (`bench/planner_variants.py`'s names, or
`<trace>[:rate_scale=N,...]`) with the planner `kvpilot backtest` builds, no frontier search, and attributes the
replica-hours asked above the tick's need (the larger of the predictive, reactive, burst-floor and regret-floor
counts) to what held them:

    no capacity        the hold while capacity per replica is unknown (the opening fleet)
    window, unmeasured the scale-down window before its release is measured (no rise yet, or no clean SLO window)
    window, N+1        the release is measured and its N+1 floor (today's load carried with one replica lost) binds
    window, rise       the release is measured and today's load plus its measured rise binds

and, separately, the replica-hours the burst floor asked above the predictive and reactive counts. With
`--ticks A:B` it also prints each tick in that span where the count, reason or any part changed, and with
`--peer NAME` the peer's replica-hours per 5 minutes beside kvpilot's. Throwaway analysis, not a benchmark:

    .venv/bin/python bench/window_holds.py azure2023_conv.csv:rate_scale=6 --ticks 0:1200 --peer dynamo-sla
"""

from __future__ import annotations

import argparse
import collections
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

SPAN_S = 300.0


def attribute(row: dict[str, Any], queue_drain_s: float) -> str | None:
    """What held the tick's count above its need (None: nothing did)."""
    need = max(row["pred"] or 0, row["react"] or 0, row["floor"] or 0, row["regret"] or 0)
    if row["desired"] <= need:
        return None
    if row["reason"] == "no_capacity":
        return "no capacity"
    release = row["release"]
    if release is None:
        return "window, unmeasured"
    load = ((row["arrival"] or 0.0) + (row["queue"] or 0.0) / queue_drain_s) / row["capacity"]
    alone = math.ceil(load - 1e-9)
    return "window, N+1" if alone >= 2 and release == alone + 1 else "window, rise"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", help="a bench/planner_variants.py case, or <trace file>[:rate_scale=N,start_s=S,...]")
    ap.add_argument("--ticks", default="", help="A:B: print the ticks from A to B s where something changed")
    ap.add_argument("--peer", default="", help="a peer policy whose replica-hours per 5 minutes to print beside")
    args = ap.parse_args()
    name, kw = pv.case(args.case)
    base, facts = backtest_planner(None, cold_start=None, slo_ttft=None, max_replicas=None)
    rows: list[dict[str, Any]] = []
    original = pol.ReplicaPolicy.recommend

    def recommend(self: Any, demand: Any, *, now: float) -> Any:
        rec = original(self, demand, now=now)
        rows.append(
            {
                "t": now,
                "current": demand.current_replicas,
                "arrival": demand.arrival_rate,
                "queue": demand.requests_waiting,
                "capacity": demand.capacity_rps,
                "release": demand.release_replicas,
                "regret": demand.regret_floor,
                "desired": rec.desired_replicas,
                "reason": rec.reason,
                "pred": rec.predictive_replicas,
                "react": rec.reactive_replicas,
                "floor": rec.burst_floor_replicas,
            }
        )
        return rec

    pol.ReplicaPolicy.recommend = recommend  # type: ignore[method-assign]
    policies = ("kvpilot", args.peer) if args.peer else ("kvpilot",)
    cfg = bt.BacktestConfig(policies=policies, frontier=False, planner=base, **facts, **kw)
    report = bt.backtest(str(pv.TRACES / name), cfg)
    tick_s = facts["tick_s"]
    drain = base.policy.queue_drain_s
    held: collections.Counter[str] = collections.Counter()
    floor_above = 0.0
    for row in rows:
        what = attribute(row, drain)
        if what is not None:
            need = max(row["pred"] or 0, row["react"] or 0, row["floor"] or 0, row["regret"] or 0)
            held[what] += (row["desired"] - need) * tick_s / 3600.0
        floor_above += max(0, (row["floor"] or 0) - max(row["pred"] or 0, row["react"] or 0)) * tick_s / 3600.0
    if args.ticks:
        lo, hi = (float(x) for x in args.ticks.split(":"))
        last = None
        for row in rows:
            key = (row["desired"], row["reason"], row["pred"], row["react"], row["floor"], row["release"])
            if lo <= row["t"] <= hi and key != last:
                print(
                    f"t={row['t']:7.0f} current={row['current']} desired={row['desired']} {row['reason']:<16} "
                    f"pred={row['pred']} react={row['react']} floor={row['floor']} release={row['release']} "
                    f"arrival={_fmt(row['arrival'])} capacity={_fmt(row['capacity'])}"
                )
            last = key
    if args.peer:
        for policy, result in report.policies.items():
            spans = _per_span(result.times, result.replicas)
            print(f"{policy:<12} replica-h per {SPAN_S:.0f} s: " + " ".join(f"{h:.3f}" for h in spans))
    for policy, result in report.policies.items():
        print(f"{policy}: {100 * result.slo_attainment:.3f} % in SLO, {result.replica_hours:.4f} replica-h")
    asked = sum(r["desired"] for r in rows) * tick_s / 3600.0
    print(f"kvpilot asked {asked:.4f} replica-h; held above the need:")
    for what in ("no capacity", "window, unmeasured", "window, N+1", "window, rise"):
        print(f"  {what:<20} {held[what]:.4f}")
    print(f"  burst floor above predictive and reactive: {floor_above:.4f}")


def _per_span(times: list[float], replicas: list[int]) -> list[float]:
    """Replica-hours per `SPAN_S`, each count held until the next time."""
    spans: collections.Counter[int] = collections.Counter()
    for (t, n), t_next in zip(zip(times, replicas, strict=True), [*times[1:], times[-1]], strict=True):
        if t_next > t:
            spans[int(t // SPAN_S)] += n * (t_next - t) / 3600.0
    return [spans[i] for i in range(max(spans, default=-1) + 1)]


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    main()
