"""A text page read around the lines that break it: ``parse(..., drop_bad_lines=True)``, what the scrape loop reads.

A serving stack sometimes writes a line no parser can read: dcgm-exporter writes ``ERROR - FAILED TO CONVERT TO
STRING`` as the value of a field it cannot render as text, an exporter cuts a line short, a label value holds a stray
quote. Read strictly, one such line loses the whole page: every replica's queue and every GPU's health on it. With
``drop_bad_lines``, a line whose fault is its own (its value, timestamp, labels or name) loses only its family: every
sample line of the same metric name is set aside, the page is read again, and the family those lines belong to is
left out. The whole family, not only the bad series: a family with one series unreadable would otherwise be summed
or averaged as if it had one series fewer (a queue read short, a mean KV usage over the GPUs that could be read),
where a missing family reads as unknown, which every reader already handles.

What was left out is on the result (``PartialPage``): ``errors``, one ``ParseError`` per metric name set aside,
each naming its first bad line, and ``dropped``, the families left out. What still loses the page, as before: a
fault in a HELP or TYPE line (they decide where families begin and end), a series a typed family carries twice
(which copy is right is unknowable), the sample cap and the time budget (``ParseError.whole_page``), invalid UTF-8,
and faults under more than ``MAX_BAD_NAMES`` metric names (a page that broken is not one to guess at). OpenMetrics
pages are read strictly: the format's strictness is its point.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from collector.exposition._lex import NAME_RE
from collector.exposition._model import MetricFamily, ParseError

MAX_BAD_NAMES = 8

# What follows a family's name in its samples' names (a counter's _total, a histogram's parts, OpenMetrics' _created).
_SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created", "_info", "_gsum", "_gcount")


class PartialPage(dict[str, MetricFamily]):
    """A page's families less those some of its lines broke: ``errors`` says which lines and why, ``dropped`` which
    families were left out (see the module docstring)."""

    __slots__ = ("dropped", "errors")

    def __init__(
        self, families: dict[str, MetricFamily], errors: tuple[ParseError, ...], dropped: frozenset[str]
    ) -> None:
        super().__init__(families)
        self.errors = errors
        self.dropped = dropped


def read_around(text: str, read: Callable[[str], dict[str, MetricFamily]], first: ParseError) -> PartialPage:
    """``text`` read by ``read`` without the families of the sample lines that broke it; ``first`` is the error the
    whole page ended in. Raises the error that cannot be read around (see the module docstring)."""
    lines = text.split("\n")
    errors: list[ParseError] = []
    names: set[str] = set()
    error = first
    while True:
        name = _line_name(lines, error)
        if name is None or name in names or len(names) >= MAX_BAD_NAMES:
            raise error
        errors.append(error)
        names.add(name)
        for i, raw in enumerate(lines):  # blank, not removed: every other line keeps its number
            if _sample_name(raw) == name:
                lines[i] = ""
        try:
            families = read("\n".join(lines))
        except ParseError as e:
            error = e
            continue
        break
    left_out = set().union(*(_families_of(n, families) for n in names))
    kept = {n: f for n, f in families.items() if n not in left_out}
    # a family none of whose lines is left (no HELP or TYPE line either) is named by its lines' metric name
    left_out.update(n for n in names if not any(_belongs(f, (n,)) for f in left_out))
    return PartialPage(kept, tuple(errors), frozenset(left_out))


def _sample_name(raw: str) -> str | None:
    """The metric name a sample line starts with; None for blank and ``#`` lines (and a name inside the braces)."""
    line = raw.lstrip()
    if not line or line[0] == "#":
        return None
    m = NAME_RE.match(line)
    return m.group() if m is not None else None


def _line_name(lines: list[str], error: ParseError) -> str | None:
    """The metric name of the sample line ``error`` is about, if the fault is that line's own."""
    if error.whole_page or error.line_no is None or not 0 < error.line_no <= len(lines):
        return None
    return _sample_name(lines[error.line_no - 1])


def _families_of(name: str, families: dict[str, MetricFamily]) -> set[str]:
    """The family the sample lines named ``name`` belonged to: the page's family of that very name where it declares
    one (a gauge ``x_info`` or ``x_count`` of its own, beside a healthy gauge ``x``), else the family its suffix says
    (``x_total``: counter ``x``; ``x_bucket``: histogram ``x``)."""
    if name in families:
        return {name}
    return {f for f in families if _belongs(f, (name,))}


def _belongs(family: str, names: Iterable[str]) -> bool:
    """Whether a sample named one of ``names`` belongs to ``family`` (``x_total`` to counter ``x``, ``x_bucket`` to
    histogram ``x``...)."""
    return any(n == family or (n.startswith(family) and n[len(family) :] in _SUFFIXES) for n in names)
