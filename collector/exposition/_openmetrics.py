"""OpenMetrics text 1.0, grouped and validated as prometheus_client's OpenMetrics parser does it.

Families keep their declared names (a counter ``foo`` holds ``foo_total`` and ``foo_created``); units,
``# EOF``, exemplars (validated, then dropped: ``Sample`` has no place for them) and the format's
rules on groups, duplicates, buckets and quantiles follow the oracle. Like the text backend, it
decides a line's family from its metric-name prefix and skips unwanted families unread (their
metadata is still checked: it is cheap and decides where families begin).

Deliberate differences, all refusals of lines the oracle accepts by accident: blanks inside a label
set, before "{" or more than one before the value; metric names inside the braces; native histograms
(experimental, and kvpilot never asks for them); escaped quotes in exemplar labels (the oracle's
exemplar scanner ignores escapes); and a negative timestamp above -1, which the oracle reads with the
wrong sign.

One reading differs: prometheus_client since 0.22 answers an Accept that names OpenMetrics with its samples'
names escaped (``:`` written ``_``, ``vllm_x_bucket``) under metadata that keeps them (``# TYPE vllm:x
histogram``; client_python#1177). The oracle reads each such sample name as a family of its own, untyped, so a
histogram falls apart into ``_bucket``, ``_count`` and ``_sum`` families; here the samples that follow their
family's metadata and carry its name so escaped are read as that family's, under the declared name, as the
classic text page reads them. A family that had samples under its declared name first is read as the oracle reads
it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from collector.exposition._lex import (
    LABEL_PAIR_RE,
    LABEL_VALUE,
    NAME,
    NAME_RE,
    OM_COMMENT,
    is_legacy_name,
    unescape_label_value,
    unquote_name,
)
from collector.exposition._model import BUDGET_CHECK_EVERY, ParseError, Sample, Sink
from collector.exposition._om_checks import TimeKey, check_histogram, is_integral, is_uncanonical, later, parse_stamp

_LABEL = rf"(?!__){NAME}={LABEL_VALUE}"
_BODY = rf"(?:{_LABEL}(?:,{_LABEL})*+)?+"
# exemplar label values may not hold an escaped quote: the oracle's exemplar scanner would misread it
_EXEMPLAR_LABEL = rf'(?!__){NAME}="(?:[^"\\]|\\[^"])*+"'
_TOKEN = r'[^\s{}"#]++'
SAMPLE_RE = re.compile(
    rf"({NAME})(?:\{{({_BODY})\}})? ({_TOKEN})(?: ({_TOKEN}))?+"
    rf"(?: # \{{((?:{_EXEMPLAR_LABEL}(?:,{_EXEMPLAR_LABEL})*+)?+)\}} ({_TOKEN})(?: ({_TOKEN}))?+)?+",
    re.DOTALL,
)
_META_RE = re.compile(rf"# ++(HELP|TYPE|UNIT) ++({NAME})(?: ++(.*+))?+", re.DOTALL)
_HELP_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_HELP_ESCAPE_RE = re.compile(r"\\[\\\"n]")

_SUFFIXES = {
    "counter": ("_total", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "histogram": ("_count", "_sum", "_bucket", "_created"),
    "gaugehistogram": ("_gcount", "_gsum", "_bucket"),
    "info": ("_info",),
}
_TYPES = frozenset({"counter", "gauge", "summary", "histogram", "gaugehistogram", "unknown", "info", "stateset"})
_COUNTER_LIKE = ("_total", "_sum", "_count", "_bucket", "_gcount", "_gsum")


def parse_openmetrics(text: str, keep: Callable[[str], bool], sink: Sink) -> None:
    _OpenMetricsParser(keep, sink).run(text)


class _Family:
    """The family being read: its metadata, and the state the format's grouping rules need."""

    __slots__ = (
        "allowed", "escaped", "first_line", "group", "group_series", "group_stamp", "has_samples", "help", "name",
        "samples", "seen_groups", "stamps", "typ", "unit", "wanted",
    )  # fmt: skip

    def __init__(self, name: str, line_no: int, wanted: bool, typ: str | None = None) -> None:
        self.name = name
        self.first_line = line_no
        self.wanted = wanted
        self.typ = typ
        self.help: str | None = None
        self.unit: str | None = None
        self.allowed: tuple[str, ...] = (name,)
        self.has_samples = False
        self.escaped = False  # its samples are written under its name with ":" escaped (see the module notes)
        self.samples: list[Sample] = []
        self.stamps: list[TimeKey | None] = []  # comparison keys, beside samples, for the histogram check
        self.group: tuple[tuple[str, str], ...] | None = None
        self.seen_groups: set[tuple[tuple[str, str], ...]] = set()
        self.group_stamp: TimeKey | None = None
        self.group_series: set[tuple[str, tuple[tuple[str, str], ...]]] = set()


