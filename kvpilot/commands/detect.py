"""`kvpilot detect`: run the detectors over a simulated fleet or live /metrics endpoints and print findings.

`--source sim` replays a trace through the simulator in virtual time (faults injected with
`--inject '{"type":"xid","node":"node-0","gpu":0,"xid":79}@300'`) and prints every finding as it opens and
closes. `--source URL` scrapes engine and dcgm-exporter pages (several: repeat `--source` or separate them with
commas, `--source URL1,URL2`): once (two scrapes one interval
apart, since rates need two samples; raw detector output, before hysteresis) or, with `--watch`, every
interval, printing findings as they open and close. URLs are scraped by the scrape loop's own collector
(``collector.scrape.Collector``: its timeout, page size cap and adapters), so what it judges is what kvpilot sees.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Annotated, Any, NoReturn

import typer

from collector.samples import GpuSample, Histogram, ReplicaSample, TargetInfo
from collector.scrape import DEFAULT_MAX_BYTES, Collector, ScrapeConfig
from collector.state import FleetState
from collector.urls import is_http_url, meet, redacted
from detectors.finding import Finding
from kvpilot.commands._numbers import ABOVE_ZERO, PAGE_CAP, PAGE_CAP_FLAG, PAGE_CAP_HELP, check_numbers

SIM = "sim"
INJECT_EXAMPLE = '{"type":"xid","node":"node-0","gpu":0,"xid":79}@300'
SCRAPE_TIMEOUT_S = 5.0  # per target, whole scrape
MAX_BODY_BYTES = DEFAULT_MAX_BYTES  # the collector's page cap (collector.scrape), as `kvpilot run` defaults to


def samples_from_snapshot(
    snap: Any, *, now: float, namespace: str = "inference", deployment: str = "llama"
) -> tuple[list[ReplicaSample], list[GpuSample], set[str]]:
    """A simulator snapshot as the collector would see it: replicas that serve /metrics (not loading), the GPUs
    dcgm-exporter lists (not vanished), and the nodes whose exporter answered."""
    replicas = [_replica(r, now, namespace, deployment) for r in snap.replicas if r.state != "loading"]
    gpus = [_gpu(g, now) for g in snap.gpus if not g.vanished]
    return replicas, gpus, {g.node for g in snap.gpus}


def _hist(h: Any) -> Histogram:
    return Histogram(
        bounds=(*(float(b) for b in h.bounds), float("inf")),
        counts=tuple(float(c) for c in h.cumulative()),
        sum=float(h.total),
        count=float(h.count),
    )


def _replica(r: Any, now: float, namespace: str, deployment: str) -> ReplicaSample:
    return ReplicaSample(
        namespace=namespace,
        deployment=deployment,
        replica=r.name,
        node=r.node,
        engine="vllm",
        model=r.model_name,
        timestamp=now,
        requests_waiting=float(r.requests_waiting),
        requests_running=float(r.requests_running),
        kv_usage=float(r.kv_usage),
        kv_capacity_tokens=float(r.kv_capacity_tokens),
        prefix_queries=float(r.prefix_queries_total),
        prefix_hits=float(r.prefix_hits_total),
        preemptions=float(r.preemptions_total),
        prompt_tokens=float(r.prompt_tokens_total),
        generation_tokens=float(r.generation_tokens_total),
        requests_finished=float(r.requests_finished_total),
        ttft=_hist(r.ttft),
        itl=_hist(r.itl),
    )


def _gpu(g: Any, now: float) -> GpuSample:
    return GpuSample(
        node=g.node,
        index=str(g.index),
        uuid=g.uuid,
        model_name=g.model_name,
        timestamp=now,
        pod=g.pod or None,
        utilisation=float(g.utilisation),
        memory_used_bytes=float(g.memory_used_bytes),
        memory_free_bytes=float(g.memory_free_bytes),
        temperature_c=float(g.temperature_c),
        power_w=float(g.power_w),
        last_xid=int(g.last_xid),
    )


def finding_json(f: Finding) -> dict[str, Any]:
    d = asdict(f)
    d["id"] = f.id
    d["severity"] = str(f.severity)
    return d


def _emit(event: str, f: Finding, t: float, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps({"event": event, "t": t, **finding_json(f)}, sort_keys=True))
    else:
        # Virtual time (sim) reads best as seconds since the start; wall time as a UTC clock time.
        when = time.strftime("%H:%M:%SZ", time.gmtime(t)) if t > 1e9 else f"{t:>8.0f}s"
        typer.echo(f"{when:>9} {event:<7} {f.severity!s:<8} {f.kind:<18} {f.action:<20} {f.summary}")


def _parse_injections(specs: Iterable[str]) -> list[tuple[float, dict[str, Any]]]:
    from api.json_body import loads_once  # FastAPI's import, only where --inject is given

    out: list[tuple[float, dict[str, Any]]] = []
    for spec in specs:
        body, sep, at = spec.rpartition("@")
        if not sep:
            _usage(f"--inject {spec!r}: expected JSON@seconds, e.g. '{INJECT_EXAMPLE}'")
        try:
            out.append((float(at), loads_once(body)))  # a key given twice is refused, as in API bodies
        except (ValueError, json.JSONDecodeError) as e:
            _usage(f"--inject {spec!r}: {e}")
        if not (out[-1][0] >= 0 and math.isfinite(out[-1][0])):  # -5 fired at the first tick, inf never: said
            _usage(f"--inject {spec!r}: the time after @ must be a finite number of seconds >= 0")
    return sorted(out, key=lambda x: x[0])


# The most ticks one `--source sim` run simulates: a day at 1 s ticks, a few minutes here. Past it, a tick of
# 1e-300 s ran forever (t + tick_s == t once t is past 1e-284: the clock never reached --duration-s), and one of
# 0.001 s over the default 600 s (600,000 ticks at 3.7 ms each) for 37 minutes.
MAX_SIM_TICKS = 100_000


def _check_ticks(duration_s: float, interval_s: float) -> None:
    """Exit 2 in one line when ``--duration-s`` over ``--interval-s`` is more ticks than a run simulates."""
    ticks = duration_s / interval_s
    if ticks > MAX_SIM_TICKS:
        count = f"{ticks:,.0f}" if ticks < 1e15 else f"{ticks:.3g}"
        _usage(
            f"--interval-s {interval_s:g} over --duration-s {duration_s:g} is {count} ticks; at most "
            f"{MAX_SIM_TICKS:,} are simulated (here --interval-s >= {smallest_interval(duration_s)}, or a shorter "
            "--duration-s)"
        )


def smallest_interval(duration_s: float) -> str:
    """The smallest ``--interval-s`` of six significant digits that ``duration_s`` allows, as the hint prints it:
    rounded up, so that the value printed runs (``duration_s / MAX_SIM_TICKS`` printed with ``:g`` rounds to nearest:
    123456.1 s gave 1.23456, itself refused)."""
    exact = duration_s / MAX_SIM_TICKS
    if not exact > 0:  # a duration that short allows every interval a float holds
        return f"{math.ulp(0.0):g}"
    text = f"{exact:.6g}"
    step = 0
    while duration_s / float(text) > MAX_SIM_TICKS:  # rounded down, or the division rounds past the bound
        step += 1
        exponent = math.floor(math.log10(float(text))) - 5
        text = f"{float(text) + step * 10.0**exponent:.6g}"
    return text


def run_sim(
    *,
    trace: str,
    replicas: int,
    routing: str,
    duration_s: float,
    tick_s: float,
    injections: Sequence[str],
    as_json: bool,
) -> list[Finding]:
    from detectors.registry import Detection
    from simulator import Fleet, FleetConfig, load_trace, parse_fault

    pending = _parse_injections(injections)
    try:
        faults = [(t, parse_fault(body)) for t, body in pending]
        fleet = Fleet(FleetConfig(replicas=replicas, routing=routing), load_trace(trace, seed=0))
    except (FileNotFoundError, ValueError) as e:  # a missing trace, an unknown fault or routing: the user's to fix
        _usage(str(e).splitlines()[0])
    # Keep vanished GPUs for an hour: forgetting one would silently close its drain finding.
    state = FleetState(stale_after_s=3 * tick_s, forget_after_s=max(3600, 3 * tick_s))
    detection = Detection()
    t = 0.0
    while t < duration_s:
        t += tick_s
        while faults and faults[0][0] <= t:
            at, fault = faults.pop(0)
            try:
                fleet.inject(fault)
            except KeyError as e:  # a node, GPU or replica the fleet does not have (the simulator's API: 400)
                _usage(f"--inject at {at:g}s: {str(e).strip(chr(34) + chr(39))}")
        fleet.advance_to(t)
        reps, gpus, nodes = samples_from_snapshot(fleet.snapshot(), now=t)
        state.observe(reps, gpus, now=t, gpu_nodes_scraped=nodes)
        tr = detection.tick(state, now=t)
        for f in tr.opened:
            _emit("opened", f, t, as_json)
        for f in tr.closed:
            _emit("closed", f, t, as_json)
    return detection.active()


def _targets(urls: Sequence[str]) -> list[TargetInfo]:
    """A target per URL, its replica named by the URL as kvpilot shows it (``redacted``: no password or token in the
    findings and tables); two URLs that differ only in a secret stay two replicas (the second ``#2``)."""
    meet(urls)
    return [TargetInfo(url=url, pod=redacted(url), deployment="detect") for url in urls]


async def _scrape(collector: Collector, targets: Sequence[TargetInfo], state: FleetState) -> tuple[float, bool]:
    """One round through the scrape loop's own collector (its timeout, page cap and adapters); a target that fails
    is named on stderr and shows as target_down. Returns the round's time and whether any target answered."""
    result = await collector.collect_once(targets)
    for r in result.results:
        if not r.ok:
            typer.echo(f"scrape {redacted(r.target.url)} failed: {r.error}", err=True)
    state.observe(
        result.replicas,
        result.gpus,
        now=result.timestamp,
        down_targets=result.down_targets,
        gpu_nodes_scraped=result.gpu_nodes_scraped,
    )
    return result.timestamp, any(r.ok for r in result.results)


async def run_urls(
    urls: Sequence[str], *, watch: bool, interval_s: float, as_json: bool, max_bytes: int | None = None
) -> bool:
    """Scrape ``urls`` twice one interval apart and print the detectors' raw output, or (``watch``) every interval,
    printing findings as they open and close. Returns whether any URL was scraped (one-shot). ``max_bytes``: the
    page cap (``--max-body-bytes``; None: the scrape loop's default), named in the error of a page over it."""
    from detectors.registry import Detection, run_all

    state = FleetState(stale_after_s=3 * interval_s, forget_after_s=max(3600, 3 * interval_s))
    targets = _targets(urls)
    # each failure is printed once by _scrape; the collector's own "target is down" log line would repeat it
    logging.getLogger("collector.health").setLevel(logging.ERROR)
    config = ScrapeConfig(
        timeout_s=SCRAPE_TIMEOUT_S,
        max_bytes=MAX_BODY_BYTES if max_bytes is None else max_bytes,
        max_concurrency=16,
        max_bytes_name=PAGE_CAP_FLAG,  # detect reads no settings: its flag, not collector.max_body_bytes
    )
    async with Collector(config) as collector:
        if not watch:
            _, first_ok = await _scrape(collector, targets, state)
            await asyncio.sleep(interval_s)  # rates need two samples one interval apart
            now, second_ok = await _scrape(collector, targets, state)
            found = run_all(state, now=now)
            for f in found:
                _emit("raw", f, now, as_json)
            scraped = first_ok or second_ok
            # a run that finds nothing says so, as the simulated run's closing count does; one that read nothing
            # does not (its failures are on stderr and it exits 2): "0 finding(s)" would read as a healthy fleet
            if scraped and not as_json:
                typer.echo(f"{len(found)} finding(s) from {len(targets)} target(s)")
            return scraped
        detection = Detection()
        while True:
            started = time.monotonic()
            now, _ = await _scrape(collector, targets, state)
            tr = detection.tick(state, now=now)
            for f in tr.opened:
                _emit("opened", f, now, as_json)
            for f in tr.closed:
                _emit("closed", f, now, as_json)
            await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - started)))


