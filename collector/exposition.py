"""Prometheus text (0.0.4) and OpenMetrics exposition parsing into families of samples.

PLACEHOLDER IMPLEMENTATION: delegates to prometheus_client's parser (the correctness oracle).
The fast, selective, bounded parser replaces the body of `parse` keeping this interface.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field


class ParseError(ValueError):
    """Malformed exposition text; names the 1-based line where parsing failed."""

    def __init__(self, message: str, *, line_no: int | None = None, line: str | None = None) -> None:
        where = f"line {line_no}: " if line_no is not None else ""
        shown = f" ({line[:200]!r})" if line is not None else ""
        super().__init__(f"{where}{message}{shown}")
        self.line_no = line_no
        self.line = line


@dataclass(frozen=True, slots=True)
class Sample:
    name: str  # full sample name, e.g. "vllm:time_to_first_token_seconds_bucket"
    labels: dict[str, str]
    value: float
    timestamp: float | None = None


@dataclass(slots=True)
class MetricFamily:
    # Family name as prometheus_client names it: counters lose their "_total" suffix,
    # histogram/summary families carry the base name.
    name: str
    type: str  # counter | gauge | histogram | summary | untyped | unknown | info | stateset | gaugehistogram
    help: str = ""
    samples: list[Sample] = field(default_factory=list)


Wanted = Collection[str] | Callable[[str], bool] | None


def parse(text: str, *, wanted: Wanted = None, openmetrics: bool = False) -> dict[str, MetricFamily]:
    """Parse exposition text, keeping only the families ``wanted`` selects (all when None)."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
    from prometheus_client.parser import text_string_to_metric_families as text_parse

    keep = _selector(wanted)
    out: dict[str, MetricFamily] = {}
    try:
        families = list((om_parse if openmetrics else text_parse)(text))
    except ValueError as e:
        raise ParseError(str(e)) from e
    for fam in families:
        if not keep(fam.name):
            continue
        mf = out.setdefault(fam.name, MetricFamily(fam.name, fam.type, fam.documentation))
        for s in fam.samples:
            ts = None if s.timestamp is None else float(s.timestamp)
            mf.samples.append(Sample(s.name, dict(s.labels), float(s.value), ts))
    return out


def _selector(wanted: Wanted) -> Callable[[str], bool]:
    if wanted is None:
        return lambda _name: True
    if callable(wanted):
        return wanted
    names = frozenset(wanted)
    return names.__contains__