class _OpenMetricsParser:
    def __init__(self, keep: Callable[[str], bool], sink: Sink) -> None:
        self.keep = keep
        self.sink = sink
        self.family: _Family | None = None
        self.seen_names: set[str] = set()

    def run(self, text: str) -> None:
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()  # a final newline ends the last line; it does not start an empty one
        room = self.sink.max_samples
        checkpoint = max(0, room - BUDGET_CHECK_EVERY)
        eof = False
        for line_no, line in enumerate(lines, 1):
            try:
                if eof:
                    raise ValueError("line after # EOF")
                if not line:
                    raise ValueError("blank line")
                if line == "# EOF":
                    eof = True
                elif line[0] == "#":
                    self._metadata(line, line_no)
                elif self._sample_line(line, line_no):
                    room -= 1
                    if room < checkpoint:
                        if room < 0:
                            raise ValueError(f"page has more than {self.sink.max_samples} samples")
                        self.sink.check_budget(line_no)
                        checkpoint = max(0, room - BUDGET_CHECK_EVERY)
            except ValueError as e:
                if isinstance(e, ParseError):
                    raise
                raise ParseError(str(e), line_no=line_no, line=line) from None
        self._close()
        if not eof:
            raise ParseError("missing # EOF at the end", line_no=max(len(lines), 1))

    def _metadata(self, line: str, line_no: int) -> None:
        m = _META_RE.fullmatch(line)
        if m is not None:
            keyword, candidate, rest = m.group(1), m.group(2), m.group(3)  # rest None: nothing after the name
        else:
            parts = OM_COMMENT.split(line, 3)
            if len(parts) < 4:
                raise ValueError("invalid metadata line (expected '# HELP|TYPE|UNIT name text')")
            keyword, rest = parts[1], parts[3]
            candidate, quoted = unquote_name(parts[2])
            if not quoted and not is_legacy_name(candidate):
                raise ValueError(f"invalid metric name {candidate!r}")
        if rest is None:
            raise ValueError("invalid metadata line (expected '# HELP|TYPE|UNIT name text')")
        family = self.family
        if family is not None and candidate == family.name and family.has_samples:
            raise ValueError("metadata after samples")
        if family is None or candidate != family.name:
            self._close()
            family = self.family = _Family(candidate, line_no, self.keep(candidate))
        if keyword == "HELP":
            if family.help is not None:
                raise ValueError("more than one HELP")
            family.help = _HELP_ESCAPE_RE.sub(lambda e: _HELP_ESCAPES[e.group()], rest) if "\\" in rest else rest
        elif keyword == "TYPE":
            if family.typ is not None:
                raise ValueError("more than one TYPE")
            if rest == "untyped":
                raise ValueError("TYPE untyped is not OpenMetrics (use unknown)")
            family.typ = rest
            family.allowed = tuple(candidate + s for s in _SUFFIXES.get(rest, ("",)))
        elif keyword == "UNIT":
            if family.unit is not None:
                raise ValueError("more than one UNIT")
            family.unit = rest
        else:
            raise ValueError(f"invalid metadata keyword {keyword!r}")

    def _sample_line(self, line: str, line_no: int) -> bool:
        """Read one sample line; True when it was kept (counts against the sample cap)."""
        m = NAME_RE.match(line)
        if m is None:
            raise ValueError("invalid metric name (names inside the braces are not supported)")
        sample_name = m.group()
        family = self.family
        if family is None or sample_name not in family.allowed:
            declared = None if family is None else _declared_name(family, sample_name)
            if family is None or declared is None:
                self._close()
                family = self.family = _Family(sample_name, line_no, self.keep(sample_name), "unknown")
            else:
                family.escaped = True
                line = declared + line[len(sample_name) :]
        family.has_samples = True
        if not family.wanted:
            return False
        _read_sample(family, line)
        return True

    def _close(self) -> None:
        """End the current family (the oracle's ``build_metric``): name clashes, unit, histogram rules."""
        family = self.family
        if family is None:
            return
        self.family = None
        name, typ, unit = family.name, family.typ or "unknown", family.unit or ""
        try:
            for suffix in {*_SUFFIXES.get(typ, ()), ""}:
                if name + suffix in self.seen_names:
                    raise ValueError(f"clashing name: {name + suffix}")
                self.seen_names.add(name + suffix)
            if unit and not name.endswith("_" + unit):
                raise ValueError(f"unit {unit!r} does not match metric name {name!r}")
            if unit and typ in ("info", "stateset"):
                raise ValueError(f"units are not allowed for {typ} metric {name!r}")
            if typ not in _TYPES:
                raise ValueError(f"invalid metric type {typ!r}")
            if not name:
                raise ValueError("empty metric name")
            name.encode("utf-8")
            if family.wanted and typ in ("histogram", "gaugehistogram"):
                rows = [(s.name, s.labels, s.value, k) for s, k in zip(family.samples, family.stamps, strict=True)]
                check_histogram(name, rows)
        except ValueError as e:
            raise ParseError(f"family {name!r}: {e}", line_no=family.first_line) from None
        if family.wanted:
            self.sink.add(name, typ, family.help or "", family.samples, unit)


