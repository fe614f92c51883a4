"""`kvpilot simulate`: replay a trace through the simulated fleet, live over HTTP or in virtual time."""

from __future__ import annotations

import json
import math
import signal
import threading
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from kvpilot.commands._numbers import ABOVE_ZERO, AT_LEAST_ZERO, check_numbers


class Engine(StrEnum):
    vllm = "vllm"
    sglang = "sglang"
    tgi = "tgi"
    trtllm = "trtllm"
    llamacpp = "llamacpp"


class Fidelity(StrEnum):
    request = "request"
    fluid = "fluid"


class Routing(StrEnum):
    round_robin = "round_robin"
    least_loaded = "least_loaded"
    prefix_affinity = "prefix_affinity"


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=2)


def command(
    trace: Annotated[
        str,
        typer.Option(
            help="Azure 2023/2024 or BurstGPT .csv, Mooncake .jsonl, ServeGen directory, or synthetic[:k=v,...]"
        ),
    ],
    replicas: Annotated[int, typer.Option(min=0, max=1024, help="Initial replica count.")] = 4,
    engine: Annotated[Engine, typer.Option(help="/metrics format of the replicas (live mode).")] = Engine.vllm,
    serve: Annotated[int | None, typer.Option(min=0, max=65535, help="Serve live on this port.")] = None,
    host: Annotated[str, typer.Option(help="Address to bind in live mode.")] = "127.0.0.1",
    speed: Annotated[float, typer.Option(help="Live mode: virtual seconds per wall second.")] = 1.0,
    loop: Annotated[bool, typer.Option("--loop", help="Live mode: replay the trace again when it ends.")] = False,
    virtual: Annotated[bool, typer.Option("--virtual", help="Replay in virtual time and print a summary.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    fidelity: Annotated[Fidelity, typer.Option(help="request (exact) or fluid (per time step).")] = Fidelity.request,
    routing: Annotated[Routing, typer.Option(help="Gateway routing policy.")] = Routing.round_robin,
    profile: Annotated[str, typer.Option(help="Replica profile (see simulator.PROFILES).")] = "llama3-8b-h100",
    time_scale: Annotated[float, typer.Option(help="Multiply trace times (0.5 = twice as fast).")] = 1.0,
    rate_scale: Annotated[float, typer.Option(help="Multiply the request rate.")] = 1.0,
    duration_s: Annotated[float | None, typer.Option(help="Replay only this many seconds.")] = None,
    cold_start_s: Annotated[float, typer.Option(help="Seconds before a new replica is ready.")] = 120.0,
    seed: Annotated[int, typer.Option(help="Seed of every random choice.")] = 0,
) -> None:
    """Replay a trace through a simulated fleet: live (--serve PORT) or in virtual time (--virtual)."""
    from simulator import PROFILES, Fleet, FleetConfig, load_trace

    if (serve is None) == (not virtual):
        raise _fail("choose exactly one of --serve PORT (live) or --virtual (replay and summarise)")
    check_numbers(
        ("--speed", speed, ABOVE_ZERO),
        ("--time-scale", time_scale, ABOVE_ZERO),
        ("--rate-scale", rate_scale, ABOVE_ZERO),
        ("--duration-s", duration_s, ABOVE_ZERO),
        ("--cold-start-s", cold_start_s, AT_LEAST_ZERO),
        ("--seed", seed, AT_LEAST_ZERO),  # was "cannot load trace T: expected non-negative integer", blaming the trace
    )
    if profile not in PROFILES:
        raise _fail(f"unknown --profile {profile!r} (known: {', '.join(PROFILES)})")
    try:
        loaded = load_trace(trace, time_scale=time_scale, rate_scale=rate_scale, seed=seed, duration_s=duration_s)
        config = FleetConfig(
            profile=PROFILES[profile],
            replicas=replicas,
            cold_start_s=cold_start_s,
            routing=routing.value,
            fidelity=fidelity.value,
            seed=seed,
            loop=loop and not virtual,
        )
        fleet = Fleet(config, loaded)
    except FileNotFoundError as e:
        raise _fail(str(e)) from None
    except (ValueError, OSError, UnicodeDecodeError) as e:
        raise _fail(f"cannot load trace {trace}: {e}") from None
    if virtual:
        summary = replay_summary(fleet, trace_name=str(Path(trace).name if "synthetic" not in trace else trace))
        typer.echo(json.dumps(summary, indent=2) if as_json else _format(summary))
        return
    assert serve is not None
    _serve(fleet, engine.value, host, serve, speed)


def replay_summary(fleet: Any, *, trace_name: str) -> dict[str, Any]:
    """Advance to the end of the trace (plus a drain minute), sampling KV usage ~1000 times, and summarise."""
    started = time.perf_counter()
    end = fleet.trace.duration_s + 60.0
    sample_s = max(10.0, end / 1000.0)
    kv: list[float] = []
    t = 0.0
    while t < end:
        t = min(t + sample_s, end)
        fleet.advance_to(t)
        snap = fleet.snapshot()
        ready = [r.kv_usage for r in snap.replicas if r.state == "ready"]
        if ready:
            kv.append(sum(ready) / len(ready))
    snap = fleet.snapshot()
    queries = sum(r.prefix_queries_total for r in snap.replicas)
    hits = sum(r.prefix_hits_total for r in snap.replicas)
    q = fleet.ttft_quantiles((0.5, 0.9, 0.99))
    return {
        "trace": trace_name,
        "fidelity": fleet.config.fidelity,
        "routing": snap.routing,
        "replicas": len(snap.replicas),
        "simulated_s": round(snap.time, 1),
        "wall_s": round(time.perf_counter() - started, 3),
        "requests": snap.arrivals_total,
        "finished": len(fleet.finished()) if fleet.config.fidelity == "request" else None,
        "ttft_s": {"p50": _round(q[0.5]), "p90": _round(q[0.9]), "p99": _round(q[0.99])},
        "kv_usage": {"mean": _round(sum(kv) / len(kv)) if kv else None, "max": _round(max(kv)) if kv else None},
        "preemptions": sum(r.preemptions_total for r in snap.replicas),
        "prefix_hit_rate": _round(hits / queries) if queries else None,
    }


def _round(v: float) -> float | None:
    return None if v is None or math.isnan(v) else round(v, 4)


def _format(s: dict[str, Any]) -> str:
    ttft = s["ttft_s"]
    lines = [
        f"trace            {s['trace']}  ({s['fidelity']} level, {s['replicas']} replicas, {s['routing']})",
        f"simulated        {s['simulated_s']} s in {s['wall_s']} s wall",
        f"requests         {s['requests']}" + (f" ({s['finished']} finished)" if s["finished"] is not None else ""),
        f"TTFT             p50 {ttft['p50']} s   p90 {ttft['p90']} s   p99 {ttft['p99']} s",
        f"KV usage         mean {s['kv_usage']['mean']}   max {s['kv_usage']['max']}",
        f"preemptions      {s['preemptions']}",
        f"prefix hit rate  {s['prefix_hit_rate']}",
    ]
    return "\n".join(lines)


def _serve(fleet: Any, engine: str, host: str, port: int, speed: float) -> None:
    from simulator.server import LiveFleet, make_server

    live = LiveFleet(fleet, engine=engine, speed=speed)
    try:
        server = make_server(live, host, port)
    except OSError as e:
        raise _fail(f"cannot listen on {host}:{port}: {e}") from None
    bound = server.server_address[1]
    typer.echo(f"simulator serving on http://{host}:{bound} (targets: /targets, Prometheus http_sd: /sd)")
    live.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, name="simulator-http", daemon=True)
    thread.start()
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        live.stop()
