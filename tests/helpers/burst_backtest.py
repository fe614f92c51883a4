"""One backtest of a short synthetic burst, shared by the tests that read its report and its frontier's progress
(tests/unit/scaler/test_backtest_run.py, tests/unit/kvpilot/commands/test_backtest_progress.py): the frontier search
is most of its cost, and recording the progress changes nothing in the report."""

from __future__ import annotations

from dataclasses import dataclass, field

from scaler.backtest.run import BacktestConfig, Report, backtest

# 10 minutes, a 4× burst over its second half (the seeded start falls at 301 s): enough for every policy to scale
# (reactive 1 -> 42 replicas, kvpilot 1 -> 5, wva 1 -> 2) and for the search to descend at three prices, small
# enough for a unit test. The frontier search grows with the trace: 20 minutes took twice as long and checked the
# same properties.
BURST = (
    "synthetic:duration_s=600,rate=3,amplitude=0,bursts=1,burst_factor=4,burst_s=300,prompt_mean=4000,output_mean=100"
)
POLICIES = ("reactive", "kvpilot", "wva")


@dataclass
class BurstBacktest:
    report: Report | None = None
    frontier_progress: list[float] = field(default_factory=list)  # each share done the search reported, in order


def run() -> BurstBacktest:
    out = BurstBacktest()

    def progress(name: str, done: float) -> None:
        if name == "frontier":
            out.frontier_progress.append(done)

    out.report = backtest(BURST, BacktestConfig(policies=POLICIES), progress=progress)
    return out