def _declared_name(family: _Family, sample_name: str) -> str | None:
    """The name ``sample_name`` has in ``family`` when it is one of the family's sample names with the family's ``:``
    written ``_`` (prometheus_client's escaped OpenMetrics, see the module notes), and the family's samples so far, if
    any, were written so too; else None."""
    if ":" not in family.name or (family.has_samples and not family.escaped):
        return None
    escaped = family.name.replace(":", "_")
    if not sample_name.startswith(escaped):
        return None
    declared = family.name + sample_name[len(escaped) :]
    return declared if declared in family.allowed else None


def _read_sample(family: _Family, line: str) -> None:
    m = SAMPLE_RE.fullmatch(line)
    if m is None:
        raise ValueError("expected 'name{labels} value [timestamp] [# {labels} value [timestamp]]'")
    name, body, value_text, stamp_text, exemplar_body, exemplar_value, exemplar_stamp = m.groups()
    labels: dict[str, str] = {}
    if body:
        pairs = LABEL_PAIR_RE.findall(body)
        labels = dict(pairs) if "\\" not in body else {k: unescape_label_value(v) for k, v in pairs}
        if len(labels) != len(pairs):
            raise ValueError("duplicate label name")
    if "_" in value_text:
        raise ValueError(f"invalid value {value_text!r}")
    value = float(value_text)
    stamp = parse_stamp(stamp_text) if stamp_text is not None else None
    if exemplar_value is not None:
        _check_exemplar(family, name, exemplar_body, exemplar_value, exemplar_stamp)
    _check_value(family, name, labels, value, value_text)
    if stamp is None:
        _group(family, Sample(name, labels, value), None)
    else:
        _group(family, Sample(name, labels, value, stamp.seconds), stamp.key)


