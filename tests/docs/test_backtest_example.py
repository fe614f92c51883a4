"""`kvpilot backtest --plot` draws something a reader can read, and its progress shows every stage.

The figure is drawn from a report built here (a runaway policy beside two that track demand, the frontier under
them), so the test runs in a second; the README's own example is run by tests/docs/test_docs_run.py with
KVPILOT_DOCS_SLOW=1.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib
import pytest

from kvpilot.commands.backtest import StageBars
from scaler.backtest.frontier import Frontier, FrontierPoint
from scaler.backtest.plot import plot, replica_scale, replica_ticks
from scaler.backtest.policies.base import ForecastPoint
from scaler.backtest.result import PolicyResult
from scaler.backtest.run import Report

matplotlib.use("Agg")

CEILING = 100
TIMES = [i * 30.0 for i in range(121)]
DEMAND = [20 + 15 * math.sin(t / 600) for t in TIMES]


def _policy(name: str, replicas: list[int], attainment: float, hours: float) -> PolicyResult:
    r = PolicyResult(name, attainment, hours, 0.1, 1.5, 10, 1000, times=TIMES, replicas=replicas, demand=DEMAND)
    r.ready = replicas
    r.forecasts = [ForecastPoint(t, 150.0, d * 1.1, d * 1.3) for t, d in zip(TIMES, DEMAND, strict=True)]
    return r


def _report(runaway: bool) -> Report:
    report = Report("conv x10", "request", 3600.0, 17.4)
    busy = [min(CEILING, 2 + int(t / 20)) if runaway else 8 for t in TIMES]
    report.policies["reactive"] = _policy("reactive", busy, 0.78, 73.7 if runaway else 8.0)
    report.policies["wva"] = _policy("wva", [int(6 + 4 * math.sin(t / 600)) for t in TIMES], 0.80, 3.4)
    report.policies["kvpilot"] = _policy("kvpilot", [int(7 + 5 * math.sin(t / 600)) for t in TIMES], 1.0, 4.2)
    report.frontier = Frontier((FrontierPoint(0.5, 1.0, 1.0), FrontierPoint(0.999, 2.8, 1.0)))
    return report


def _draw(runaway: bool, folder: Path) -> tuple[Report, Path, Any]:
    """The report, its PNG and the figure, kept open for inspection (plot closes it once saved)."""
    import matplotlib.pyplot as plt

    report = _report(runaway=runaway)
    kept: list[Any] = []
    out = folder / "backtest.png"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plt, "close", kept.append)
        plot(report, out, ceiling=CEILING)
    return report, out, kept[0]


@pytest.fixture(scope="module")
def runaway(tmp_path_factory: pytest.TempPathFactory) -> tuple[Report, Path, Any]:
    return _draw(True, tmp_path_factory.mktemp("runaway"))


@pytest.fixture(scope="module")
def alike(tmp_path_factory: pytest.TempPathFactory) -> tuple[Report, Path, Any]:
    return _draw(False, tmp_path_factory.mktemp("alike"))


def _axes(fig: Any) -> dict[str, Any]:
    demand, replicas, frontier, table = fig.axes
    return {"demand": demand, "replicas": replicas, "frontier": frontier, "table": table}


def test_a_runaway_policy_does_not_flatten_the_others(runaway: tuple[Report, Path, Any]) -> None:
    _, out, fig = runaway
    assert out.stat().st_size > 20_000
    ax = _axes(fig)["replicas"]
    assert ax.get_yscale() == "symlog", "a policy at the ceiling and two at a handful share a log axis"
    low, high = ax.get_ylim()
    assert low == 0
    assert high >= CEILING
    # The policies that track demand keep most of the axis' height: on a linear 0-100 axis they would use 12 %.
    top_of_tracking = ax.transData.transform((0, 12))[1] - ax.transData.transform((0, 0))[1]
    height = ax.transData.transform((0, high))[1] - ax.transData.transform((0, 0))[1]
    assert top_of_tracking / height > 0.4
    ceiling = [line for line in ax.get_lines() if str(line.get_label()).startswith("ceiling")]
    assert len(ceiling) == 1
    assert list(ceiling[0].get_ydata()) == [CEILING, CEILING]
    assert "--max-replicas 100" in str(ceiling[0].get_label())


def test_every_policy_the_frontier_and_a_table_row(runaway: tuple[Report, Path, Any]) -> None:
    report, _, fig = runaway
    axes = _axes(fig)
    labels = [str(line.get_label()) for line in axes["replicas"].get_lines()]
    for name in report.policies:
        assert any(label.startswith(f"{name} (peak") for label in labels), name
    frontier_line = axes["frontier"].get_lines()[0]
    assert list(frontier_line.get_xdata()) == [1.0, 2.8]
    assert list(frontier_line.get_ydata()) == pytest.approx([50.0, 99.9])
    assert len(axes["frontier"].collections) >= len(report.policies), "one point per policy"
    (table,) = axes["table"].tables
    cells = table.get_celld()
    rows = {cells[i, 0].get_text().get_text(): cells[i, 4].get_text().get_text() for i in range(1, 4)}
    expected = {name: f"{report.frontier_ratio(name):.2f}" for name in ("reactive", "wva")}
    assert rows == {**expected, "kvpilot": "-"}, "replica-h over the frontier's; none above its highest attainment"


def test_policies_that_agree_stay_on_a_linear_axis(alike: tuple[Report, Path, Any]) -> None:
    _, _, fig = alike
    ax = _axes(fig)["replicas"]
    assert ax.get_yscale() == "linear"
    assert 12 < ax.get_ylim()[1] < 20, "the ceiling (100) is named, not drawn, when it would flatten the lines"
    assert any("ceiling --max-replicas 100" in t.get_text() for t in ax.texts)


@pytest.mark.parametrize(
    ("peaks", "scale"),
    [
        ([100, 9, 11], "log"),  # one at the ceiling, two tracking demand
        ([8, 9, 11], "linear"),  # all alike
        ([4, 1], "linear"),  # 4x, but a handful of replicas reads fine on a linear axis
        ([30, 10], "linear"),  # 3x exactly is not a runaway
        ([31, 10], "log"),  # just past it is
        ([50], "linear"),  # one policy has nothing to be flattened against
    ],
)
def test_replica_scale(peaks: list[int], scale: str) -> None:
    assert replica_scale(peaks, CEILING) == scale


def test_replica_ticks_are_round_numbers() -> None:
    assert replica_ticks(160) == [0, 1, 2, 5, 10, 20, 50, 100]
    assert replica_ticks(1.5) == [0, 1]


def test_progress_gives_the_trace_and_profile_their_own_bar() -> None:
    from rich.progress import Progress

    with Progress(disable=True) as bar:
        stages = StageBars(bar, ["reactive", "kvpilot", "frontier"])
        loading, reactive, kvpilot, _ = bar.tasks
        assert loading.description == "trace and profile"
        assert loading.total is None, "pulsing: loading reports no fraction"
        assert not reactive.started, "a policy's ETA must not count the loading time"
        stages("reactive", 0.0)
        assert loading.finished
        assert reactive.started
        assert not kvpilot.started
        stages("reactive", 0.5)
        assert reactive.completed == 0.5


def test_a_plot_into_a_missing_folder_is_refused_before_the_replay() -> None:
    from typer.testing import CliRunner

    from kvpilot.cli import app

    out = CliRunner().invoke(app, ["backtest", "--trace", "missing.csv", "--plot", "/nonexistent/backtest.png"])
    assert out.exit_code == 2
    assert out.output.strip() == "error: --plot /nonexistent/backtest.png: folder /nonexistent does not exist"
