"""`kvpilot scrape URL...`: scrape live targets once and print their canonical samples.

Uses the scrape loop's own collector (same timeout, size cap and adapters), so what it prints is what
kvpilot would see. Exit status 2, with one line per failed target on stderr, when any target fails, and when a
page lacks the families of the adapter asked for (`--engine`, `--kind gpu`), as in `kvpilot parse`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated

import typer

from kvpilot.commands._numbers import PAGE_CAP, PAGE_CAP_FLAG, PAGE_CAP_HELP, Bound, check_numbers
from kvpilot.commands.parse import EngineChoice


class KindChoice(StrEnum):
    engine = "engine"
    gpu = "gpu"


def _fail(message: str) -> typer.Exit:
    typer.echo(f"kvpilot scrape: {message}", err=True)
    return typer.Exit(code=2)


def replica_names(urls: Sequence[str]) -> list[str]:
    """A name per URL that tells replicas apart even in a narrow column: the host and port when only one URL uses
    them; otherwise (the simulator or a proxy serves each replica under its own path on one port) the part of the
    path that differs, first, then the host: ``llama-0@10.0.0.5:8000`` for ``http://10.0.0.5:8000/replicas/llama-0/metrics``.
    Read off each URL as kvpilot shows it (``redacted``: a token in the query named the column), and two that still
    read alike (they differ only in a secret) are numbered (``#2``).
    """
    from urllib.parse import urlsplit

    from collector.urls import meet, redacted

    def host(url: str) -> str:  # never a user:password@ in a name (shown in the tables, the JSON and the logs)
        return urlsplit(url).netloc.rpartition("@")[2]

    meet(urls)
    urls = [redacted(url) for url in urls]
    by_host: dict[str, list[str]] = {}
    for url in urls:
        by_host.setdefault(host(url), []).append(url)
    names = []
    for url in urls:
        parts = urlsplit(url)
        group = by_host[host(url)]
        if len(group) == 1:
            names.append(host(url))
            continue
        segments = [_segments(u) for u in group]
        head = _common(segments)
        tail = _common([s[head:][::-1] for s in segments])
        own = _segments(url)
        distinct = "/".join(own[head : len(own) - tail]) or parts.path or "/"
        names.append(f"{distinct}@{host(url)}")
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        seen[name] = seen.get(name, 0) + 1
        names[i] = name if seen[name] == 1 else f"{name}#{seen[name]}"
    return names


def _segments(url: str) -> list[str]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return [p for p in parts.path.split("/") if p] + ([f"?{parts.query}"] if parts.query else [])


def _common(lists: Sequence[Sequence[str]]) -> int:
    """How many leading items every list shares."""
    n = 0
    while all(len(x) > n for x in lists) and len({x[n] for x in lists}) == 1:
        n += 1
    return n


def command(
    urls: Annotated[list[str], typer.Argument(help="Metrics URLs, e.g. http://10.0.0.5:8000/metrics.")],
    engine: Annotated[
        EngineChoice,
        typer.Option(
            "--engine",
            help="Adapter to use (any case); auto detects it from the page. A page without its families is an error.",
            case_sensitive=False,
        ),
    ] = EngineChoice.auto,
    kind: Annotated[
        KindChoice, typer.Option("--kind", help="engine: an inference server; gpu: a dcgm-exporter page.")
    ] = KindChoice.engine,
    prefix: Annotated[
        str | None,
        typer.Option(
            "--prefix",
            help="Text a serving stack puts before the engine's names (Ray Serve LLM: ray_); found on the page "
            'when not given, "" not to look.',
        ),
    ] = None,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds per target, whole scrape, >= 0.1.")] = 5.0,
    max_body_bytes: Annotated[int | None, typer.Option(PAGE_CAP_FLAG, help=PAGE_CAP_HELP)] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help='Print {"replicas": [...], "gpus": [...]} with the sample field names.')
    ] = False,
) -> None:
    """Scrape URLs once and print the canonical replica and GPU samples."""
    import asyncio
    from functools import partial

    from collector.adapt import GPU_ONLY, adapt_page
    from collector.samples import TargetInfo
    from collector.scrape import DEFAULT_MAX_BYTES, Collector, CollectResult, ScrapeConfig
    from collector.urls import is_http_url, redacted
    from kvpilot.render import console, print_tables, samples_json

    check_numbers(("--timeout", timeout_s, Bound(0.1)), (PAGE_CAP_FLAG, max_body_bytes, PAGE_CAP))
    for url in urls:
        if not is_http_url(url):
            raise _fail(f"{redacted(url)}: not an http(s) URL with a host")
    is_gpu = kind is KindChoice.gpu or engine is EngineChoice.dcgm
    urls = list(dict.fromkeys(urls))  # the same URL twice is one target, not two identical columns
    targets = [
        TargetInfo(
            url=url,
            kind="gpu" if is_gpu else "engine",
            engine=None if engine in (EngineChoice.auto, EngineChoice.dcgm) else engine.value,
            pod=name,
            prefix=prefix,
        )
        for url, name in zip(urls, replica_names(urls), strict=True)
    ]

    # `--engine X` (and `--kind gpu`, a GPU exporter's page) is checked against the page as `kvpilot parse` checks
    # it: a page without X's families is an error naming what the page holds, not an empty answer with status 0.
    named = None if engine is EngineChoice.auto else engine.value
    adapt = partial(adapt_page, engine=GPU_ONLY if is_gpu else named)

    # scrape reads no settings: a page over the cap names the flag that raises it, not collector.max_body_bytes
    cap = DEFAULT_MAX_BYTES if max_body_bytes is None else max_body_bytes
    config = ScrapeConfig(timeout_s=timeout_s, max_bytes=cap, max_concurrency=16, max_bytes_name=PAGE_CAP_FLAG)

    async def scrape() -> CollectResult:
        async with Collector(config, adapt=adapt) as collector:
            return await collector.collect_once(targets)

    # each failure is printed below, once; the scrape loop's own "target is down" log line would repeat it
    logging.getLogger("collector.health").setLevel(logging.ERROR)
    result = asyncio.run(scrape())
    if as_json:
        typer.echo(samples_json(result.replicas, result.gpus))
    elif result.replicas or result.gpus:
        print_tables(console(), result.replicas, result.gpus)
    failed = [r for r in result.results if not r.ok]
    for r in failed:
        typer.echo(f"kvpilot scrape: {redacted(r.target.url)}: {r.error}", err=True)
    if failed:
        raise typer.Exit(code=2)
