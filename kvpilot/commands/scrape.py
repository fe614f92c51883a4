"""`kvpilot scrape URL...`: scrape live targets once and print their canonical samples.

Uses the scrape loop's own collector (same timeout, size cap and adapters), so what it prints is what
kvpilot would see. Exit status 2, with one line per failed target on stderr, when any target fails.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from kvpilot.commands.parse import EngineChoice


class KindChoice(StrEnum):
    engine = "engine"
    gpu = "gpu"


def _fail(message: str) -> typer.Exit:
    typer.echo(f"kvpilot scrape: {message}", err=True)
    return typer.Exit(code=2)


def command(
    urls: Annotated[list[str], typer.Argument(help="Metrics URLs, e.g. http://10.0.0.5:8000/metrics.")],
    engine: Annotated[
        EngineChoice, typer.Option("--engine", help="Adapter to use; auto detects it from the families present.")
    ] = EngineChoice.auto,
    kind: Annotated[
        KindChoice, typer.Option("--kind", help="engine: an inference server; gpu: a dcgm-exporter page.")
    ] = KindChoice.engine,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds per target, whole scrape.", min=0.1)] = 5.0,
    as_json: Annotated[
        bool, typer.Option("--json", help='Print {"replicas": [...], "gpus": [...]} with the sample field names.')
    ] = False,
) -> None:
    """Scrape URLs once and print the canonical replica and GPU samples."""
    import asyncio
    from urllib.parse import urlsplit

    from rich.console import Console

    from collector.samples import TargetInfo
    from collector.scrape import Collector, CollectResult, ScrapeConfig
    from kvpilot.render import print_tables, samples_json

    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _fail(f"{url}: not an http(s) URL with a host")
    is_gpu = kind is KindChoice.gpu or engine is EngineChoice.dcgm
    targets = [
        TargetInfo(
            url=url,
            kind="gpu" if is_gpu else "engine",
            engine=None if engine in (EngineChoice.auto, EngineChoice.dcgm) else engine.value,
            pod=urlsplit(url).netloc,
        )
        for url in urls
    ]

    async def scrape() -> CollectResult:
        async with Collector(ScrapeConfig(timeout_s=timeout_s, max_concurrency=16)) as collector:
            return await collector.collect_once(targets)

    result = asyncio.run(scrape())
    if as_json:
        typer.echo(samples_json(result.replicas, result.gpus))
    elif result.replicas or result.gpus:
        print_tables(Console(), result.replicas, result.gpus)
    failed = [r for r in result.results if not r.ok]
    for r in failed:
        typer.echo(f"kvpilot scrape: {r.target.url}: {r.error}", err=True)
    if failed:
        raise typer.Exit(code=2)
