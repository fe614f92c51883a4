"""`kvpilot backtest`: replay a trace through the simulator under several scaling policies and compare them."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from scaler.backtest.run import BacktestConfig, Report


def command(
    trace: Annotated[str, typer.Option("--trace", help="Azure .csv, Mooncake .jsonl or ServeGen directory")],
    cold_start: Annotated[float, typer.Option("--cold-start", help="seconds from replica start to ready")] = 120.0,
    slo_ttft: Annotated[float, typer.Option("--slo-ttft", help="TTFT SLO in seconds")] = 2.0,
    policies: Annotated[
        str, typer.Option("--policies", help="comma-separated: reactive,hpa-util,kpa,wva,dynamo,kvpilot,oracle")
    ] = "reactive,kvpilot,oracle",
    as_json: Annotated[bool, typer.Option("--json", help="print the machine-readable result only")] = False,
    plot: Annotated[str | None, typer.Option("--plot", help="write demand, forecast and replicas to this PNG")] = None,
    fidelity: Annotated[str | None, typer.Option("--fidelity", help="request | fluid (default: by trace size)")] = None,
    max_replicas: Annotated[int | None, typer.Option("--max-replicas", min=1)] = None,
    rate_scale: Annotated[float, typer.Option("--rate-scale", help="multiply the trace's arrival rate")] = 1.0,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    start: Annotated[float | None, typer.Option("--start", help="skip this many seconds of the trace")] = None,
    duration: Annotated[float | None, typer.Option("--duration", help="replay only this many seconds")] = None,
) -> None:
    """Backtest scaling policies on a real trace: SLO attainment, TTFT, replica-hours and scale events."""
    from scaler.backtest.run import BacktestConfig

    try:
        cfg = BacktestConfig(
            cold_start_s=cold_start,
            slo_ttft_s=slo_ttft,
            policies=tuple(p.strip() for p in policies.split(",") if p.strip()),
            fidelity=fidelity,
            max_replicas=max_replicas,
            rate_scale=rate_scale,
            seed=seed,
            start_s=start,
            duration_s=duration,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    try:
        report = _run(trace, cfg, show_progress=not as_json and sys.stderr.isatty())
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if plot:
        from scaler.backtest.plot import plot as draw

        draw(report, plot)
    if as_json:
        typer.echo(json.dumps(report.to_json()))
        return
    _table(report)


def _run(trace: str, cfg: BacktestConfig, *, show_progress: bool) -> Report:
    from scaler.backtest.run import backtest

    if not show_progress:
        return backtest(trace, cfg)
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        tasks = {name: bar.add_task(name, total=1.0) for name in cfg.policies}
        return backtest(trace, cfg, progress=lambda name, done: bar.update(tasks[name], completed=done))


def _table(report: Report) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{report.trace} · {report.fidelity} level · {report.duration_s / 3600:.2f} h · "
        f"capacity {report.capacity_rps:.3g} req/s/replica"
    )
    for col in ("policy", "in SLO", "outside SLO", "p50 TTFT s", "p99 TTFT s", "replica-h", "scale events"):
        table.add_column(col, justify="right")
    for name, r in report.policies.items():
        table.add_row(
            name,
            f"{100 * r.slo_attainment:.2f} %",
            f"{round((1 - r.slo_attainment) * r.requests):,}",
            f"{r.p50_ttft_s:.3f}",
            f"{r.p99_ttft_s:.3f}",
            f"{r.replica_hours:.2f}",
            str(r.scale_events),
        )
    console = Console()
    console.print(table)
    console.print(
        f"forecast ({report.mase_forecaster}) MASE at the {report.horizon_s:.0f} s horizon: {report.mase:.3f} "
        "(last value = 1.000)"
    )
