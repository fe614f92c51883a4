"""`kvpilot parse FILE`: the canonical samples of a saved /metrics page, to check an adapter by eye.

A page saved gzip-compressed is inflated first, as the scrape loop's client inflates one. Exit status 2, with a
one-line reason on stderr, for a file that cannot be read, a malformed page (the
parser names the line), a page no adapter recognises (the reason says what the page holds and what to try)
and a page without the families of the engine asked for.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, BinaryIO

import typer

from kvpilot.commands._numbers import PAGE_CAP, PAGE_CAP_FLAG, PAGE_CAP_HELP, check_numbers


class EngineChoice(StrEnum):
    auto = "auto"
    vllm = "vllm"
    sglang = "sglang"
    tgi = "tgi"
    trtllm = "trtllm"
    trtllm_pytorch = "trtllm-pytorch"
    llamacpp = "llamacpp"
    nim = "nim"
    mindie = "mindie"
    dynamo = "dynamo"
    dcgm = "dcgm"


GZIP_MAGIC = b"\x1f\x8b"


def _fail(message: str) -> typer.Exit:
    typer.echo(f"kvpilot parse: {message}", err=True)
    return typer.Exit(code=2)


def command(
    file: Annotated[Path, typer.Argument(help="A saved /metrics page (Prometheus text or OpenMetrics).")],
    engine: Annotated[
        EngineChoice, typer.Option("--engine", help="Adapter to use; auto detects it from the families present.")
    ] = EngineChoice.auto,
    prefix: Annotated[
        str | None,
        typer.Option(
            "--prefix",
            help="Text a serving stack puts before the engine's names (Ray Serve LLM: ray_); found on the page "
            "when not given.",
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help='Print {"replicas": [...], "gpus": [...]} with the sample field names.')
    ] = False,
    max_body_bytes: Annotated[int | None, typer.Option(PAGE_CAP_FLAG, help=PAGE_CAP_HELP)] = None,
) -> None:
    """Print the canonical replica and GPU samples of a saved /metrics page."""
    from collector.adapt import adapt_page
    from collector.engines import UnknownEngine
    from collector.exposition import ParseError
    from collector.samples import TargetInfo
    from collector.scrape import DEFAULT_MAX_BYTES
    from kvpilot.render import console, print_tables, samples_json

    check_numbers((PAGE_CAP_FLAG, max_body_bytes, PAGE_CAP))
    cap = DEFAULT_MAX_BYTES if max_body_bytes is None else max_body_bytes
    try:
        with file.open("rb") as f:
            body = _read_upto(f, cap + 1)  # the scrape loop's cap: a page it would refuse is refused here
        mtime = file.stat().st_mtime
    except OSError as err:
        raise _fail(f"cannot read {file}: {err.strerror or err}") from None
    if body.startswith(GZIP_MAGIC):  # saved as a server sends it to a client asking for gzip: read as scrapes read it
        body = _gunzipped(body, file, cap)
    if len(body) > cap:  # parse reads no settings: its flag raises the cap (kvpilot run's is collector.max_body_bytes)
        raise _fail(f"{file}: larger than {cap} bytes, the page cap; raise {PAGE_CAP_FLAG} to read it")
    # OpenMetrics pages end with "# EOF"; a saved page has no Content-Type to say so
    openmetrics = body.rstrip().endswith(b"# EOF")
    target = TargetInfo(url=str(file), kind="gpu" if engine is EngineChoice.dcgm else "engine", prefix=prefix)
    try:
        page = adapt_page(
            body,
            target,
            mtime,
            content_type="application/openmetrics-text" if openmetrics else None,
            engine=None if engine is EngineChoice.auto else engine.value,
        )
    except ParseError as err:
        raise _fail(f"{file}: malformed page: {err}") from None
    except UnknownEngine as err:
        reason = _prefix_missing(body, openmetrics, file, mtime, prefix) if prefix else None
        raise _fail(f"{file}: {reason or err}") from None
    except ValueError as err:  # an adapter's refusal (a page naming too many replicas), as the scrape loop says it
        raise _fail(f"{file}: unreadable page: {err}") from None
    for error in page.parse_errors:  # a page read in part says so, as the scrape loop does per target
        typer.echo(f"kvpilot parse: {file}: read in part: {error}", err=True)
    if page.prefix:  # names read behind a stack's prefix, or a compatible server's namespace, say so
        typer.echo(f"kvpilot parse: {file}: {_behind(page.prefix, page.engine)}", err=True)
    if as_json:
        typer.echo(samples_json(page.replicas, page.gpus))
    else:
        print_tables(console(), page.replicas, page.gpus)


READ_CHUNK = 1 << 20


def _read_upto(f: BinaryIO, limit: int) -> bytes:
    """At most ``limit`` bytes of ``f``, read a chunk at a time: ``f.read(limit)`` allocates ``limit`` bytes first, so a
    cap raised to mean "no cap" (``--max-body-bytes 1000000000000``) was a MemoryError traceback, and one past
    2**63 an OverflowError, whatever the page's size."""
    chunks: list[bytes] = []
    while limit > 0 and (chunk := f.read(min(limit, READ_CHUNK))):
        chunks.append(chunk)
        limit -= len(chunk)
    return b"".join(chunks)


