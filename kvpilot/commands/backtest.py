"""`kvpilot backtest`: replay a trace through the simulator under several scaling policies and compare them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvpilot.commands._numbers import ABOVE_ZERO, AT_LEAST_ZERO, check_numbers

if TYPE_CHECKING:
    from rich.progress import Progress

    from scaler.backtest.faults import FaultSpec
    from scaler.backtest.pools_report import PoolsReport
    from scaler.backtest.run import BacktestConfig, Report
    from scaler.planner import PlannerConfig


def command(
    trace: Annotated[
        str,
        typer.Option(
            "--trace",
            help="Azure 2023/2024 or BurstGPT .csv, Mooncake .jsonl, or a ServeGen directory",
        ),
    ],
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="the settings file `kvpilot run` reads: kvpilot is backtested with it"),
    ] = None,
    cold_start: Annotated[
        float | None, typer.Option("--cold-start", help="seconds from replica start to ready (default: settings)")
    ] = None,
    slo_ttft: Annotated[
        float | None, typer.Option("--slo-ttft", help="TTFT SLO in seconds (default: settings)")
    ] = None,
    policies: Annotated[
        str | None,
        typer.Option(
            "--policies",
            help="comma-separated: reactive,hpa-util,kpa,kpa-knative,wva,dynamo,dynamo-sla,kvpilot "
            "(default: reactive,kvpilot)",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the machine-readable result only")] = False,
    plot: Annotated[
        str | None,
        typer.Option("--plot", help="write a PNG: demand, forecasts, replicas per policy, the frontier and a table"),
    ] = None,
    fidelity: Annotated[str | None, typer.Option("--fidelity", help="request | fluid (default: by trace size)")] = None,
    max_replicas: Annotated[
        int | None, typer.Option("--max-replicas", min=1, help="ceiling for every policy (default: settings, 100)")
    ] = None,
    rate_scale: Annotated[float, typer.Option("--rate-scale", help="multiply the trace's arrival rate")] = 1.0,
    arrivals: Annotated[
        str,
        typer.Option(
            "--arrivals",
            help="what kvpilot's planner reads as arrivals: engines (as `kvpilot run` does without a gateway rate "
            "source: the engines' finished requests plus the change in their queues) or gateway (the simulated "
            "router's request counter as Prometheus scrapes it, read as `kvpilot run` reads collector.arrivals)",
        ),
    ] = "engines",
    scrape_interval: Annotated[
        float | None,
        typer.Option(
            "--scrape-interval",
            help="with --arrivals gateway: seconds between Prometheus' scrapes of the router's counter (default: 10, "
            "the Gateway API Inference Extension chart's ServiceMonitor interval)",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    start: Annotated[float | None, typer.Option("--start", help="skip this many seconds of the trace")] = None,
    duration: Annotated[float | None, typer.Option("--duration", help="replay only this many seconds")] = None,
    frontier: Annotated[
        bool | None,
        typer.Option(
            "--frontier/--no-frontier",
            help="search the cost/SLO frontier (slow on long traces; default: on, and off with --pools, whose "
            "two-pool search takes minutes to hours)",
        ),
    ] = None,
    rollout_at: Annotated[
        float | None,
        typer.Option(
            "--rollout-at",
            min=0.0,
            help="inject a rolling update at this second of the replay, for every policy; TTFT is reported over "
            "the rollout too (request level only)",
        ),
    ] = None,
    rollout_wave: Annotated[int, typer.Option("--rollout-wave", min=1, help="replicas each wave replaces")] = 1,
    rollout_speed: Annotated[
        float, typer.Option("--rollout-speed", help="the new version's speed against the old one's")
    ] = 1.0,
    fault: Annotated[
        list[str] | None,
        typer.Option(
            "--fault",
            help="lose a replica, the same in every policy's replay (repeatable): xid79@SECONDS or xid79@peak, "
            "optionally ,replace=SECONDS|never. The serving replica holding the most requests (ties: the oldest) "
            "gets an XID 79: its GPU leaves dcgm-exporter and it makes no progress, still 'ready' to the peers and "
            "still in the gateway's endpoints; kvpilot judges it from its own /metrics page. The cluster deletes "
            "the pod after 5 s (the demo's stuck_gpu finding and eviction; replace=) for every policy alike: its "
            "requests are retried, a replacement cold-starts. 'peak': the start of the trace's busiest cold-start "
            "window, from the arrivals alone. Turns the frontier off (searched without faults)",
        ),
    ] = None,
    fault_at: Annotated[
        str | None,
        typer.Option("--fault-at", help="short for --fault xid79@WHEN, e.g. --fault-at peak or --fault-at 900"),
    ] = None,
    pools: Annotated[
        bool,
        typer.Option(
            "--pools",
            help="replay a disaggregated fleet instead: a prefill pool handing KV to a decode pool, kvpilot per pool "
            "vs Dynamo's SLA rule vs the co-located kvpilot, in dollars (docs/disaggregated.md)",
        ),
    ] = False,
    prefill_gpu: Annotated[
        str | None, typer.Option("--prefill-gpu", help="with --pools: the prefill pool's GPU type (default: H100)")
    ] = None,
    decode_gpu: Annotated[
        str | None, typer.Option("--decode-gpu", help="with --pools: the decode pool's GPU type (default: H200)")
    ] = None,
    colocated: Annotated[
        bool | None,
        typer.Option("--colocated/--no-colocated", help="with --pools: also the co-located kvpilot run (default: on)"),
    ] = None,
) -> None:
    """Backtest scaling policies on a real trace: SLO attainment, TTFT, replica-hours, scale events, and each
    policy's distance from the cost/SLO frontier. kvpilot runs with the planner configuration `kvpilot run`
    builds from the same settings (`kvpilot config show` prints it)."""
    from kvpilot.settings import SettingsError
    from scaler.backtest.gateway import DEFAULT_SCRAPE_INTERVAL_S
    from scaler.backtest.run import BacktestConfig

    # Said by flag, in one line, before the settings and the replay (whose checks name their own fields, two at a
    # time; inf overflowed the replay).
    check_numbers(
        ("--cold-start", cold_start, AT_LEAST_ZERO),
        ("--slo-ttft", slo_ttft, ABOVE_ZERO),
        ("--rate-scale", rate_scale, ABOVE_ZERO),
        ("--start", start, AT_LEAST_ZERO),
        ("--duration", duration, ABOVE_ZERO),
        ("--rollout-at", rollout_at, AT_LEAST_ZERO),
        ("--rollout-speed", rollout_speed, ABOVE_ZERO),
        ("--seed", seed, AT_LEAST_ZERO),  # numpy's words otherwise: "expected non-negative integer", naming nothing
        ("--scrape-interval", scrape_interval, ABOVE_ZERO),
    )
    if scrape_interval is not None and arrivals != "gateway":
        typer.echo("error: --scrape-interval applies to --arrivals gateway only", err=True)
        raise typer.Exit(2)
    if pools:
        refused: dict[str, object] = {
            "--policies": policies, "--plot": plot, "--fidelity": fidelity, "--cold-start": cold_start,
            "--slo-ttft": slo_ttft, "--max-replicas": max_replicas, "--rollout-at": rollout_at,
            "--fault": fault or None, "--fault-at": fault_at,
            # each pool's kvpilot reads the engines' estimate (scaler.backtest.disagg), as `kvpilot run` does
            "--arrivals": None if arrivals == "engines" else arrivals,
        }  # fmt: skip
        _pools(
            trace, config, refused, as_json=as_json, prefill_gpu=prefill_gpu, decode_gpu=decode_gpu,
            colocated=colocated is not False, frontier=frontier is True, rate_scale=rate_scale, seed=seed,
            start=start, duration=duration,
        )  # fmt: skip
        return
    for flag, value in (
        ("--prefill-gpu", prefill_gpu),
        ("--decode-gpu", decode_gpu),
        ("--colocated/--no-colocated", colocated),
    ):
        if value is not None:
            typer.echo(f"error: {flag} applies to --pools only", err=True)
            raise typer.Exit(2)
    try:
        faults = fault_specs(fault or [], fault_at)
    except ValueError as e:
        typer.echo(f"error: --fault: {e}", err=True)
        raise typer.Exit(2) from None
    if faults and frontier is True:
        typer.echo("error: --frontier with --fault: the frontier is searched without faults", err=True)
        raise typer.Exit(2)
    plot_to = None
    if plot:  # before minutes of replay, not after
        from kvpilot.commands._plot import plot_file

        try:
            plot_to = plot_file(plot)
        except ValueError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
    try:
        planner, facts = backtest_planner(config, cold_start=cold_start, slo_ttft=slo_ttft, max_replicas=max_replicas)
        cfg = BacktestConfig(
            policies=tuple(p.strip() for p in (policies or "reactive,kvpilot").split(",") if p.strip()),
            fidelity=fidelity,
            rate_scale=rate_scale,
            seed=seed,
            start_s=start,
            duration_s=duration,
            planner=planner,
            arrivals=arrivals,
            gateway_scrape_s=DEFAULT_SCRAPE_INTERVAL_S if scrape_interval is None else scrape_interval,
            frontier=frontier is not False and not faults,
            rollout_at_s=rollout_at,
            rollout_wave=rollout_wave,
            rollout_speed=rollout_speed,
            faults=faults,
            **facts,
        )
    except SettingsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    try:
        report = _run(trace, cfg, show_progress=not as_json)
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(report.to_json()))
    else:
        _table(report)
    if plot_to is not None:  # after the results: a plot that cannot be written loses them no more
        from scaler.backtest.plot import plot as draw

        try:
            draw(report, plot_to, ceiling=cfg.max_replicas)
        except OSError as e:
            typer.echo(f"error: --plot {plot}: {e.strerror or e}", err=True)
            raise typer.Exit(1) from None
        typer.echo(f"plot written to {plot_to}", err=as_json)


def fault_specs(given: list[str], fault_at: str | None) -> tuple[FaultSpec, ...]:
    """``--fault`` specs and ``--fault-at`` (``xid79@WHEN``) parsed (``scaler.backtest.faults``); ValueError."""
    from scaler.backtest.faults import parse

    texts = [*given, *([] if fault_at is None else [f"xid79@{fault_at}"])]
    return tuple(parse(t) for t in texts)


def _pools(
    trace: str,
    config: Path | None,
    refused: dict[str, object],
    *,
    as_json: bool,
    prefill_gpu: str | None,
    decode_gpu: str | None,
    colocated: bool,
    frontier: bool,
    rate_scale: float,
    seed: int,
    start: float | None,
    duration: float | None,
) -> None:
    """`--pools`: the disaggregated replays (scaler.backtest.pools_report), priced at the settings' `cost.gpus`."""
    from kvpilot.settings import SettingsError, load_settings
    from scaler.backtest.disagg import PoolGpus
    from scaler.backtest.pools_report import backtest_pools

    given = [flag for flag, value in refused.items() if value is not None]
    if given:
        typer.echo(
            f"error: {', '.join(given)} with --pools: the pooled replays run bench/disagg.py's fleet "
            "(TTFT SLO 2 s, 120 s cold starts, up to 64 replicas a pool; docs/disaggregated.md)",
            err=True,
        )
        raise typer.Exit(2)
    try:
        prices = backtest_cost(load_settings(config))["gpu_prices"]
        gpus = PoolGpus(prefill=prefill_gpu or "H100", decode=decode_gpu or "H200", prices=prices)
    except (SettingsError, ValueError) as exc:  # a bad settings file; a GPU type with no profile or price
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        report = backtest_pools(
            trace, gpus=gpus, rate_scale=rate_scale, seed=seed, start_s=start, duration_s=duration,
            colocated=colocated, frontier=frontier, progress=_quiet if as_json else _stage_line,
        )  # fmt: skip
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(report.to_json()))
        return
    _pools_table(report)


