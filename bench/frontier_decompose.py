"""Where kvpilot's replica-hours go against the frontier, cause by cause, on one backtest case (issue 10).

Runs `kvpilot backtest --policies kvpilot` with the frontier (the same code path, in process) and, at every decision
of kvpilot's planner, rebuilds its replica count one stage at a time from the inputs the policy read:

    point       ⌈point forecast / measured capacity⌉ (the replica model's saturated requests/s at the trace's mean
                mix: what one replica really serves)
    capacity    ⌈point / the capacity kvpilot believed⌉           (belief below measured capacity)
    util        ⌈point / (belief × target utilisation)⌉           (the 0.8 margin)
    upper       the predictive need (upper bound / measured tail)  (the forecast's margin)
    reactive    max(predictive, reactive) + stuck                  (today's queue and arrivals)
    burst_floor the burst floor (the recent burst's service need, held `burst_hold_s`)
    regret_floor the release regret's floor
    hold        what the policy decided (tolerance, the scale-down window and its release rule, clamps), also
                split by the decision's reason

and sets it against the frontier's schedule at kvpilot's own attainment (the mixture of the two envelope schedules
that bracket it, as `Frontier.ratio` interpolates). Per tick, kvpilot's count less the frontier's is the sum of
(point − frontier) and each stage's increment; summed over ticks in replica-hours. The first term is split by sign:
above the frontier (the forecast's point need exceeds what the oracle held: a late scale-down of the point, or a
scale-up early against a cold start) or below (bursts and backlog the oracle bought and the point did not see).
Held counts are compared (what each asked, loading replicas included), so the table's total differs from the billed
replica-hours by what scaled in and out between ticks. With --span S, the same split per S seconds of the trace,
beside the requests that arrived, kvpilot's outside the SLO and the frontier's (its two bracketing schedules replayed
again, mixed as the ratio mixes them). Throwaway analysis, not a benchmark with goals:

    .venv/bin/python bench/frontier_decompose.py --trace ../shared/traces/azure2023_conv.csv --rate-scale 10 \
        [--start S --duration D] [--span 300] [--out rows.json] [--report backtest.json]
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kvpilot.commands.backtest import backtest_planner  # noqa: E402
from scaler import policy as pol  # noqa: E402
from scaler.backtest import frontier as fr  # noqa: E402
from scaler.backtest import result  # noqa: E402
from scaler.backtest import run as bt  # noqa: E402

CAUSES = (
    "point>frontier",
    "point<frontier",
    "capacity",
    "util",
    "upper",
    "reactive",
    "burst_floor",
    "regret_floor",
    "hold",
    "rest",
)
STAGES = 8  # point, capacity, util, upper, reactive, burst floor, regret floor, decided


class _Flat:
    """A recorded frontier figure as a schedule holding its mean count throughout (no search run): only the total
    against it is meaningful, the per-tick split is then kvpilot's stages alone."""

    def __init__(self, attainment: float, hours: float, duration_s: float) -> None:
        self.attainment, self.replica_s, self.schedule = attainment, hours * 3600.0, "recorded"
        self.window_s = duration_s + 1.0
        self.held = (hours * 3600.0 / max(duration_s, 1.0),)


def ceil(x: float) -> int:
    return max(0, math.ceil(x - 1e-9))


def stages(demand: pol.Demand, rec: pol.Recommendation, measured: float, u: float) -> dict[str, Any]:
    """kvpilot's count at one decision, rebuilt stage by stage (see the module's docstring)."""
    cap = demand.capacity_rps
    row: dict[str, Any] = {"reason": rec.reason, "desired": rec.desired_replicas}
    if cap is None or not math.isfinite(cap) or cap <= 0:
        return row | {"n": [rec.desired_replicas] * STAGES}
    point = demand.forecast_rate if demand.forecast_rate is not None else (demand.arrival_rate or 0.0)
    n0 = ceil(point / measured)
    n1 = ceil(point / cap)
    n2 = ceil(point / (cap * u))
    n3 = rec.predictive_replicas if rec.predictive_replicas is not None else n2
    n4 = max(n3, rec.reactive_replicas or 0) + demand.stuck_replicas
    n5 = max(n4, rec.burst_floor_replicas or 0)
    n6 = n5 if demand.regret_floor is None else max(n5, demand.regret_floor + demand.stuck_replicas)
    n7 = rec.desired_replicas
    return row | {"n": [n0, n1, n2, n3, n4, n5, n6, n7], "cap": cap, "point": point}


def _minutes_outside(result: Any) -> dict[float, int]:
    """Requests outside the SLO per minute of a replay (its `worst_minutes`, kept whole: see `main`)."""
    return {m.start_s: m.outside for m in result.worst_minutes}


