"""The Prometheus text format 0.0.4, grouped into families exactly as prometheus_client groups them.

Speed comes from deciding, per sample line, which family it belongs to from the metric-name prefix
alone: a line of an unwanted family costs one strip, one anchored regex match and one set lookup.
Lines of wanted families are validated by one possessive (backtracking-free) regex.

Where the oracle accepts a line only by accident of its implementation, we reject it (each case is
a documented test in tests/unit/collector/test_exposition_divergences.py): metric names inside the
braces or quoted (UTF-8 names are served only to scrapers that negotiate them; kvpilot does not),
missing blank between name and value, extra tokens after the timestamp, empty or leading-comma label
terms, and blanks other than space and tab inside a sample line. Lines of families not wanted are
skipped unvalidated: a selective parse checks only what it reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from collector.exposition._lex import (
    LABEL_PAIR_RE,
    LABEL_VALUE,
    NAME,
    NAME_RE,
    TEXT_COMMENT,
    is_legacy_name,
    unescape_label_value,
    unescape_text_help,
    unquote_name,
)
from collector.exposition._model import ParseError, Sample, Sink

_LABEL = rf"(?!__){NAME}[ \t]*+=[ \t]*+{LABEL_VALUE}"
_BODY = rf"[ \t]*+(?:{_LABEL}(?:[ \t]*+,[ \t]*+{_LABEL})*+(?:[ \t]*+,)?+[ \t]*+)?+"
_TOKEN = r'[^ \t{}"]++'
_TAIL_RE = re.compile(rf"[ \t]*+({_TOKEN})(?:[ \t]++({_TOKEN}))?+", re.DOTALL)
SAMPLE_RE = re.compile(
    rf"({NAME})(?:[ \t]*+\{{({_BODY})\}}[ \t]*+|[ \t]++)({_TOKEN})(?:[ \t]++({_TOKEN}))?+", re.DOTALL
)

_SEP = "[\t\n\x0b\x0c\r ]"  # the oracle splits "#" lines on ASCII whitespace only
# The usual HELP/TYPE line; anything else (quotes, odd spacing, plain comments) takes the exact slow path.
_META_RE = re.compile(rf"#{_SEP}++(HELP|TYPE){_SEP}++({NAME})(?:{_SEP}++(.*+))?+", re.DOTALL)

# What the oracle's text parser accepts as TYPE (it maps "untyped" to "unknown").
_TYPES = {
    "counter": "counter",
    "gauge": "gauge",
    "summary": "summary",
    "histogram": "histogram",
    "gaugehistogram": "gaugehistogram",
    "unknown": "unknown",
    "untyped": "unknown",
    "info": "info",
    "stateset": "stateset",
}
# Sample names that stay in a TYPE'd family; any other name becomes a family of its own.
_SUFFIXES = {"summary": ("_count", "_sum", ""), "histogram": ("_count", "_sum", "_bucket")}


def parse_text(text: str, keep: Callable[[str], bool], sink: Sink) -> None:
    _TextParser(keep, sink).run(text)


class _TextParser:
    """The oracle's state machine: the current family (from HELP/TYPE) and the names it admits."""

    def __init__(self, keep: Callable[[str], bool], sink: Sink) -> None:
        self.keep = keep
        self.sink = sink
        self.name = ""
        self.help = ""
        self.typ = "untyped"
        self.type_line = 0  # where the current TYPE came from, for errors found when the family closes
        self.samples: list[Sample] = []
        self.allowed: tuple[str, ...] = ()
        self.wanted = False  # whether the current family's samples are read at all
        # Label sets repeat across a page (every family of a GPU, every gauge of a model), so a body
        # validated once is not validated again: body text -> its labels.
        self.bodies: dict[str, dict[str, str]] = {}

    def run(self, text: str) -> None:
        lines = text.split("\n")
        count = len(lines)
        room = self.sink.max_samples
        name_match = NAME_RE.match
        i = 0  # index of the line being read (its number is i + 1)
        pos = 0  # offset in text of the line being read
        block_skippable = True
        while i < count:
            raw = lines[i]
            i += 1
            pos += len(raw) + 1
            line = raw.strip()
            if not line:
                continue
            if line[0] == "#":
                self._comment(line, i)
                block_skippable = True
                continue
            m = name_match(line)
            sample_name = m.group() if m is not None else ""
            if sample_name in self.allowed:
                if not self.wanted:
                    if block_skippable:  # one try per block: a failed try is not repeated line by line
                        block_skippable = False
                        skipped, pos = _skip_block(text, pos, self.allowed)
                        i += skipped
                    continue
                self.samples.append(self._sample(line, i, sample_name))
            else:
                self._close()
                self.name, self.help, self.typ, self.samples, self.allowed = "", "", "untyped", [], ()
                if sample_name and not self.keep(sample_name):
                    continue
                self.sink.add(sample_name, "unknown", "", [self._sample(line, i, sample_name)])
            room -= 1
            if room < 0:
                raise ParseError(f"page has more than {self.sink.max_samples} samples", line_no=i, line=line)
        self._close()

    def _sample(self, line: str, line_no: int, name: str) -> Sample:
        """One sample line of a wanted family; ``name`` is its metric-name prefix."""
        open_at = line.find("{", len(name))
        if open_at >= 0:
            close_at = line.rfind("}")
            labels = self.bodies.get(line[open_at + 1 : close_at])
            if (
                labels is not None
                and close_at > open_at
                and (open_at == len(name) or not line[len(name) : open_at].strip(" \t"))
            ):
                tail = _TAIL_RE.fullmatch(line, close_at + 1)
                if tail is not None:
                    return _sample(name, dict(labels), tail.group(1), tail.group(2), line, line_no)
        m = SAMPLE_RE.fullmatch(line)
        if m is None:
            raise ParseError(_diagnose(line), line_no=line_no, line=line)
        name, body, value, stamp = m.groups()
        if body is None:
            return _sample(name, {}, value, stamp, line, line_no)
        pairs = LABEL_PAIR_RE.findall(body)
        labels = dict(pairs)
        if len(labels) != len(pairs):
            raise ParseError("duplicate label name", line_no=line_no, line=line)
        if "\\" in body:
            labels = {k: unescape_label_value(v) for k, v in pairs}
        self.bodies[body] = labels
        return _sample(name, dict(labels), value, stamp, line, line_no)

    def _comment(self, line: str, line_no: int) -> None:
        m = _META_RE.fullmatch(line)
        if m is not None:
            keyword, candidate, rest = m.groups()
            self._metadata(keyword, candidate, rest, line, line_no)
            return
        parts = TEXT_COMMENT.split(line, 3)
        if len(parts) < 2:
            return
        keyword = parts[1]
        candidate = ""
        if len(parts) > 2:
            if keyword not in ("TYPE", "HELP"):
                return  # a plain comment
            try:
                candidate, quoted = unquote_name(parts[2])
            except ValueError as e:
                raise ParseError(f"invalid metric name in {keyword}: {e}", line_no=line_no, line=line) from None
            if not quoted and not is_legacy_name(candidate):
                raise ParseError(f"invalid metric name {candidate!r} in {keyword}", line_no=line_no, line=line)
        self._metadata(keyword, candidate, parts[3] if len(parts) == 4 else None, line, line_no)

    def _metadata(self, keyword: str, candidate: str, rest: str | None, line: str, line_no: int) -> None:
        if keyword == "HELP":
            if candidate != self.name:
                self._start(candidate)
                self.allowed = (candidate,)
            self.help = unescape_text_help(rest) if rest is not None else ""
        elif keyword == "TYPE":
            if rest is None:
                raise ParseError("TYPE needs a metric name and a type", line_no=line_no, line=line)
            if candidate != self.name:
                self._start(candidate)
            self.typ = rest
            self.type_line = line_no
            self.allowed = tuple(candidate + s for s in _SUFFIXES.get(self.typ, ("",)))

    def _start(self, name: str) -> None:
        self._close()
        self.name, self.help, self.typ, self.samples = name, "", "untyped", []
        # The family's final name depends on its type only through a counter's "_total".
        self.wanted = self.keep(name) or (name.endswith("_total") and self.keep(name[:-6]))

    def _close(self) -> None:
        """Emit the current family (the oracle's ``build_metric``), renaming counters its way."""
        name = self.name
        if not name:
            return
        typ = _TYPES.get(self.typ)
        if typ is None:
            raise ParseError(f"invalid metric type {self.typ!r} for {name!r}", line_no=self.type_line)
        samples = self.samples
        if typ == "counter":
            if name.endswith("_total"):
                name = name[:-6]
            else:
                samples = [Sample(s.name + "_total", s.labels, s.value, s.timestamp) for s in samples]
        if not name:
            raise ParseError("counter family name is empty once '_total' is removed", line_no=self.type_line)
        if not name.isascii():
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                raise ParseError(f"metric name {name!r} is not valid UTF-8", line_no=self.type_line) from None
        if self.keep(name):
            self.sink.add(name, typ, self.help, samples)
        self.name = ""