def _quiet(_: str) -> None:
    pass


def _stage_line(line: str) -> None:
    typer.echo(line, err=True)


def backtest_planner(
    config: Path | None, *, cold_start: float | None, slo_ttft: float | None, max_replicas: int | None
) -> tuple[PlannerConfig, dict[str, Any]]:
    """kvpilot's planner configuration for the backtest, built by the function `kvpilot run` uses from the same
    settings; the backtest's own flags override the deployment facts (cold start, SLO, ceiling) in those settings."""
    from kvpilot.runtime.wiring import planner_config
    from kvpilot.settings import load_settings

    settings = load_settings(config)
    scaler = settings.scaler
    updates: dict[str, Any] = {}
    if cold_start is not None:
        updates["cold_start_s"] = cold_start
    if slo_ttft is not None:
        updates["planner"] = scaler.planner.model_copy(update={"slo_ttft_s": slo_ttft})
    if max_replicas is not None:
        updates["default"] = scaler.default.model_copy(update={"max_replicas": max_replicas})
    settings = settings.model_copy(update={"scaler": scaler.model_copy(update=updates)})
    planner = planner_config(settings, settings.scaler.default)
    facts = {
        "cold_start_s": planner.cold_start_s,
        "slo_ttft_s": planner.slo_ttft_s if planner.slo_ttft_s is not None else (slo_ttft or 2.0),
        "min_replicas": planner.policy.min_replicas,
        "max_replicas": planner.policy.max_replicas or 100,
        "tick_s": settings.collector.interval_s,
        **backtest_cost(settings),
    }
    return planner, facts