def _sources(values: Sequence[str]) -> list[str]:
    """``--source`` values, each 'sim', a URL or URLs separated by commas; a mistake exits 2 with one line."""
    out = list(dict.fromkeys(v.strip() for value in values for v in value.split(",") if v.strip()))
    for v in out:
        if v != SIM and not is_http_url(v):
            _usage(f"--source {redacted(v)!r} is neither 'sim' nor an http(s) URL (e.g. http://10.0.3.17:8000/metrics)")
    if not out:
        _usage("--source is empty; give 'sim' or one or more /metrics URLs")
    if SIM in out and out != [SIM]:
        _usage("--source sim cannot be mixed with URLs; run them as two commands")
    return out


def _usage(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def command(
    source: Annotated[
        list[str],
        typer.Option("--source", help="'sim', or /metrics URLs: repeat --source or separate them with commas"),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per finding")] = False,
    watch: Annotated[bool, typer.Option("--watch", help="keep scraping; print findings as they open/close")] = False,
    interval_s: Annotated[float, typer.Option(help="scrape interval (URL sources) / tick (sim)")] = 5.0,
    trace: Annotated[str, typer.Option(help="sim: trace path or synthetic spec")] = "synthetic:duration_s=1800,rate=8",
    replicas: Annotated[int, typer.Option(help="sim: replica count", min=1, max=1024)] = 4,  # as simulate
    routing: Annotated[str, typer.Option(help="sim: round_robin | least_loaded | prefix_affinity")] = "least_loaded",
    duration_s: Annotated[float, typer.Option(help="sim: virtual seconds to run")] = 600.0,
    inject: Annotated[list[str] | None, typer.Option(help="sim: fault JSON@seconds (repeatable)")] = None,
    max_body_bytes: Annotated[int | None, typer.Option(PAGE_CAP_FLAG, help=f"URLs: {PAGE_CAP_HELP}")] = None,
) -> None:
    """Run the detectors and print findings. Exit status 2 when no --source URL could be scraped (one-shot)."""
    check_numbers(
        ("--interval-s", interval_s, ABOVE_ZERO),
        ("--duration-s", duration_s, ABOVE_ZERO),
        (PAGE_CAP_FLAG, max_body_bytes, PAGE_CAP),
    )
    source = _sources(source)
    if source == [SIM]:
        _check_ticks(duration_s, interval_s)
        active = run_sim(
            trace=trace,
            replicas=replicas,
            routing=routing,
            duration_s=duration_s,
            tick_s=interval_s,
            injections=inject or [],
            as_json=as_json,
        )
        if not as_json:
            typer.echo(f"{len(active)} finding(s) open at the end")
        return
    if not asyncio.run(run_urls(source, watch=watch, interval_s=interval_s, as_json=as_json, max_bytes=max_body_bytes)):
        raise typer.Exit(2)  # every URL failed, each named on stderr above, as `kvpilot scrape` exits
