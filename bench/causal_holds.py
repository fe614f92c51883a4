"""How far a planner without foresight can get on an on/off trace, against the frontier (issue 10, goal 1).

The frontier (`scaler/backtest/frontier.py`) knows every arrival: it holds replicas a cold start before each burst
and few in between. This replays schedules built from the trace's exact arrivals through the backtest's own loop
(`run_policy` with a fixed schedule per 5 s tick, as the frontier's are replayed), so that what a rule *without*
foresight could reach, measuring every arrival perfectly, is set beside it:

    need       each tick's service need: the least rate at which none of the arrivals of any run of 1–6 ticks ending
               there waits past the TTFT SLO, A(d) / (d + S) (`scaler.burst.BurstPeak`'s rate-latency bound)
    hold:H:c   ⌈the highest need of the last H s / (c × capacity)⌉, at least 1: causal, every arrival measured
    ahead:L:c  ⌈the highest need of the next L s / (c × capacity)⌉, at least 1: foresight of L s
    const:N    N replicas throughout

capacity: the replica model's saturated requests/s at the trace's mean mix (the peers' capacity over 0.8). Per spec
one JSON line: attainment, replica-hours, requests outside the SLO by minute. ``--needs`` prints each minute's
arrivals and highest need, and whether it is a record (above every need before it). ``--opening S`` runs the
frontier search (`kvpilot backtest --policies kvpilot` in process, frontier on) with every 60 s schedule it replays
holding kvpilot's own count (its count per tick at its most per window, as the search's seed is) in the windows
before S: the frontier of an oracle that meets the opening as a planner without foresight must. Throwaway analysis,
not a benchmark with goals:

    .venv/bin/python bench/causal_holds.py --trace ../shared/traces/azure2023_code.csv --rate-scale 4 \
        --needs hold:420:0.7 ahead:180:1 const:4
    .venv/bin/python bench/causal_holds.py --trace ../shared/traces/azure2023_code.csv --rate-scale 4 --opening 300
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kvpilot.commands.backtest import backtest_planner  # noqa: E402
from scaler.backtest import replay as rpl  # noqa: E402
from scaler.backtest import run as bt  # noqa: E402
from scaler.backtest import sim  # noqa: E402

RUN_TICKS = 6  # runs of 1..6 ticks: the burst floor's 30 s window at 5 s ticks


def needs(arrivals: np.ndarray, steps: int, tick_s: float, slo_s: float) -> np.ndarray:
    """The service need at each tick (requests/s): the highest A(d) / (d + S) over runs of 1..RUN_TICKS ticks
    ending at it, A(d) the arrivals of the run."""
    counts = np.histogram(arrivals, bins=np.arange(steps + 2) * tick_s)[0]
    cum = np.concatenate([[0], np.cumsum(counts)])
    out = np.zeros(steps + 1)
    for i in range(steps + 1):
        out[i] = max((cum[i] - cum[max(0, i - k)]) / (k * tick_s + slo_s) for k in range(1, RUN_TICKS + 1))
    return out


def schedule(spec: str, need: np.ndarray, tick_s: float, capacity: float) -> list[int]:
    """The count per tick that ``spec`` holds (the module's docstring)."""
    kind, *args = spec.split(":")
    if kind == "const":
        return [int(args[0])] * len(need)
    span_s, share = float(args[0]), float(args[1])
    w = round(span_s / tick_s)
    out = []
    for i in range(len(need)):
        if kind == "hold":
            seg = need[max(0, i - w) : i + 1]
        elif kind == "ahead":
            seg = need[i + 1 : i + 1 + w] if w > 0 else need[i : i + 1]
            seg = seg if len(seg) else need[i : i + 1]
        else:
            raise SystemExit(f"unknown schedule {spec!r}: hold:H:c, ahead:L:c or const:N")
        out.append(max(1, math.ceil(float(seg.max()) / (share * capacity) - 1e-9)))
    return out


def print_needs(arrivals: np.ndarray, need: np.ndarray, duration_s: float) -> None:
    record = 0.0
    for m in range(math.ceil(duration_s / 60.0)):
        top = float(need[m * 12 : m * 12 + 13].max())
        arrived = int(((arrivals >= 60.0 * m) & (arrivals < 60.0 * (m + 1))).sum())
        mark = "record" if top > record * 1.0001 and top > 0 else ""
        print(f"min {m:2d}  arrived {arrived:5d}  need {top:6.1f} req/s  {mark:6s}  (highest before {record:6.1f})")
        record = max(record, top)


def opening_frontier(path: str, cfg: bt.BacktestConfig, open_s: float) -> dict[str, Any]:
    """The backtest with the frontier searched over schedules that hold kvpilot's own count before ``open_s``."""
    forced: dict[int, int] = {}
    measure = bt.measure_frontier

    def measure_forced(trace: Any, ctx: Any, c: Any, fidelity: str, progress: Any = None, seeds: Any = None) -> Any:
        per_tick = (seeds or {})["kvpilot"]
        for w in range(int(open_s // 60.0)):
            forced[w] = max(n for i, n in enumerate(per_tick) if 60.0 * w <= i * bt.TICK_S < 60.0 * (w + 1))
        return measure(trace, ctx, c, fidelity, progress, seeds)

    def force(self: rpl.Replayer, held: Any) -> Any:
        return held if self.window_s != 60.0 else [forced.get(w, n) for w, n in enumerate(held)]

    run, trial, adopt = rpl.Replayer.run, rpl.Replayer.trial, rpl.Replayer.adopt
    rpl.Replayer.run = lambda self, held, base=None, start=None, save=True: run(  # type: ignore[method-assign]
        self, force(self, held), base, start, save
    )
    rpl.Replayer.trial = lambda self, base, held, start, until: trial(  # type: ignore[method-assign]
        self, base, force(self, held), start, until
    )
    rpl.Replayer.adopt = lambda self, base, held, local: adopt(  # type: ignore[method-assign]
        self, base, force(self, held), local
    )
    bt.measure_frontier = measure_forced  # type: ignore[assignment]
    report: dict[str, Any] = bt.backtest(path, cfg).to_json()
    report["opening_held"] = {str(w): n for w, n in sorted(forced.items())}
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", required=True)
    ap.add_argument("--rate-scale", type=float, default=1.0)
    ap.add_argument("--needs", action="store_true", help="print each minute's arrivals and highest need")
    ap.add_argument("--opening", type=float, help="the frontier with kvpilot's opening held before this second")
    ap.add_argument("specs", nargs="*", help="hold:H:c, ahead:L:c, const:N")
    a = ap.parse_args()
    planner, facts = backtest_planner(None, cold_start=None, slo_ttft=None, max_replicas=None)
    cfg = bt.BacktestConfig(
        policies=("kvpilot",), rate_scale=a.rate_scale, planner=planner, frontier=a.opening is not None, **facts
    )
    if a.opening is not None:
        print(json.dumps(opening_frontier(a.trace, cfg, a.opening)))
        return
    trace = sim.load_trace(a.trace, rate_scale=a.rate_scale, seed=cfg.seed)
    fidelity = bt.choose_fidelity(trace, cfg.fidelity)
    if fidelity != "request":
        raise SystemExit("the request level only: the needs are read from each request's arrival")
    ctx = bt.context_for(trace, cfg)
    capacity = ctx.capacity_rps / bt.PLANNED_UTILISATION
    steps = max(1, math.ceil(trace.duration_s / bt.TICK_S))
    arrivals = np.sort(np.asarray(trace.columns.arrival_s, dtype=float))
    need = needs(arrivals, steps, bt.TICK_S, cfg.slo_ttft_s)
    if a.needs:
        print_needs(arrivals, need, float(trace.duration_s))
    worst = bt.worst_minutes
    setattr(bt, "worst_minutes", lambda *x, **kw: worst(*x, **kw | {"keep": 10**9}))  # noqa: B010 (every minute)
    for spec in a.specs:
        r = bt.run_policy(
            trace, bt._Scheduled(ctx, schedule(spec, need, bt.TICK_S, capacity), bt.TICK_S), ctx, cfg, fidelity
        )
        outside = {int(m.start_s // 60): m.outside for m in sorted(r.worst_minutes, key=lambda m: m.start_s)}
        print(
            json.dumps(
                {
                    "spec": spec,
                    "slo_attainment": round(r.slo_attainment, 6),
                    "replica_hours": round(r.replica_hours, 4),
                    "outside": sum(outside.values()),
                    "outside_by_minute": outside,
                    "capacity_rps": round(capacity, 3),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