def _check_exemplar(family: _Family, name: str, body: str, value: str, stamp: str | None) -> None:
    labels = dict(LABEL_PAIR_RE.findall(body))
    if sum(len(k) + len(unescape_label_value(v)) for k, v in labels.items()) > 128:
        raise ValueError("exemplar labels are longer than 128 characters")
    if "_" in value:
        raise ValueError(f"invalid exemplar value {value!r}")
    float(value)
    if stamp is not None:
        parse_stamp(stamp)
    if not (
        (family.typ in ("histogram", "gaugehistogram") and name.endswith("_bucket"))
        or (family.typ == "counter" and name.endswith("_total"))
    ):
        raise ValueError("only histogram buckets and counter totals may carry exemplars")
    if len(labels) != len(LABEL_PAIR_RE.findall(body)):
        raise ValueError("duplicate exemplar label name")


def _check_value(family: _Family, name: str, labels: dict[str, str], value: float, text: str) -> None:
    """The oracle's per-sample rules (labels the type needs, integral counts, signs)."""
    base, typ = family.name, family.typ
    suffix = name[len(base) :]
    if typ == "stateset" and base not in labels:
        raise ValueError("stateset sample lacks its state label")
    if suffix == "_bucket" and (labels.get("le", "NaN") == "NaN" or is_uncanonical(labels["le"])):
        raise ValueError("invalid le label")
    if suffix == "_bucket" and not is_integral(text, value):
        raise ValueError("bucket value must be an integer")
    if suffix in ("_count", "_gcount") and not is_integral(text, value):
        raise ValueError("count value must be an integer")
    if typ == "summary" and not suffix:
        quantile = float(labels.get("quantile", -1))
        if not 0 <= quantile <= 1 or is_uncanonical(labels["quantile"]):
            raise ValueError("invalid quantile label")
        if value < 0:
            raise ValueError("quantile values cannot be negative")
    if typ == "stateset" and value not in (0, 1):
        raise ValueError("stateset samples can only be 0 or 1")
    if typ == "info" and value != 1:
        raise ValueError("info samples can only be 1")
    if suffix in _COUNTER_LIKE and math.isnan(value):
        raise ValueError("counter-like samples cannot be NaN")
    if suffix in _COUNTER_LIKE[:5] and value < 0:
        raise ValueError("counter-like samples cannot be negative")


def _group(family: _Family, sample: Sample, stamp: TimeKey | None) -> None:
    """The oracle's grouping: a group's samples are contiguous, its timestamps do not go back, and a
    repeated series at the same timestamp is dropped."""
    g = _group_key(family, sample)
    if family.group is not None and g != family.group and g in family.seen_groups:
        raise ValueError("samples of one group are not contiguous")
    if family.group is not None and g == family.group:
        if (stamp is None) != (family.group_stamp is None):
            raise ValueError("mix of timestamp presence within a group")
        backwards = family.group_stamp is not None and stamp is not None and later(family.group_stamp, stamp)
        if backwards and family.typ != "info":
            raise ValueError("timestamps went backwards within a group")
    else:
        family.group_series = set()
    series = (sample.name, tuple(sorted(sample.labels.items())))
    if stamp != family.group_stamp or series not in family.group_series:
        family.samples.append(sample)
        family.stamps.append(stamp)
    family.group_series.add(series)
    family.group, family.group_stamp = g, stamp
    family.seen_groups.add(g)


def _group_key(family: _Family, sample: Sample) -> tuple[tuple[str, str], ...]:
    typ, labels = family.typ, sample.labels
    if typ == "info":
        return ()
    drop = None
    if typ == "summary" and sample.name == family.name:
        drop = "quantile"
    elif typ == "stateset":
        drop = family.name
    elif typ in ("histogram", "gaugehistogram") and sample.name == family.name + "_bucket":
        drop = "le"
    return tuple(sorted((k, v) for k, v in labels.items() if k != drop))
