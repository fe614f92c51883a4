"""OpenMetrics text: interim delegation to prometheus_client's parser (being replaced)."""

from __future__ import annotations

from collections.abc import Callable

from collector.exposition._model import ParseError, Sample, Sink


def parse_openmetrics(text: str, keep: Callable[[str], bool], sink: Sink) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    try:
        families = list(text_string_to_metric_families(text))  # type: ignore[no-untyped-call]
    except ValueError as e:
        raise ParseError(str(e)) from None
    for fam in families:
        if keep(fam.name):
            samples = [
                Sample(s.name, dict(s.labels), float(s.value), None if s.timestamp is None else float(s.timestamp))
                for s in fam.samples
            ]
            sink.add(fam.name, fam.type, fam.documentation, samples, fam.unit)
