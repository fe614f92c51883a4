"""`kvpilot demo`: a simulated fleet on a real trace, watched and scaled by kvpilot, in a live terminal view."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from kvpilot.demo import DemoSummary


def command(
    trace: Annotated[
        Path | None,
        typer.Option(help="Trace to replay (Azure .csv, Mooncake .jsonl, ServeGen dir). Default: Azure 2023 conv."),
    ] = None,
    speed: Annotated[float, typer.Option(min=0.1, help="Simulated seconds per wall-clock second.")] = 15.0,
    duration: Annotated[float, typer.Option(min=1, help="Wall-clock seconds before the demo ends by itself.")] = 240,
    forever: Annotated[bool, typer.Option("--forever", help="Run until Ctrl-C instead of --duration.")] = False,
    replicas: Annotated[int, typer.Option(min=1, max=64, help="Replicas at the start.")] = 2,
    rate_scale: Annotated[float, typer.Option(min=0.01, help="Multiply the trace's request rate.")] = 2.0,
    engine: Annotated[str, typer.Option(help="Engine format the simulator serves.")] = "vllm",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port of kvpilot's API during the demo (0: any).")] = 0,
) -> None:
    """Replay a real trace through a simulated GPU fleet that kvpilot watches, forecasts and scales live."""
    import asyncio
    import contextlib
    import logging
    import signal
    import time

    from rich.console import Console
    from rich.live import Live

    from api.runtime import Snapshot
    from kvpilot.demo import DEFAULT_TRACE, DemoConfig, run_demo
    from kvpilot.view import Event, layout, status_line

    try:
        cfg = DemoConfig(
            trace=trace or DEFAULT_TRACE,
            replicas=replicas,
            speed=speed,
            duration_s=None if forever else duration,
            rate_scale=rate_scale,
            engine=engine,
            http_port=port,
        )
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    if not cfg.trace.exists():
        typer.echo(f"error: trace not found: {cfg.trace}", err=True)
        raise typer.Exit(2)

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    console = Console()
    last_line = [0.0]

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if console.is_terminal:
            first = layout(None, [], "kvpilot demo — starting")
            with Live(first, console=console, screen=False, auto_refresh=False) as live:

                def redraw(snap: Snapshot | None, events: list[Event], header: str) -> None:
                    live.update(layout(snap, events, header), refresh=True)

                summary = await run_demo(cfg, on_update=redraw, stop=stop)
        else:
            # Not a terminal (CI, a pipe): one status line every few seconds instead of a redrawn screen.
            def print_status(snap: Snapshot | None, events: list[Event], header: str) -> None:
                if snap is None or time.monotonic() - last_line[0] < 5:
                    return
                last_line[0] = time.monotonic()
                console.print(status_line(snap, header), highlight=False, soft_wrap=True)

            summary = await run_demo(cfg, on_update=print_status, stop=stop)
        _print_summary(console, summary)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


def _print_summary(console: Console, s: DemoSummary) -> None:
    from rich.table import Table

    t = Table(title="kvpilot demo — summary", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    t.add_row("simulated time", f"{s.simulated_s:,.0f} s")
    t.add_row("requests arrived", f"{s.requests_arrived:,}")
    t.add_row("TTFT", "  ".join(f"{k} {v:.2f}s" for k, v in s.ttft_s.items()) or "–")
    t.add_row("faults injected", str(s.faults_injected))
    t.add_row("findings opened", ", ".join(f"{k} ×{n}" for k, n in sorted(s.finding_kinds.items())) or "none")
    changes = ", ".join(f"{a}→{b} at {t_:,.0f}s" for t_, a, b in s.scale_changes[:8])
    t.add_row("desired-replica changes", f"{len(s.scale_changes)} ({changes})" if changes else "0")
    t.add_row("peak ready replicas", str(s.peak_ready_replicas))
    t.add_row("store", f"{s.database} (temporary, removed at exit)")
    console.print(t)
