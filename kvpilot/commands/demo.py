"""`kvpilot demo`: a simulated fleet on a real trace, watched and scaled by kvpilot, in a live terminal view."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kvpilot.commands._numbers import ABOVE_ZERO, AT_LEAST_ZERO, Bound, check_numbers

if TYPE_CHECKING:
    from rich.console import Console

    from kvpilot.demo.replay import DemoSummary
    from kvpilot.demo.view import Event
    from kvpilot.runtime.snapshot import Snapshot
    from scaler.backtest.result import RolloutWindow

# Plain-text mode (a pipe, CI, --json): one status line per this many simulated seconds, besides every event.
STATUS_EVERY_S = 60.0


def command(
    trace: Annotated[
        Path | None,
        typer.Option(
            help="Trace to replay (Azure 2023/2024 or BurstGPT .csv, Mooncake .jsonl, ServeGen dir). "
            "Default: Azure 2023 conv."
        ),
    ] = None,
    speed: Annotated[
        float, typer.Option(help="Simulated seconds per wall-clock second, >= 0 (0: as fast as possible).")
    ] = 15.0,
    duration: Annotated[
        float, typer.Option(help="Simulated seconds of trace to replay, >= 1 (at most the trace's length).")
    ] = 3600,
    forever: Annotated[bool, typer.Option("--forever", help="Loop the trace until Ctrl-C instead.")] = False,
    fast: Annotated[bool, typer.Option("--fast", help="As fast as possible (same as --speed 0).")] = False,
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Run as fast as possible and print one JSON summary on stdout (logs on stderr)."),
    ] = False,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the trace sampling: same seed, same demo.")] = 0,
    replicas: Annotated[int, typer.Option(min=1, max=64, help="Replicas at the start.")] = 2,
    rate_scale: Annotated[
        float,
        typer.Option(
            help="Multiply the trace's request rate, >= 0.01. The default 8 sizes the default trace (Azure "
            "conversation) to a few replicas; another trace needs its own (Mooncake about 1, ServeGen about 0.02).",
        ),
    ] = 8.0,  # DemoConfig.rate_scale (why 8: see there)
    engine: Annotated[str, typer.Option(help="Engine format the simulator serves.")] = "vllm",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port of kvpilot's API during the demo (0: any).")] = 0,
    plot: Annotated[
        Path | None,
        typer.Option(
            help="Write a PNG at the end: demand, forecast, desired and ready replicas, queue, faults and findings."
        ),
    ] = None,
    rollout_at: Annotated[
        float | None,
        typer.Option(
            help="Start a rolling update (maxSurge 0) this many simulated seconds into the replay, within --duration; "
            "the summary gains a rollout section: TTFT during it beside the window before it, and the surge's cost."
        ),
    ] = None,
    rollout_wave: Annotated[int, typer.Option(min=1, help="Replicas the rolling update replaces at a time.")] = 1,
    rollout_speed: Annotated[
        float, typer.Option(help="The new version's speed against the old one, > 0 (step times divided by it).")
    ] = 1.0,
    arrivals: Annotated[
        str,
        typer.Option(
            "--arrivals",
            help="What kvpilot's planner reads as arrivals: engines (as `kvpilot run` does without a gateway rate "
            "source: the engines' finished requests plus the change in their queues) or gateway (the simulated "
            "router's request counter as Prometheus scrapes it, read as `kvpilot run` reads collector.arrivals).",
        ),
    ] = "engines",
    scrape_interval: Annotated[
        float | None,
        typer.Option(
            "--scrape-interval",
            help="With --arrivals gateway: seconds between Prometheus' scrapes of the router's counter (default: 10, "
            "the Gateway API Inference Extension chart's ServiceMonitor interval).",
        ),
    ] = None,
    no_surge: Annotated[
        bool,
        typer.Option("--no-surge", help="Withdraw kvpilot's rollout surge (publish the planner's count): to compare."),
    ] = False,
) -> None:
    """Replay a real trace through a simulated GPU fleet that kvpilot watches, forecasts and scales live."""
    import asyncio
    import json
    import logging
    import signal
    import sys

    from rich.live import Live

    from kvpilot.demo.replay import DEFAULT_TRACE, DemoConfig, DemoError, run_demo
    from kvpilot.demo.view import layout
    from kvpilot.render import console as make_console
    from scaler.backtest.gateway import DEFAULT_SCRAPE_INTERVAL_S
    from simulator.exposition import ENGINES

    check_numbers(
        ("--speed", speed, AT_LEAST_ZERO),
        ("--duration", duration, Bound(1.0)),
        ("--rate-scale", rate_scale, Bound(0.01)),
        ("--rollout-at", rollout_at, AT_LEAST_ZERO),
        ("--rollout-speed", rollout_speed, ABOVE_ZERO),
        ("--scrape-interval", scrape_interval, ABOVE_ZERO),
    )
    if scrape_interval is not None and arrivals != "gateway":
        typer.echo("error: --scrape-interval applies to --arrivals gateway only", err=True)
        raise typer.Exit(2)
    if rollout_at is not None and not forever and rollout_at >= duration:
        typer.echo(f"error: --rollout-at {rollout_at:g} is not within the replay (--duration {duration:g})", err=True)
        raise typer.Exit(2)
    if rollout_at is not None and forever:
        typer.echo("error: --rollout-at needs a replay of known length, not --forever", err=True)
        raise typer.Exit(2)
    if engine not in ENGINES:  # said now, in a line, not as a traceback once the simulator starts
        known = ", ".join(ENGINES)
        typer.echo(f"error: --engine {engine!r} is not one the simulator serves (known: {known})", err=True)
        raise typer.Exit(2)
    try:
        cfg = DemoConfig(
            trace=trace or DEFAULT_TRACE,
            replicas=replicas,
            speed=0.0 if (fast or json_out) else speed,
            duration_s=None if forever else duration,
            rate_scale=rate_scale,
            engine=engine,
            seed=seed,
            http_port=port,
            rollout_at_s=rollout_at,
            rollout_wave=rollout_wave,
            rollout_speed=rollout_speed,
            surge=not no_surge,
            arrivals=arrivals,
            gateway_scrape_s=DEFAULT_SCRAPE_INTERVAL_S if scrape_interval is None else scrape_interval,
        )
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    if not cfg.trace.exists():
        typer.echo(f"error: trace not found: {cfg.trace}", err=True)
        raise typer.Exit(2)
    if plot is not None:
        from kvpilot.commands._plot import plot_file

        try:
            plot = plot_file(plot)
        except ValueError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    console = make_console(stderr=json_out)  # a pipe or a log: lines as long as they are, the summary unwrapped
    plain = _PlainText(console)

    async def main() -> DemoSummary:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if console.is_terminal and not json_out:
            first = layout(None, [], "kvpilot demo — starting")
            with Live(first, console=console, screen=False, auto_refresh=False) as live:

                def redraw(snap: Snapshot | None, events: list[Event], header: str) -> None:
                    live.update(layout(snap, events, header), refresh=True)

                return await run_demo(cfg, on_update=redraw, stop=stop)
        return await run_demo(cfg, on_update=plain.update, stop=stop)

    try:
        summary = asyncio.run(main())
    except DemoError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    if json_out:
        sys.stdout.write(json.dumps(summary.to_json()) + "\n")
    else:
        _print_summary(console, summary)
    if plot is not None:
        from kvpilot.demo.plot import write_plot

        try:
            write_plot(summary, plot, title=f"kvpilot demo — {cfg.trace.name} ×{cfg.rate_scale:g}, seed {cfg.seed}")
        except (OSError, ValueError) as e:
            typer.echo(f"error: --plot {plot}: {e}", err=True)
            raise typer.Exit(1) from None
        console.print(f"plot written to {plot}", highlight=False, soft_wrap=True)


class _PlainText:
    """Not a terminal (CI, a pipe) or --json: the header with the API URL first, then every event (faults,
    findings opened and closed, decision changes, evictions) as it happens, and a status line per simulated
    minute — the story the live view tells, as lines."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.header = ""
        self.events = 0
        self.status_t = -STATUS_EVERY_S

    def update(self, snap: Snapshot | None, events: list[Event], header: str) -> None:
        from kvpilot.demo.view import status_line

        title = header.split(" · t=", 1)[0]
        if title != self.header:
            self.header = title
            self.console.print(title, highlight=False, soft_wrap=True)
        for e in events[self.events :]:
            self.console.print(f"t={e.t:>7,.0f}s  {e.text}", highlight=False, soft_wrap=True)
        self.events = len(events)
        if snap is not None and snap.t - self.status_t >= STATUS_EVERY_S:
            self.status_t = snap.t
            self.console.print(status_line(snap, header), highlight=False, soft_wrap=True)