def backtest_cost(settings: Any) -> dict[str, Any]:
    """What the backtest prices replica-hours at (docs/cost.md): `cost.gpus` from the same settings, and the GPU type
    and count of `cost.default` where set (else the simulated replica's own)."""
    from scaler.cost import GpuPrice

    c = settings.cost
    return {
        "gpu_type": c.default.gpu_type,
        "gpus_per_replica": c.default.gpus_per_replica,
        "gpu_prices": {k: GpuPrice(g.price_per_hour_usd, g.power_w) for k, g in c.gpus.items()},
    }


def _run(trace: str, cfg: BacktestConfig, *, show_progress: bool) -> Report:
    """The backtest, its progress on stderr unless ``show_progress`` is off (--json): first a line saying what is
    replayed (requests, span, mean rate, level), then bars on a terminal, else a line per tenth of each stage (a log
    or CI keeps them; a search can take minutes)."""
    from scaler.backtest.run import backtest

    if not show_progress:
        return backtest(trace, cfg)
    if not sys.stderr.isatty():
        return backtest(trace, cfg, progress=StageLines(), announce=_stage_line)
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        names = [*cfg.policies, "frontier"] if cfg.frontier else list(cfg.policies)

        def announce(line: str) -> None:  # above the bars, as written (a trace's name may hold rich's brackets)
            bar.console.print(line, markup=False, highlight=False)

        return backtest(trace, cfg, progress=StageBars(bar, names), announce=announce)