def span_rows(
    span_s: float, rows: list[dict[str, Any]], arrivals: list[float], outside: dict[str, dict[float, int]], share: float
) -> list[dict[str, Any]]:
    """The per-tick split summed per ``span_s`` of the trace (replica-hours), with the requests that arrived in
    each span and those outside the SLO: kvpilot's, and the frontier's bracketing schedules' mixed by ``share``."""
    spans: dict[int, dict[str, Any]] = {}

    def span(t: float) -> dict[str, Any]:
        k = int(t // span_s)
        return spans.setdefault(
            k,
            {"start_s": k * span_s, "arrived": 0, "kvpilot_h": 0.0, "frontier_h": 0.0}
            | dict.fromkeys(CAUSES, 0.0)
            | {"hold_by_reason": {}, "outside": dict.fromkeys(outside, 0)},
        )

    for a in arrivals:
        span(a)["arrived"] += 1
    for name, minutes in outside.items():
        for start, n in minutes.items():
            span(start)["outside"][name] += n
    for r in rows:
        s = span(r["t"])
        dt = r["dt"] / 3600.0
        s["kvpilot_h"] += r["kvpilot"] * dt
        s["frontier_h"] += r["frontier"] * dt
        for cause, v in r["split"].items():
            s[cause] += v * dt
        by = s["hold_by_reason"]
        by[r["reason"]] = by.get(r["reason"], 0.0) + r["split"].get("hold", 0.0) * dt
    out = []
    for _, s in sorted(spans.items()):
        o = s.pop("outside")
        s["outside_kvpilot"] = o.get("kvpilot", 0)
        if "lo" in o:
            s["outside_frontier"] = round((1 - share) * o["lo"] + share * o.get("hi", 0), 1)
        out.append(
            {k: round(v, 4) if isinstance(v, float) else v for k, v in s.items() if k != "hold_by_reason"}
            | {"hold_by_reason": {k: round(v, 4) for k, v in sorted(s["hold_by_reason"].items()) if abs(v) > 1e-9}}
        )
    return out


def print_spans(spans: list[dict[str, Any]]) -> None:
    """The per-span split as a table on stderr (replica-hours; the JSON on stdout stays whole)."""
    cols = ("kvpilot_h", "frontier_h", *CAUSES)
    print(
        f"{'span':>6s} {'arrived':>7s} {'out kv':>6s} {'out fr':>6s} " + " ".join(f"{c[:9]:>9s}" for c in cols),
        file=sys.stderr,
    )
    for s in spans:
        print(
            f"{s['start_s'] / 60:5.0f}m {s['arrived']:7d} {s['outside_kvpilot']:6d} "
            f"{s.get('outside_frontier', 0):6.0f} "
            + " ".join(f"{s[c]:9.3f}" for c in cols)
            + "  "
            + ", ".join(f"{k} {v:+.3f}" for k, v in s["hold_by_reason"].items()),
            file=sys.stderr,
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", required=True)
    ap.add_argument("--rate-scale", type=float, default=1.0)
    ap.add_argument("--start", type=float)
    ap.add_argument("--duration", type=float)
    ap.add_argument("--out")
    ap.add_argument(
        "--frontier-hours",
        type=float,
        help="no frontier search: the stages alone, against this recorded frontier figure at kvpilot's attainment",
    )
    ap.add_argument("--span", type=float, help="also split per this many seconds of the trace")
    ap.add_argument(
        "--report",
        help="also write the backtest's own JSON here, as `kvpilot backtest --policies kvpilot --json` prints it "
        "(the same run: its frontier, frontier_points and ratio; with --span its worst_minutes keep every minute)",
    )
    a = ap.parse_args()
    planner, facts = backtest_planner(None, cold_start=None, slo_ttft=None, max_replicas=None)
    cfg = bt.BacktestConfig(
        policies=("kvpilot",),
        rate_scale=a.rate_scale,
        start_s=a.start,
        duration_s=a.duration,
        planner=planner,
        frontier=a.frontier_hours is None,
        **facts,
    )
    measured: list[float] = []
    decisions: list[tuple[float, dict[str, Any]]] = []
    original = pol.ReplicaPolicy.recommend

    def recommend(self: pol.ReplicaPolicy, demand: pol.Demand, *, now: float) -> pol.Recommendation:
        rec = original(self, demand, now=now)
        decisions.append((now, stages(demand, rec, measured[0], self.config.target_utilisation)))
        return rec

    original_context = bt.build_context
    ran: dict[str, Any] = {}

    def build_context(trace: Any, c: Any, capacity_rps: float, p: Any = None) -> Any:
        measured.append(capacity_rps / bt.PLANNED_UTILISATION)
        ran["trace"], ran["ctx"] = trace, original_context(trace, c, capacity_rps, p)
        return ran["ctx"]

    original_worst = result.worst_minutes

    def every_minute(*args: Any, **kw: Any) -> Any:  # every minute with a request outside, not only the worst five
        return original_worst(*args, **kw | {"keep": 10**9}) if a.span else original_worst(*args, **kw)

    envelopes: list[list[Any]] = []
    original_envelope = fr.envelope_of

    def envelope_of(found: Any) -> list[Any]:
        out = original_envelope(found)
        envelopes.append(out)
        return out

    pol.ReplicaPolicy.recommend = recommend  # type: ignore[method-assign]
    bt.build_context = build_context  # type: ignore[assignment]
    fr.envelope_of = envelope_of  # type: ignore[assignment]
    setattr(bt, "worst_minutes", every_minute)  # noqa: B010 (run.py imported it by name)
    report = bt.backtest(a.trace, cfg)
    if a.report:
        Path(a.report).write_text(json.dumps(report.to_json()))
    k = report.policies["kvpilot"]
    att = k.slo_attainment
    env = envelopes[-1] if envelopes else [_Flat(att, a.frontier_hours or 0.0, k.times[-1])]
    lo = max((f for f in env if f.attainment <= att), key=lambda f: f.attainment, default=env[0])
    hi = min((f for f in env if f.attainment >= att), key=lambda f: f.attainment, default=env[-1])
    share = 0.0 if hi.attainment <= lo.attainment else (att - lo.attainment) / (hi.attainment - lo.attainment)

    def held(f: Any, t: float) -> float:
        return float(f.held[min(int(t // f.window_s), len(f.held) - 1)])

    times, desired = k.times, k.desired
    dtimes = [t for t, _ in decisions]
    totals = dict.fromkeys(CAUSES, 0.0)
    by_reason: dict[str, float] = {}
    rows = []
    for i in range(1, len(times)):
        t0, dt = times[i - 1], times[i] - times[i - 1]
        frontier_n = (1 - share) * held(lo, t0) + share * held(hi, t0)
        kv = desired[i - 1]
        j = bisect.bisect_right(dtimes, t0) - 1
        d = decisions[j][1] if j >= 0 else None
        if d is None or "cap" not in d:  # before the first decision, or no capacity known: nothing to split
            totals["rest"] += (kv - frontier_n) * dt
            continue
        n = d["n"]
        gap0 = n[0] - frontier_n
        split = {"point>frontier" if gap0 > 0 else "point<frontier": gap0}
        for name, x, y in zip(CAUSES[2:9], n[:-1], n[1:], strict=True):
            split[name] = y - x
        split["rest"] = kv - n[STAGES - 1]
        for name, v in split.items():
            totals[name] += v * dt
        extra = kv - frontier_n
        by_reason[d["reason"]] = by_reason.get(d["reason"], 0.0) + extra * dt
        rows.append(
            {"t": t0, "dt": dt, "kvpilot": kv, "frontier": round(frontier_n, 3), "n": n, "reason": d["reason"]}
            | {"split": split}
        )
    hours = {c: round(v / 3600.0, 4) for c, v in totals.items()}
    bound = report.frontier.replica_hours_at(att) if report.frontier is not None else a.frontier_hours
    out: dict[str, Any] = {
        "case": {"trace": a.trace, "rate_scale": a.rate_scale, "start": a.start, "duration": a.duration},
        "kvpilot": {"slo_attainment": att, "replica_hours": k.replica_hours, "held_hours": 0.0},
        "frontier_ratio": report.frontier_ratio("kvpilot") if report.frontier is not None else None,
        "frontier_at_attainment": bound,
        "bracket": [
            {"attainment": f.attainment, "replica_hours": f.replica_s / 3600.0, "schedule": f.schedule}
            for f in (lo, hi)
        ],
        "share_hi": share,
        "envelope": [
            {"attainment": f.attainment, "replica_hours": f.replica_s / 3600.0, "schedule": f.schedule} for f in env
        ],
        "measured_capacity_rps": measured[0],
        "extra_held_hours_by_cause": hours,
        "extra_held_hours_total": round(sum(totals.values()) / 3600.0, 4),
        "extra_held_hours_by_reason": {r: round(v / 3600.0, 4) for r, v in sorted(by_reason.items())},
    }
    out["kvpilot"]["held_hours"] = round(
        sum(desired[i - 1] * (times[i] - times[i - 1]) for i in range(1, len(times))) / 3600.0, 4
    )
    spans: list[dict[str, Any]] = []
    if a.span:
        outside = {"kvpilot": _minutes_outside(k)}
        if envelopes:  # the bracketing schedules replayed once more, for their misses per minute
            trace, ctx = ran["trace"], ran["ctx"]
            fidelity = report.fidelity
            for label, f in (("lo", lo), ("hi", hi)):
                r = bt.run_policy(trace, bt._Scheduled(ctx, [int(x) for x in f.held], f.window_s), ctx, cfg, fidelity)
                out["bracket"][0 if label == "lo" else 1]["replayed"] = [r.slo_attainment, r.replica_hours]
                outside[label] = _minutes_outside(r)
        columns = getattr(ran.get("trace"), "columns", None)
        arrivals = [] if columns is None else [float(x) for x in columns.arrival_s]
        spans = span_rows(a.span, rows, arrivals, outside, share)
        print_spans(spans)
    print(json.dumps(out, indent=1))
    if a.out:
        brackets = [{"window_s": f.window_s, "held": [float(x) for x in f.held]} for f in (lo, hi)]
        Path(a.out).write_text(json.dumps({"summary": out, "rows": rows, "spans": spans, "bracket_held": brackets}))


if __name__ == "__main__":
    main()