def _gunzipped(body: bytes, file: Path, cap: int) -> bytes:
    """A page saved gzip-compressed (``curl -H 'Accept-Encoding: gzip'``, a proxy's capture), inflated up to ``cap`` + 1
    bytes: was "malformed page: line 1: invalid UTF-8 at byte 1" and 200 characters of compressed bytes."""
    import zlib

    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        page = inflate.decompress(body, min(cap + 1, sys.maxsize))  # a length past a C size was an OverflowError
    except zlib.error as err:
        raise _fail(f"{file}: starts as gzip but does not inflate ({err}); save the page uncompressed") from None
    if len(page) <= cap and not inflate.eof:
        raise _fail(f"{file}: a gzip-compressed page cut short; save it again (or uncompressed)")
    return page


def _behind(prefix: str, engine: str | None) -> str:
    from collector.engines._prefix import is_namespace

    where = f"under the namespace `{prefix}`" if is_namespace(prefix) else f"behind the prefix `{prefix}`"
    if engine is None:  # no engine's names: only a GPU exporter's, read behind the prefix
        return f"read as GPUs only: no engine's names, a GPU exporter's {where}"
    if is_namespace(prefix):
        return f"read as {engine}: its names are {engine}'s {where} (a compatible server's)"
    return f"read as {engine}: its names are {engine}'s {where}"


def _prefix_missing(body: bytes, openmetrics: bool, file: Path, mtime: float, prefix: str) -> str | None:
    """When no family starts with ``--prefix``, say so and how the page reads without it; else None. The adapters
    see only the families under the prefix, so a wrong one would otherwise read as a page with no families at all."""
    from collector.adapt import adapt_page
    from collector.engines import UnknownEngine
    from collector.exposition import ParseError, parse
    from collector.samples import TargetInfo

    try:  # the strict parse: a page the adapters read in part (a malformed line) raised here, a traceback, exit 1
        names = parse(body, openmetrics=openmetrics)
    except ParseError:
        return None  # the adapters' own words, which say what they read
    if any(name.startswith(prefix) for name in names):
        return None
    missing = f"no family on the page starts with `{prefix}` (--prefix)"
    content_type = "application/openmetrics-text" if openmetrics else None
    try:
        page = adapt_page(body, TargetInfo(url=str(file), kind="engine"), mtime, content_type=content_type)
    except UnknownEngine as err:
        return f"{missing}; without it: {err}"
    except ValueError:  # an adapter's refusal without the prefix: the words with it stand
        return None
    return f"{missing}; without it the page reads as {page.engine or 'GPUs only'}: leave --prefix out"
