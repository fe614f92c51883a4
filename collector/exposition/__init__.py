"""Prometheus text (0.0.4) and OpenMetrics exposition parsing into families of samples.

Only the families a caller asks for are read; the rest are skipped from their metric-name prefix.
Families, types, help, sample names, labels, values and timestamps agree with prometheus_client's
parsers (the correctness oracle) on every page they accept, except for the documented cases where the
oracle accepts a line by accident, and a page without TYPE lines, whose histograms and summaries are read whole
(``_untyped``). Malformed input raises ``ParseError`` naming the line. The work is
linear in the page; the page size itself is capped by the scrape loop, the sample count here, and the
time, where a caller watches it, by ``watched_by``.
"""

from __future__ import annotations

from collections.abc import Collection
from functools import partial

from collector.exposition._layout import LayoutCache
from collector.exposition._model import (
    DEFAULT_MAX_SAMPLES,
    MetricFamily,
    ParseError,
    Sample,
    Sink,
    Wanted,
    decode_utf8,
    selector,
    watched_by,
)
from collector.exposition._openmetrics import parse_openmetrics
from collector.exposition._partial import PartialPage, read_around
from collector.exposition._text import parse_selected, parse_text
from collector.exposition._untyped import assemble, has_untyped, keep_parts

__all__ = [
    "DEFAULT_MAX_SAMPLES",
    "LayoutCache",
    "MetricFamily",
    "ParseError",
    "PartialPage",
    "Sample",
    "Wanted",
    "is_openmetrics",
    "parse",
    "watched_by",
]


def parse(
    text: str | bytes,
    *,
    wanted: Wanted = None,
    openmetrics: bool = False,
    max_samples: int = DEFAULT_MAX_SAMPLES,
    drop_bad_lines: bool = False,
    expect_bad: Collection[str] = (),
) -> dict[str, MetricFamily]:
    """Parse an exposition page, keeping only the families ``wanted`` selects (all when None).

    ``wanted`` holds family names as prometheus_client names them (a text-format counter
    ``foo_total`` is family ``foo``) or is a predicate over them. Bytes must be UTF-8. A text page without
    TYPE lines has its histograms and summaries put back together (``collector.exposition._untyped``).
    ``drop_bad_lines`` (text format): a sample line that cannot be read loses its family, not the page; the result
    is then a ``PartialPage`` that says what was left out (``collector.exposition._partial``). ``expect_bad``: the
    metric names set aside on the source's last page (its ``PartialPage.names``), tried first so that the page is
    read once if their lines still fail, and read whole if they read again.
    """
    if isinstance(text, bytes):
        text = decode_utf8(text)
    if openmetrics:
        sink = Sink(max_samples)
        parse_openmetrics(text, selector(wanted), sink)
        return sink.families
    if not drop_bad_lines:
        return _parse_text(text, wanted, max_samples)
    if expect_bad:
        return read_around(text, partial(_parse_text, wanted=wanted, max_samples=max_samples), None, expect_bad)
    try:
        return _parse_text(text, wanted, max_samples)
    except ParseError as e:
        return read_around(text, partial(_parse_text, wanted=wanted, max_samples=max_samples), e)


def _parse_text(text: str, wanted: Wanted, max_samples: int) -> dict[str, MetricFamily]:
    sink = Sink(max_samples)
    # A page without TYPE lines splits a histogram into untyped parts: read them too, and put them together.
    if type(wanted) is frozenset:  # the scrape loop's selection: one look, and none after a page of typed families
        pairs = parse_selected(text, wanted, sink)  # the families wanted and their untyped parts
        if not pairs and (not sink.families or wanted.issuperset(sink.families)):
            return sink.families  # no part read for itself: nothing to put together, nothing to drop
        return assemble(sink.families, wanted.__contains__)
    if wanted is None:  # every family: there is nothing to drop, only parts to put together where a page has them
        parse_text(text, selector(None), sink)
        return assemble(sink.families, None) if has_untyped(sink.families) else sink.families
    keep = selector(wanted)
    parse_text(text, keep_parts(keep), sink)
    return assemble(sink.families, keep)


def is_openmetrics(content_type: str | None) -> bool:
    """Whether a response's Content-Type announces OpenMetrics text (otherwise: Prometheus text)."""
    if not content_type:
        return False
    return content_type.split(";", 1)[0].strip().lower() == "application/openmetrics-text"
