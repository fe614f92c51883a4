"""One PNG of a backtest: demand and forecasts, every policy's replicas on one readable scale with the ceiling
marked, each policy against the cost/SLO frontier, and the numbers beside them in a small table."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from scaler.backtest.run import Report

# A policy whose peak is this many times the next busiest one's would flatten the others on a linear axis.
RUNAWAY_FACTOR = 3.0


def replica_scale(peaks: list[int], ceiling: int | None) -> str:
    """ "log" (symmetric: 0 stays drawable) when one policy runs away from the rest, else "linear"."""
    ordered = sorted(peaks)
    if len(ordered) > 1 and ordered[-1] >= 10 and ordered[-1] > RUNAWAY_FACTOR * max(ordered[-2], 1):
        return "log"
    return "linear"


def replica_ticks(top: float) -> list[int]:
    """0, 1, 2, 5, 10, 20, 50, … up to ``top``: round numbers a reader finds on a log axis."""
    ticks = [0]
    decade = 1
    while decade <= top:
        ticks += [m * decade for m in (1, 2, 5) if m * decade <= top]
        decade *= 10
    return ticks


def plot(report: Report, path: str | Path, *, ceiling: int | None = None) -> None:
    """Write the backtest's figure to ``path``; ``ceiling`` is the replica cap every policy ran under."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {name: f"C{i % 10}" for i, name in enumerate(report.policies)}
    fig = plt.figure(figsize=(16, 9))
    grid = fig.add_gridspec(2, 2, width_ratios=(2.1, 1.0), height_ratios=(1.0, 1.25), hspace=0.28, wspace=0.18)
    demand = fig.add_subplot(grid[0, 0])
    replicas = fig.add_subplot(grid[1, 0], sharex=demand)
    frontier = fig.add_subplot(grid[0, 1])
    table = fig.add_subplot(grid[1, 1])
    fig.suptitle(
        f"{report.trace}: {report.duration_s / 3600:.2f} h, {report.fidelity} level, "
        f"capacity {report.capacity_rps:.3g} req/s per replica",
        fontsize=12,
    )
    _demand(demand, report, colours)
    _replicas(replicas, report, colours, ceiling)
    _frontier(frontier, report, colours)
    _table(table, report, colours)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def _demand(ax: Any, report: Report, colours: dict[str, str]) -> None:
    first = next(iter(report.policies.values()))
    ax.plot([t / 3600.0 for t in first.times], first.demand, color="black", lw=1.0, label="arrival rate (60 s)")
    for name, r in report.policies.items():
        if r.forecasts:
            xs = [(f.t + f.horizon_s) / 3600.0 for f in r.forecasts]
            ax.plot(xs, [f.point for f in r.forecasts], lw=0.8, color=colours[name], label=f"{name} forecast")
            ax.fill_between(
                xs, [f.point for f in r.forecasts], [f.upper for f in r.forecasts], color=colours[name], alpha=0.15
            )
    ax.set_ylabel("requests/s")
    ax.set_ylim(bottom=0)
    ax.set_title("demand, and each forecast at its horizon", fontsize=10, loc="left")
    ax.legend(loc="upper left", fontsize=8)
    ax.tick_params(labelbottom=False)


def _replicas(ax: Any, report: Report, colours: dict[str, str], ceiling: int | None) -> None:
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    peaks = [max(r.replicas, default=0) for r in report.policies.values()]
    for name, r in report.policies.items():
        ax.step(
            [t / 3600.0 for t in r.times],
            r.replicas,
            where="post",
            lw=1.1,
            color=colours[name],
            label=f"{name} (peak {max(r.replicas, default=0)})",
        )
    scale = replica_scale(peaks, ceiling)
    top = max(peaks, default=1)
    if ceiling is not None:
        shown = scale == "log" or ceiling <= 2 * top
        if shown:
            ax.axhline(ceiling, color="red", ls="--", lw=1.0, label=f"ceiling (--max-replicas {ceiling})")
            top = max(top, ceiling)
        else:
            ax.text(
                0.99, 0.97, f"ceiling --max-replicas {ceiling}: above the axis", transform=ax.transAxes,
                ha="right", va="top", fontsize=8, color="red",
            )  # fmt: skip
    if scale == "log":
        ax.set_yscale("symlog", linthresh=1.0, linscale=0.5)
        ax.set_ylim(0, top * 1.6)
        ax.yaxis.set_major_locator(FixedLocator(replica_ticks(top * 1.6)))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.set_title("replicas held, loading included (log scale: one policy runs away)", fontsize=10, loc="left")
    else:
        ax.set_ylim(0, max(top, 1) * 1.15 + 0.5)
        ax.set_title("replicas held, loading included", fontsize=10, loc="left")
    ax.set_ylabel("replicas")
    ax.set_xlabel("hours since trace start")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)


def _frontier(ax: Any, report: Report, colours: dict[str, str]) -> None:
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    xs = [r.replica_hours for r in report.policies.values()]
    ys = [100 * r.slo_attainment for r in report.policies.values()]
    if report.frontier is not None and report.frontier.points:
        fx = [p.replica_hours for p in report.frontier.points]
        fy = [100 * p.slo_attainment for p in report.frontier.points]
        ax.plot(fx, fy, color="black", lw=1.2, marker=".")
        ax.fill_betweenx(fy, 0, fx, color="grey", alpha=0.2)
        xs += fx
        ys += fy
    for name, r in report.policies.items():
        ax.scatter(r.replica_hours, 100 * r.slo_attainment, color=colours[name], s=40, zorder=3)
        ax.annotate(
            name, (r.replica_hours, 100 * r.slo_attainment), xytext=(4, 4), textcoords="offset points", fontsize=8
        )
    if xs and max(xs) > 10 * max(min(xs), 1e-9):
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
    else:
        ax.set_xlim(0, max(xs, default=1.0) * 1.15)
    low = min(ys, default=0.0)
    ax.set_ylim(max(0.0, low - max(1.0, 0.1 * (100 - low))), 100.5)
    ax.set_xlabel("replica-hours")
    ax.set_ylabel("requests in SLO (%)")
    title = "cost against SLO attainment"
    if report.frontier is not None:
        title += "\nblack: the frontier, fewest replica-h for each attainment;\ngrey: where no scaler can be"
    ax.set_title(title, fontsize=9, loc="left")
    ax.grid(True, alpha=0.3)


def _table(ax: Any, report: Report, colours: dict[str, str]) -> None:
    ax.axis("off")
    header = ["policy", "in SLO", "p99 TTFT", "replica-h", "x frontier"]
    rows = []
    for name, r in report.policies.items():
        ratio = report.frontier_ratio(name)
        p99 = r.p99_ttft_s
        rows.append(
            [
                name,
                f"{100 * r.slo_attainment:.2f} %",
                f"{p99:.2f} s" if math.isfinite(p99) else "-",
                f"{r.replica_hours:.1f}",
                "-" if ratio is None else f"{ratio:.2f}",
            ]
        )
    cells = ax.table(cellText=rows, colLabels=header, loc="upper center", cellLoc="right", colLoc="right")
    cells.auto_set_font_size(False)
    cells.set_fontsize(9)
    cells.scale(1.0, 1.5)
    for i, name in enumerate(report.policies, start=1):
        cells[i, 0].get_text().set_color(colours[name])
        cells[i, 0].get_text().set_fontweight("bold")
    note = "x frontier: replica-h over the fewest any scaler needs at the same attainment"
    if report.frontier is None:
        note = "no frontier (--no-frontier)"
    ax.set_title(note, fontsize=8, loc="left")