def _skip_block(text: str, start: int, allowed: tuple[str, ...]) -> tuple[int, int]:
    """Skip the lines from ``start`` up to the next "#" line if every one is a sample of ``allowed``.

    Returns (lines skipped, offset after them); (0, start) when any line might not belong to the
    family (blank, indented, another name), which the caller then reads line by line. Counting
    needles in C instead of looking at each line is what makes unwanted families nearly free.
    """
    end = text.find("\n#", start - 1)
    if end < 0:
        end = len(text)
    lines = text.count("\n", start - 1, end)
    if lines == 0:
        return 0, start
    found = 0
    for name in allowed:
        for follow in "{ \t":
            found += text.count("\n" + name + follow, start - 1, end)
            if found == lines:
                return lines, end + 1
    return 0, start


def _sample(name: str, labels: dict[str, str], value: str, stamp: str | None, line: str, line_no: int) -> Sample:
    try:
        if "_" in value:
            raise ValueError(f"invalid value {value!r}")
        if stamp is None:
            return Sample(name, labels, float(value))
        return Sample(name, labels, float(value), _timestamp(stamp))
    except (ValueError, OverflowError) as e:
        raise ParseError(str(e), line_no=line_no, line=line) from None


def _timestamp(token: str) -> float:
    """Milliseconds to seconds, dividing an integer exactly as the oracle does (no double rounding)."""
    if "_" in token:
        raise ValueError(f"invalid timestamp {token!r}")
    try:
        return int(token) / 1000
    except ValueError:
        return float(token) / 1000


def _diagnose(line: str) -> str:
    """Say what is wrong with a sample line the fast pattern refused."""
    m = NAME_RE.match(line)
    if m is None:
        if line.startswith("{"):
            return "metric name inside the braces is not supported; expected name{labels} value"
        return "invalid metric name"
    rest = line[m.end() :].lstrip(" \t")
    if rest.startswith("{"):
        return "invalid label set (expected name=\"value\" pairs, names not starting with '__')"
    if not rest:
        return "missing value"
    if m.end() < len(line) and line[m.end()] not in " \t{":
        return "invalid metric name"
    return "expected 'name{labels} value [timestamp]'"