class StageLines:
    """The backtest's progress as lines on stderr: ``frontier: 40 %`` each time a stage passes a tenth."""

    def __init__(self) -> None:
        self.shown: dict[str, int] = {}

    def __call__(self, name: str, done: float) -> None:
        tenth = int(10 * min(max(done, 0.0), 1.0) + 1e-9)
        if tenth > self.shown.get(name, -1):
            self.shown[name] = tenth
            typer.echo(f"{name}: {10 * tenth} %", err=True)


class StageBars:
    """The backtest's progress as rich bars: reading and scaling the trace and building the replica's serving
    profile report no fraction, so they get a pulsing bar of their own, closed by the first policy's first step
    (instead of the first policy sitting at 0 % with no ETA); then one bar per policy and the frontier, each
    started when its work starts so that its ETA is its own."""

    def __init__(self, bar: Progress, names: list[str]) -> None:
        self.bar = bar
        self.loading = bar.add_task("trace and profile", total=None)
        self.tasks = {name: bar.add_task(name, total=1.0, start=False) for name in names}
        self.loaded = False

    def __call__(self, name: str, done: float) -> None:
        if not self.loaded:
            self.bar.update(self.loading, total=1.0, completed=1.0)
            self.loaded = True
        self.bar.start_task(self.tasks[name])
        self.bar.update(self.tasks[name], completed=done)