_CHANGES_LISTED = 8  # desired-replica changes the summary lists (the event lines above it show each)


def _print_summary(console: Console, s: DemoSummary) -> None:
    from rich.table import Table

    t = Table(title="kvpilot demo — summary", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    t.add_row("simulated time", f"{s.simulated_s:,.0f} s (seed {s.seed})")
    t.add_row("requests", f"{s.requests:,} arrived, {s.served:,} served, {s.never_served:,} never served")
    t.add_row("SLO attainment", f"{s.slo_attainment:.2%} with a first token within {s.slo_ttft_s:g} s")
    ttft = "  ".join(f"{k} {v:.2f}s" if v is not None else f"{k} –" for k, v in s.ttft_s.items())
    t.add_row("TTFT (never-served at their wait)", ttft or "–")
    d = s.decisions
    t.add_row("decisions", f"{d['predictive']} predictive, {d['reactive']} reactive, {d['hold']} hold")
    first = s.first_scale_up
    t.add_row(
        "first scale-up",
        f"t={first['t']:,.0f}s, {first['reason']}, {first['waiting'] if first['waiting'] is not None else '–'} waiting"
        if first
        else "none",
    )
    t.add_row("faults injected", str(s.faults_injected))
    t.add_row("findings opened", ", ".join(f"{k} ×{n}" for k, n in sorted(s.finding_kinds.items())) or "none")
    evictions = ", ".join(f"{e['replica']} at {e['t']:,.0f}s ({e['requests_retried']} retried)" for e in s.evictions)
    t.add_row("stuck pods evicted", evictions or "none")
    changes = ", ".join(f"{a}→{b} at {t_:,.0f}s" for t_, a, b in s.scale_changes[:_CHANGES_LISTED])
    if len(s.scale_changes) > _CHANGES_LISTED:  # the count says how many; the list says it stops short
        changes += f", … {len(s.scale_changes) - _CHANGES_LISTED} more"
    t.add_row("desired-replica changes", f"{len(s.scale_changes)} ({changes})" if changes else "0")
    t.add_row("replica-hours", f"{s.replica_hours:.2f} (peak {s.peak_serving_replicas} serving)")
    if s.rollout is not None:
        for name, value in _rollout_rows(s):
            t.add_row(name, value)
    t.add_row("store", f"{s.database} (temporary, removed at exit)")
    console.print(t)


def _rollout_rows(s: DemoSummary) -> list[tuple[str, str]]:
    ro = s.rollout
    assert ro is not None
    w, b = ro.window, ro.before
    if w is None or b is None:
        return [("rollout", f"not injected (asked for at {ro.at_s:,.0f}s)")]

    def fared(x: RolloutWindow) -> str:
        return f"{x.slo_attainment:.2%} in SLO, TTFT p99 {x.p99_ttft_s:.2f}s ({x.requests:,} requests)"

    end = "" if ro.ended else ", not done by the end"
    finding = "no rollout finding" if ro.finding_after_s is None else f"rollout finding +{ro.finding_after_s:g}s"
    surge = (
        f"peak +{ro.peak_surge_replicas} replicas, {ro.surge_replica_hours:.2f} replica-h above the planner"
        if ro.surge
        else "off (--no-surge)"
    )
    return [
        ("rollout", f"t={w.start_s:,.0f}s to {w.end_s:,.0f}s{end}, waves of {ro.wave}; {finding}"),
        ("  during it", fared(w)),
        (f"  {b.start_s:,.0f}s to {b.end_s:,.0f}s before", fared(b)),
        ("  kvpilot's surge", surge),
    ]