def _table(report: Report) -> None:
    from rich.table import Table

    from kvpilot.render import console as make_console

    table = Table(
        title=f"{report.trace} · {report.fidelity} level · {report.duration_s / 3600:.2f} h · "
        f"capacity {report.capacity_rps:.3g} req/s/replica"
    )
    rollout = any(r.rollout is not None for r in report.policies.values())
    for col in (
        "policy",
        "in SLO",
        "outside SLO",
        "p50 TTFT s",
        "p99 TTFT s",
        "replica-h",
        "cost $",
        "scale events",
        "× frontier",
        *(("rollout s", "rollout in SLO", "rollout p99 s") if rollout else ()),
    ):
        table.add_column(col, justify="right")
    for name, r in report.policies.items():
        ratio = report.frontier_ratio(name)
        w = r.rollout
        during = (
            (f"{w.start_s:.0f}-{w.end_s:.0f}", f"{100 * w.slo_attainment:.2f} %", f"{w.p99_ttft_s:.3f}")
            if w is not None
            else (("–", "–", "–") if rollout else ())
        )
        table.add_row(
            name,
            f"{100 * r.slo_attainment:.2f} %",
            f"{round((1 - r.slo_attainment) * r.requests):,}",
            f"{r.p50_ttft_s:.3f}",
            f"{r.p99_ttft_s:.3f}",
            f"{r.replica_hours:.2f}",
            f"{report.cost_usd(name):,.2f}",
            str(r.scale_events),
            "–" if ratio is None else f"{ratio:.2f}",
            *during,
        )
    console = make_console()
    console.print(table)
    console.print(
        f"cost: replica-h × {report.gpus_per_replica} {report.gpu_type} per replica × "
        f"${report.price_per_gpu_hour_usd:g} per GPU-hour (settings `cost`)"
    )
    if report.frontier is not None:
        points = ", ".join(
            f"{100 * p.slo_attainment:.2f} % at {p.replica_hours:.2f} replica-h" for p in report.frontier.points
        )
        console.print(f"frontier (fewest replica-hours any scaler needs for each attainment): {points}")
    for f in report.faults:
        when = "the trace's busiest cold-start window" if f.peak else "asked"
        again = "never replaced" if f.replace_s is None else f"the pod replaced {f.replace_s:g} s later"
        console.print(f"fault: {f.kind} at {f.at_s or 0:,.0f} s ({when}), {again}, in every policy's replay")
        if f.cut_short:
            console.print(f"fault: {f.kind} at {f.at_s or 0:,.0f} s cut short: {f.cut_short}")
    for name, r in report.policies.items():
        for h in r.faults:
            fixed = (
                f"replaced at {h.replaced_at_s:,.0f} s"
                if h.replaced_at_s is not None
                else f"scaled away at {h.scaled_away_at_s:,.0f} s"
                if h.scaled_away_at_s is not None
                else "never replaced"
            )
            console.print(
                f"{name}: {h.kind} hit {h.replica} at {h.at_s:,.0f} s holding {h.requests_held:,} requests, "
                f"{h.ready_before} serving before; {fixed}, {h.requests_retried:,} retried"
            )
    for name, r in report.policies.items():
        if r.worst_minutes:
            minutes = "; ".join(
                f"{m.start_s:.0f} s: {m.outside:,} of {m.arrived:,} (down to {m.ready} ready)"
                for m in r.worst_minutes[:3]
            )
            console.print(f"{name}'s worst minutes (outside the SLO of those arriving): {minutes}")
    console.print(
        f"forecast ({report.mase_forecaster}) MASE at the {report.horizon_s:.0f} s horizon: {report.mase:.3f} "
        "(last value = 1.000)"
    )


def _pools_table(report: PoolsReport) -> None:
    from rich.table import Table

    from kvpilot.render import console as make_console
    from scaler.backtest.disagg import COLOCATED_GPU

    g = report.gpus
    table = Table(
        title=f"{report.trace} · disaggregated: prefill {g.prefill}, decode {g.decode} · "
        f"{report.duration_s / 3600:.2f} h · {report.requests:,} requests"
    )
    pools = [p for p in ("prefill", "decode", "both") if any(p in r.replica_hours for r in report.runs.values())]
    names = {"prefill": "prefill replica-h", "decode": "decode replica-h", "both": "co-located replica-h"}
    for col in ("policy", "in SLO", "p99 TTFT s", *(names[p] for p in pools), "cost $", "× pool frontier"):
        table.add_column(col, justify="right")
    for r in report.runs.values():
        hours = [r.replica_hours.get(pool) for pool in pools]
        table.add_row(
            r.name,
            f"{100 * r.slo_attainment:.2f} %",
            f"{r.p99_ttft_s:.3f}",
            *("–" if h is None else f"{h:.2f}" for h in hours),
            f"{r.cost_usd:,.2f}",
            "–" if r.frontier_ratio is None else f"{r.frontier_ratio:.3f}",
        )
    console = make_console()
    console.print(table)
    types = {g.prefill, g.decode, *((COLOCATED_GPU,) if "both" in pools else ())}
    prices = ", ".join(f"{t} ${g.price(t):g}" for t in sorted(types))
    console.print(
        f"cost: replica-h × the pool's GPU price per hour (settings `cost.gpus`: {prices}); one GPU a replica"
    )
    if report.frontier is not None:
        points = ", ".join(f"{100 * p.slo_attainment:.2f} % at ${p.cost_usd:,.2f}" for p in report.frontier.runs)
        console.print(f"pool frontier (fewest dollars any scaler of the two pools needs): {points}")
