"""The Prometheus text format 0.0.4, grouped into families exactly as prometheus_client groups them.

Speed comes from stepping through as few lines in Python as possible. A run of whole unwanted families
(HELP, TYPE and samples, family after family) is passed over by one pattern in C that knows the wanted
names, unread; so is a run of an unwanted family's samples that the loop meets otherwise (a sample line's
family is decided from its metric-name prefix alone). A wanted family's usual HELP and TYPE lines are read by
one pattern, and so is the run of its usual lines, ``name{labels} value``, that follows them; the run is cut into
names, label bodies and values by plain string operations and read without the loop's per-line checks (a bucket
whose ``le`` comes first or last cut into its series and its bound, the series' labels taken from the line before
when its text is the same). A wanted sample line that no family admits (an untyped page's: each is a family of its
own to the oracle) is read as the usual line too, and a run of such lines of one name (GPUs, buckets) at once. The
lines passed over are counted only when an error needs a line number. Label sets are validated once per page and
then looked up (a bucket's as its series' labels plus its bound), the layouts of their label names once per process;
anything unusual goes through one possessive (backtracking-free) pattern that also says what is wrong.

A metric name written inside the braces, quoted (``{"name",a="b"} 1``: the UTF-8 names Prometheus 3 negotiates;
kvpilot does not ask for them, but a saved page may hold them), is read as ``name{a="b"} 1``, as the oracle reads it;
only a line that does not start with a name takes that step. Where the oracle accepts a line only by accident of its
implementation, we reject it (each case is a documented test in tests/unit/collector/test_exposition_divergences.py):
a name given as a ``__name__`` label, missing blank between name and value, extra tokens after the timestamp, empty
or leading-comma label terms, and blanks other than space and tab inside a sample line. Lines of families not wanted are
skipped unvalidated: a selective parse checks only what it reads, so a malformed sample line inside an
unwanted family is not an error (the oracle, which reads everything, raises on it; a full parse does too).
What decides where families begin and end is still checked when it is passed over: a HELP or TYPE line of
an unusual shape, an invalid type or name, and a sample line no family admits stop the pattern, and the
line loop reads them as before, errors included.

A series (sample name and label set, at one timestamp) that a wanted family carries twice is refused
too: the oracle keeps both, and an adapter summing them doubles a gauge (issue 11: "running 21 -> 42").
Prometheus keeps the first copy and counts the rest (prometheus/prometheus, scrape/scrape.go,
``checkAddError`` on ``ErrDuplicateSampleForTimestamp``, commit fcdb6c2b14ee931f3601a1a6fa6ee478a56f1bf0);
we cannot tell which copy is right, so the page is not read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Hashable

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
from collector.exposition._model import BUDGET_CHECK_EVERY, MetricFamily, ParseError, Sample, Sink
from collector.exposition._untyped import widened

_LABEL = rf"(?!__){NAME}[ \t]*+=[ \t]*+{LABEL_VALUE}"
_BODY = rf"[ \t]*+(?:{_LABEL}(?:[ \t]*+,[ \t]*+{_LABEL})*+(?:[ \t]*+,)?+[ \t]*+)?+"
_TOKEN = r'[^ \t{}"]++'
_BODY_RE = re.compile(_BODY, re.DOTALL)
# The last label of a bucket or quantile line, as written by every client library (no blanks, no escapes).
_BOUND_LABEL_RE = re.compile(r'(le|quantile)="([^"\\\n]*+)"')
_KEY_RE = re.compile(rf"(?!__){NAME}=")
_NAMES_RE = re.compile(rf"(?:(?!__){NAME}=(?:,(?!__){NAME}=)*+,?+)?+")
_TAIL_RE = re.compile(rf"[ \t]*+({_TOKEN})(?:[ \t]++({_TOKEN}))?+", re.DOTALL)
SAMPLE_RE = re.compile(
    rf"({NAME})(?:[ \t]*+\{{({_BODY})\}}[ \t]*+|[ \t]++)({_TOKEN})(?:[ \t]++({_TOKEN}))?+", re.DOTALL
)

_SEP = "[\t\n\x0b\x0c\r ]"  # the oracle splits "#" lines on ASCII whitespace only
# The usual HELP/TYPE line; anything else (quotes, odd spacing, plain comments) takes the exact slow path.
_META_RE = re.compile(rf"#{_SEP}++(HELP|TYPE){_SEP}++({NAME})(?:{_SEP}++(.*+))?+", re.DOTALL)

# The usual HELP line, taken as _META_RE takes the line stripped, and the usual TYPE line of the same family
# after it (read as if its line had been read on its own), from the start of the HELP line: no blank before "#",
# one space between the words, the help text not starting with a separator nor ending with a blank (str.strip()
# would take it off); anything else, or the HELP line of the current family, takes the line loop's path.
_HEAD_RE = re.compile(
    rf"\# HELP ({NAME})(?: ([^\t\n\x0b\x0c\r ][^\n]*+))?+(?<!\s)\n"
    r"(?:\# TYPE \1 (counter|gauge|summary|histogram|gaugehistogram|unknown|untyped|info|stateset)\n)?+"
)

# The patterns' bound methods the line loop calls, made once per process rather than once per page.
_NAME_MATCH = NAME_RE.match
_META_FULLMATCH = _META_RE.fullmatch
_HEAD_MATCH = _HEAD_RE.match

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


# A selection's patterns for what a selective read passes over unread: runs of whole unwanted families, and runs of
# sample lines no family admits whose names are unwanted (see _unwanted_run), None where it goes family by family;
# and whether it wants a family of a given name (see _wanted_family).
_Runs = tuple[re.Pattern[str] | None, re.Pattern[str] | None, Callable[[str], bool]]


def parse_text(text: str, keep: Callable[[str], bool], sink: Sink) -> None:
    _TextParser(keep, sink).run(text)


# The label names of a body, as the text between its values ("a=,b=" for `a="1",b="2"`) -> the names and what each
# stretch between two values must be (["a", "b"], ["a=", ",b="]). Only names and separators, never values: a page's
# label sets are the same few dozen on every page of an engine, so they are validated once per process, not per page
# (bounded: a page of ever new names empties it now and then, as _SELECTED).
_LAYOUTS: dict[str, tuple[list[str], list[str]]] = {}
_MAX_LAYOUTS = 1024
# ... of at most this many characters: an engine's are tens. A hostile page's label names may run to its cap (8 MiB),
# and kept per process, ever new ones held up to 1,024 of them, three copies each (40 pages of a 200 KB name: 24 MB);
# longer ones are validated where they occur, as any body the per-page caches do not hold.
_MAX_LAYOUT_CHARS = 4096

# A selection's membership test and unwanted-run pattern, widened to the parts an untyped page splits a family into,
# and whether it holds a name and one of its parts, by selection (the scrape loop's one or two per process): made
# once, not once per page (see parse_selected).
_SELECTED: dict[frozenset[object], tuple[Callable[[str], bool], _Runs, bool]] = {}


def parse_selected(text: str, names: frozenset[object], sink: Sink) -> bool:
    """``parse_text(text, widened(names)[0].__contains__, sink)``, with what the selection needs made once per process:
    the families ``names`` wants and the untyped parts of them (collector.exposition._untyped). Returns
    ``widened(names)[1]``: whether ``names`` holds both a name and one of its parts."""
    selected = _SELECTED.get(names)
    if selected is None:
        if len(_SELECTED) >= 16:
            _SELECTED.clear()
        wider, pairs = widened(names)
        selected = _SELECTED[names] = (wider.__contains__, _UNWANTED_RUNS.get(wider) or _unwanted_run(wider), pairs)
    _TextParser(selected[0], sink, selected[1]).run(text)
    return selected[2]


class _TextParser:
    """The oracle's state machine: the current family (from HELP/TYPE) and the names it admits."""

    def __init__(self, keep: Callable[[str], bool], sink: Sink, runs: _Runs | None = None) -> None:
        self.keep = keep
        self.sink = sink
        self.name = ""
        self.help = ""
        self.typ = "untyped"
        self.type_line = 0  # where the current TYPE came from, for errors found when the family closes
        self.samples: list[Sample] = []
        self.keys: list[SeriesKey] = []  # the series of each of ``samples``, for the duplicate check
        self.allowed: tuple[str, ...] = ()
        # whether the current family's samples are read at all; None: not, and a pattern that passed its lines over
        # checked its name and type (see _close)
        self.wanted: bool | None = False
        # Label sets repeat across a page (every family of a GPU, every gauge of a model), so a body
        # validated once is not validated again: body text -> its labels.
        self.bodies: dict[str, dict[str, str]] = {}
        # Body text -> its label set as a frozenset of pairs (the same for `a="1",b="2"` and `b="2",a="1"`), so a
        # series is a cheap (name, label set, timestamp) key: the frozenset hashes once and keeps its hash.
        self.canonical: dict[str, Hashable] = {}
        # A bucket's series labels (its body before `",le="`) -> (its labels, their label set), checked once per page
        # (see _read_buckets).
        self.series_labels: dict[str, tuple[dict[str, str], Hashable]] = {}
        # The series each emitted family holds so far: a family may come back later on the page.
        self.series: dict[str, set[SeriesKey]] = {}
        # Runs of unwanted families are passed over in C: by one pattern that knows the wanted names when
        # ``keep`` is a set's membership test, else family by family (see _pass_families); so are runs of unwanted
        # sample lines no family admits (an untyped page's), by another, or else line by line.
        # (``runs``: the patterns, where the caller has them: see ``parse_selected``.)
        if runs is None:
            names = getattr(keep, "__self__", None)
            # built once per selection
            if isinstance(names, frozenset):
                runs = _UNWANTED_RUNS.get(names) or _unwanted_run(names)
            else:
                runs = (None, None, _wanted_family(keep))
        self.runs = runs

    def run(self, text: str) -> None:
        # Lines are counted as they are stepped; a run of lines passed over by a pattern counts as one line
        # until an error needs the true number: counting its newlines would cost a pass over it of its own.
        passed: list[tuple[int, int, int]] = []  # (the run's line number as counted, its first offset, its end)
        try:
            # Lines are cut from the text one at a time, not split up front: most of a selective read's lines
            # are passed over by a pattern and never become strings.
            size = len(text)
            pos = line_no = 0  # the next line's offset; the current line's 1-based number, as counted (see run)
            room = self.sink.max_samples
            # one comparison per line serves the cap and the budget
            checkpoint = room - BUDGET_CHECK_EVERY if room > BUDGET_CHECK_EVERY else 0
            name_match = _NAME_MATCH
            meta_match = _META_FULLMATCH
            head_match = _HEAD_MATCH
            bodies = self.bodies
            canonical = self.canonical
            keep = self.keep
            keep_family = self.runs[2]
            block_skippable = True
            no_run_before = -1  # where a run of untyped lines that did not read whole ends (see _untyped_run)
            # The current family's state, in locals for the sample lines: None once a line may have changed it, then
            # read again by the next sample line the loop reads (most families' lines are read at their HELP line).
            allowed: tuple[str, ...] | None = None
            wanted, samples, keys = self.wanted, self.samples, self.keys
            while pos < size:
                start = pos
                # The usual HELP line of a new family, with the usual TYPE line after it, in one pattern
                if (
                    text[start] == "#"
                    and (usual := head_match(text, start)) is not None
                    and (candidate := usual[1]) != self.name
                ):
                    line_no += 1
                    if keep_family(candidate):
                        if self.wanted is not None:  # a family passed over is not emitted, nor checked (see _close)
                            self._close()
                        typ = usual[3]
                        self.name, self.help, self.samples, self.keys = candidate, usual[2] or "", [], []
                        self.wanted = True
                        pos = usual.end()
                        if typ is None:
                            typ = self.typ = "untyped"
                            self.allowed = (candidate,)
                        else:
                            self.typ = typ
                            # _admitted, inline: a wanted family's HELP and TYPE are most of a small page's lines
                            if typ == "histogram":
                                self.allowed = (candidate + "_count", candidate + "_sum", candidate + "_bucket")
                            elif typ == "summary":
                                self.allowed = (candidate + "_count", candidate + "_sum", candidate)
                            else:
                                self.allowed = (candidate,)
                            line_no += 1
                            self.type_line = line_no
                        # The family's run of usual sample lines, read at once as the line loop below would read it (on
                        # today's fixture mix this costs less than the loop's first step even for a single line).
                        block_skippable = True
                        if (
                            run := _READ_BLOCK_RE.get(typ, _PLAIN_READ_BLOCK_RE).match(text, pos)
                        ) is not None and run.group(1) == candidate:
                            end = run.end()
                            block = text[pos : end - 1]
                            if "\n" not in block and typ != "histogram":
                                # One line (a gauge's or a counter's only series, most families of a small page):
                                # _read_block's steps, inline (a call and its set-up cost as much as the line).
                                if room > checkpoint:  # the cap and the budget are not reached
                                    head, _, value = block.rpartition("} ")
                                    sample_name, _, body = head.partition("{")
                                    try:
                                        labels = bodies.get(body)
                                        # the first sample may own a new label dict: later ones copy it
                                        if labels is None:
                                            labels = self._labels(body, "", line_no + 1)
                                        else:
                                            labels = labels.copy()
                                        number = float(value)
                                    except ValueError:  # ParseError included: read again, which says where
                                        self._read_lines([block], line_no + 1)
                                    else:
                                        self.samples.append(Sample(sample_name, labels, number))
                                        self.keys.append((sample_name, canonical[body], None))
                                    room -= 1
                                    line_no += 1
                                    pos = end
                                    block_skippable = False
                            else:
                                found = block.split("\n")
                                if room - len(found) >= checkpoint:  # the cap and the budget are not reached inside
                                    if typ == "histogram":
                                        self._read_buckets(found, line_no + 1)
                                    else:
                                        self._read_block(found, line_no + 1)
                                    room -= len(found)
                                    line_no += len(found)
                                    pos = end
                                    block_skippable = False
                    else:
                        end = self._pass_families(text, start, passed, line_no)
                        if end == start:  # no run: the line is read instead, and the pattern took its newline
                            self._metadata("HELP", candidate, usual[2], "", line_no)
                            end = text.find("\n", start) + 1
                        pos = end
                        block_skippable = True
                    allowed = None
                    continue
                pos = text.find("\n", start) + 1 or size + 1
                raw = text[start : pos - 1]
                line_no += 1
                line = raw.strip()
                if not line:
                    continue
                if line[0] == "#":
                    meta = meta_match(line)
                    if meta is None:
                        self._comment(line, line_no)
                    else:
                        keyword, candidate, rest = meta.groups()
                        if keyword == "TYPE" and rest is not None and candidate == self.name:
                            # the usual TYPE after its family's HELP, inline: only the type changes
                            self.typ = rest
                            self.type_line = line_no
                            self.allowed = _admitted(candidate, rest)
                            if self.wanted is None:  # a family passed over: its new type is checked when it closes
                                self.wanted = False
                        elif candidate == self.name:
                            self._metadata(keyword, candidate, rest, line, line_no)
                        elif (
                            # the family's final name depends on its type only through a counter's "_total"
                            (is_wanted := keep(candidate) or (candidate.endswith("_total") and keep(candidate[:-6])))
                            or raw[:1] != "#"
                        ):
                            self._metadata(keyword, candidate, rest, line, line_no, is_wanted)
                            # the usual TYPE right after the HELP, taken with it (as the inline TYPE above would)
                            if keyword == "HELP" and text.startswith("# TYPE ", pos):
                                head = "# TYPE " + candidate + " "
                                if text.startswith(head, pos):
                                    end = text.find("\n", pos) + 1 or size + 1
                                    typ = text[pos + len(head) : end - 1]
                                    if typ in _TYPES:
                                        self.typ, self.allowed = typ, _admitted(candidate, typ)
                                        line_no += 1
                                        self.type_line = line_no
                                        pos = end
                        else:
                            end = self._pass_families(text, start, passed, line_no)
                            if end == start:  # no run: the line is read instead
                                self._metadata(keyword, candidate, rest, line, line_no)
                            else:
                                pos = end
                    block_skippable = True
                    allowed = None
                    continue
                if allowed is None:
                    allowed, wanted, samples, keys = self.allowed, self.wanted, self.samples, self.keys
                # The name ends at "{" on the usual line; a name the current family admits is valid by
                # construction, so the name pattern runs only for other lines.
                brace = line.find("{")
                sample_name = line[:brace]
                if brace < 0 or sample_name not in allowed:
                    m = name_match(line)
                    if m is not None:
                        sample_name = m.group()
                    else:  # `{"name",labels} value`: read as `name{labels} value`
                        line, sample_name = _name_inside(line, line_no)
                    admitted = sample_name in allowed
                else:
                    admitted = True
                if admitted:
                    if not wanted:
                        # One try per block (a failed try is not repeated line by line), and none when the
                        # family has a single sample, the usual case.
                        if block_skippable and text[pos : pos + 1] not in ("#", "\n", ""):
                            block_skippable = False
                            pos = _skip_block(text, start, self.name, self.typ)
                            passed.append((line_no, start, pos))
                        continue
                    # A run of the usual lines of this family is cut into (name, body, value) by one pattern in C.
                    if block_skippable and text[pos : pos + 1] not in ("#", "\n", ""):
                        block_skippable = False
                        run = _READ_BLOCK_RE.get(self.typ, _PLAIN_READ_BLOCK_RE).match(text, start)
                        if run is not None and run.group(1) == self.name:
                            # the pattern checked every line's shape: plain string cuts take them apart
                            found = text[start : run.end() - 1].split("\n")
                            if room - len(found) >= checkpoint:  # the cap and the budget are not reached inside
                                if self.typ == "histogram":
                                    self._read_buckets(found, line_no)
                                else:
                                    self._read_block(found, line_no)
                                room -= len(found)
                                line_no += len(found) - 1
                                pos = run.end()
                                continue
                    # The usual line, `name{labels} value`, without a method call: this is the hot path. A
                    # timestamp or anything odd makes float() fail and takes the general path, which says why.
                    at = len(sample_name)
                    close_at = line.rfind("}")
                    if close_at > at and line[at] == "{" and line[close_at + 1 : close_at + 2] == " ":
                        body = line[at + 1 : close_at]
                        labels = bodies.get(body)
                        # the first sample may own a new label dict: later ones copy it before parse returns
                        labels = self._labels(body, line, line_no) if labels is None else labels.copy()
                        value = line[close_at + 2 :]
                        try:
                            number = float(value)
                        except ValueError:
                            self._add(self._sample(line, line_no, sample_name))
                        else:
                            if "_" in value:  # float() reads digit separators; the format has none
                                raise ParseError(f"invalid value {value!r}", line_no=line_no, line=line)
                            samples.append(Sample(sample_name, labels, number))
                            keys.append((sample_name, canonical[body], None))
                    elif (
                        brace < 0
                        and line[at : at + 1] == " "
                        and " " not in (value := line[at + 1 :])
                        and "\t" not in value
                    ):
                        # the usual line without labels, `name value`: the same steps
                        try:
                            number = float(value)
                        except ValueError:
                            self._add(self._sample(line, line_no, sample_name))
                        else:
                            if "_" in value:
                                raise ParseError(f"invalid value {value!r}", line_no=line_no, line=line)
                            samples.append(Sample(sample_name, {}, number))
                            keys.append((sample_name, _NO_LABELS, None))
                    else:
                        self._add(self._sample(line, line_no, sample_name))
                else:
                    if self.name:  # none after a line no family admitted
                        self._close()
                    self.name, self.help, self.typ, self.allowed = "", "", "untyped", ()
                    self.samples, self.keys = [], []
                    allowed = None
                    if not keep(sample_name):
                        # and the unwanted sample lines after it that no family admits, each of which would be read
                        # as this one (an untyped page's), passed over at once where a pattern knows the wanted names
                        if (
                            pos < size
                            and text[pos] not in "#\n"  # a run's first line is no comment, nor blank
                            and (lines_run := self.runs[1]) is not None
                            and (more := lines_run.match(text, pos)) is not None
                        ):
                            line_no += 1
                            end = more.end()
                            passed.append((line_no, pos, end))
                            pos = end
                        continue
                    # and the usual lines of the same name after it (an untyped page's GPUs, a histogram's buckets),
                    # each of which would be read as this one, one family each: at once, where they all read
                    if (
                        pos > no_run_before
                        and text.startswith(sample_name, pos)
                        and text[pos + len(sample_name) : pos + len(sample_name) + 1] == "{"
                    ):
                        end, read = self._untyped_run(text, start, sample_name, line_no, room - checkpoint)
                        if read:
                            room -= read
                            line_no += read - 1
                            pos = end
                            continue
                        no_run_before = end  # a run that does not read whole is not tried again line by line
                    # A family of this one line: the usual line (see the hot path above) read inline, else _sample
                    sample = None
                    at = len(sample_name)
                    close_at = line.rfind("}")
                    if (
                        close_at > at
                        and line[at] == "{"
                        and line[close_at + 1 : close_at + 2] == " "
                        and " " not in (value := line[close_at + 2 :])
                        and "\t" not in value
                        and "_" not in value
                    ):
                        body = line[at + 1 : close_at]
                        labels = bodies.get(body)
                        # the first sample may own a new label dict: later ones copy it before parse returns
                        labels = self._labels(body, line, line_no) if labels is None else labels.copy()
                        try:
                            sample = Sample(sample_name, labels, float(value))
                        except ValueError:
                            pass  # read again below, which says why
                        else:
                            key: SeriesKey = (sample_name, canonical[body], None)
                    if sample is None:
                        sample = self._sample(line, line_no, sample_name)
                        key = (sample.name, _label_set(sample.labels), sample.timestamp)
                    if sample_name in self.series:
                        self._check_series(sample_name, [sample], [key], line_no)
                    else:
                        self.series[sample_name] = {key}
                    families = self.sink.families  # Sink.add, inline
                    family = families.get(sample_name)
                    if family is None:
                        families[sample_name] = MetricFamily(sample_name, "unknown", "", [sample])
                    else:
                        family.samples.append(sample)
                room -= 1
                if room < checkpoint:
                    if room < 0:
                        raise ParseError(
                            f"page has more than {self.sink.max_samples} samples",
                            line_no=line_no,
                            line=line,
                            whole_page=True,
                        )
                    self.sink.check_budget(line_no)
                    checkpoint = max(0, room - BUDGET_CHECK_EVERY)
            self._close()
        except ParseError as e:
            if passed and e.line_no:
                counted = e.line_no
                e.move_to(counted + sum(text.count("\n", start, end) - 1 for at, start, end in passed if at < counted))
            # pretty-printed JSON (a first line `{` or `[`): its first line alone is no JSON, the whole body is
            if not e.whole_page and _JSON_START.match(text) and (json_page := _json_page(text.strip())) is not None:
                raise ParseError(json_page, line_no=e.line_no, line=e.line) from None
            raise

    def _read_block(self, lines: list[str], line_no: int) -> None:
        """Read the usual sample lines of the current family, from line ``line_no``: each `name{labels} value`, as
        _READ_BLOCK_RE checked it (the value holds no "}", blank or "_").

        The same steps as the line loop's usual line (see ``run``), without its per-line checks; a block that holds
        an error is read again line by line (_read_lines), which says where.
        """
        bodies, canonical, samples, keys = self.bodies, self.canonical, self.samples, self.keys
        add_sample, add_key = samples.append, keys.append
        before = len(samples)
        try:
            for line in lines:
                head, _, value = line.rpartition("} ")
                name, _, body = head.partition("{")
                labels = bodies.get(body)
                # the first sample may own a new label dict: later ones copy it before parse returns
                labels = self._labels(body, "", line_no) if labels is None else labels.copy()
                add_sample(Sample(name, labels, float(value)))
                add_key((name, canonical[body], None))
        except ValueError:  # ParseError included
            del samples[before:], keys[before:]
            self._read_lines(lines, line_no)

    def _read_buckets(self, lines: list[str], line_no: int) -> None:
        """_read_block for a histogram's lines. A bucket line in either usual shape, ``le`` last
        (`name{series,le="bound"} value`, as most client libraries write it) or first (`name{le="bound",series} value`,
        as prometheus_client does, which sorts label names), is cut into its name, series, bound and value by plain
        string operations and read as its series' labels plus its bound, as _labels would make it, without looking
        up or validating its own body, which no other line has. A series' buckets come one after another: a line
        whose text before (le last) or after (le first) its bound is the line before's takes that line's name and
        series labels, a string comparison instead of a cut and a lookup. Series labels are validated once per page.
        """
        bodies, canonical, samples, keys = self.bodies, self.canonical, self.samples, self.keys
        series_labels = self.series_labels
        add_sample, add_key = samples.append, keys.append
        before = len(samples)
        # What the last bucket read in each shape was cut into: le last, its text before the bound; le first, its
        # series; then its name, its series' labels and their label set ("" before the first, and after a series
        # not read so).
        last_head, last_name, last_labels, last_set = "", "", _EMPTY, _NO_LABELS
        first_series, first_name, first_labels, first_set = "", "", _EMPTY, _NO_LABELS
        # le between other labels: the text before `",le="`, the labels after the bound, the name, the series' labels
        # before and after le, their label set
        mid_head, mid_after, mid_name = "", "", ""
        mid_before_labels, mid_after_labels, mid_set = _EMPTY, _EMPTY, _NO_LABELS
        try:
            for line in lines:
                # `name{series,le="bound"} value`: _READ_BLOCK_RE checked that the line ends `} value`, the value
                # without a quote, so the line's last `",le="` is its body's
                head, le, rest = line.rpartition('",le="')
                if le:
                    bound, closed, value = rest.partition('"} ')
                    # A bound without a quote ends at its closing quote; what follows `"} ` is then the value, or,
                    # when that was not the line's last "} ", text holding a "}", which float() refuses (the block
                    # is then read again line by line, which says what is wrong where).
                    if closed and '"' not in bound and "\\" not in bound:
                        if head != last_head:
                            name, _, series = head.partition("{")
                            known = series_labels.get(series) or self._series(series)
                            if known is None:  # its series holds le already: read whole below, which says so
                                last_head = ""
                            else:
                                last_head, last_name, (last_labels, last_set) = head, name, known
                        if last_head:
                            labels = last_labels.copy()
                            labels["le"] = bound
                            add_sample(Sample(last_name, labels, float(value)))
                            add_key((last_name, (last_set, bound), None))  # a pair, as _label_set makes with le
                            continue
                    else:
                        # `name{before,le="bound",after} value`, as prometheus_client writes a bucket whose series has
                        # label names on both sides of "le" (it sorts them). The `",le="` found is a label's start when
                        # the text before it holds no backslash and an odd number of quotes (its quote closes a
                        # value); its bound, without a quote, then ends at the next quote, which `",` must follow.
                        bound, closed, rest = rest.partition('",')
                        if closed and '"' not in bound and "\\" not in bound:
                            after, _, value = rest.rpartition("} ")
                            if head != mid_head or after != mid_after:
                                mid_head = ""
                                name, _, ahead = head.partition("{")
                                if "\\" not in ahead and ahead.count('"') & 1:
                                    split = self._split_series(ahead, after)
                                    if split is not None:  # else its series holds le already: read whole below
                                        mid_head, mid_after, mid_name = head, after, name
                                        mid_before_labels, mid_after_labels, mid_set = split
                            if mid_head:
                                labels = mid_before_labels.copy()
                                labels["le"] = bound
                                labels.update(mid_after_labels)
                                add_sample(Sample(mid_name, labels, float(value)))
                                add_key((mid_name, (mid_set, bound), None))
                                continue
                else:
                    # `name{le="bound",series} value`: the line starts with a name the family admits and "{"
                    head, le, after = line.partition('{le="')
                    if le:
                        bound, closed, rest = after.partition('",')
                        if not closed:
                            # `name{le="bound"} value`: le alone (a histogram without labels, as prometheus_client
                            # writes TGI's and vLLM's own): a bound without a quote ends at the line's first quote
                            bound, closed, value = after.partition('"} ')
                            if closed and '"' not in bound and "\\" not in bound and "{" not in head:
                                add_sample(Sample(head, {"le": bound}, float(value)))
                                add_key((head, (_NO_LABELS, bound), None))  # _label_set({"le": bound})
                                continue
                        elif '"' not in bound and "\\" not in bound:
                            series, _, value = rest.rpartition("} ")
                            if series != first_series or head != first_name:
                                first_series = ""
                                if "{" not in head:  # the bound is the first label
                                    base = bodies.get(series)
                                    if base is None:
                                        base = self._labels(series, "", line_no)
                                    if "le" not in base:
                                        first_series, first_name = series, head
                                        first_labels, first_set = base, canonical[series]
                            if first_series:
                                labels = {"le": bound, **first_labels}  # a dict display: no method call
                                add_sample(Sample(first_name, labels, float(value)))
                                add_key((first_name, (first_set, bound), None))
                                continue
                # anything else (a _count or _sum line, a bound with a quote): read whole, as _read_block does
                head, _, value = line.rpartition("} ")
                name, _, body = head.partition("{")
                plain = bodies.get(body)
                labels = self._labels(body, "", line_no) if plain is None else plain.copy()
                add_sample(Sample(name, labels, float(value)))
                add_key((name, canonical[body], None))
        except ValueError:  # ParseError included
            del samples[before:], keys[before:]
            self._read_lines(lines, line_no)

    def _untyped_run(self, text: str, start: int, name: str, line_no: int, room: int) -> tuple[int, int]:
        """Read the run of usual sample lines named ``name`` that no family admits, from line ``line_no`` at offset
        ``start`` (an untyped page's: its GPUs' lines of one field, a histogram's buckets), at most ``room`` of them:
        the oracle makes each a family of its own, which merged by name is one family of them all.

        Returns (the offset after the run, the lines read): (where to try again, 0) when the lines do not all read
        as the line loop would read them one by one, without an error (a bad label set or value, a series twice, the
        sample cap or the budget reached inside): the line loop then reads them one by one, which says what is wrong
        where.
        """
        run = _PLAIN_READ_BLOCK_RE.match(text, start)
        if run is None or run.group(1) != name:
            return start, 0
        end = run.end()
        lines = text[start : end - 1].split("\n")
        if len(lines) > room:
            return end, 0
        bodies, canonical = self.bodies, self.canonical
        samples: list[Sample] = []
        keys: list[SeriesKey] = []
        at = len(name) + 1
        try:
            for line in lines:
                head, _, value = line.rpartition("} ")
                body = head[at:]
                labels = bodies.get(body)
                # the first sample may own a new label dict: later ones copy it before parse returns
                labels = self._labels(body, "", line_no) if labels is None else labels.copy()
                samples.append(Sample(name, labels, float(value)))
                keys.append((name, canonical[body], None))
        except ValueError:  # ParseError included
            return end, 0
        fresh = set(keys)
        seen = self.series.get(name)
        if len(fresh) != len(keys) or (seen is not None and not seen.isdisjoint(fresh)):
            return end, 0
        if seen is None:
            self.series[name] = fresh
        else:
            seen |= fresh
        self.sink.add(name, "unknown", "", samples)
        return end, len(lines)

    def _series(self, series: str) -> tuple[dict[str, str], Hashable] | None:
        """A bucket's series labels, from its body before `",le="` (the closing quote of its last value left off),
        validated once per page; None when they hold ``le`` already (the whole body then says what is wrong)."""
        body = series + '"'
        labels = self.bodies.get(body)
        if labels is None:
            labels = self._labels(body, "", 0)
        if "le" in labels:
            return None
        known = self.series_labels[series] = (labels, self.canonical[body])
        return known

    def _split_series(self, before: str, after: str) -> tuple[dict[str, str], dict[str, str], Hashable] | None:
        """A bucket's series labels when its ``le`` sits between them, from its body's text before `",le="` (the
        closing quote of its last value left off) and after the bound's `",`: the labels before le and those after
        it (the oracle keeps the page's order), and their label set; validated once per page as one body. None
        when they hold ``le`` already (the whole body then says what is wrong)."""
        series = before + '",' + after
        labels = self.bodies.get(series)
        if labels is None:
            labels = self._labels(series, "", 0)
        if "le" in labels:
            return None
        items = list(labels.items())
        count = (before.count('"') + 1) // 2  # the labels before le: two quotes each, none escaped
        return dict(items[:count]), dict(items[count:]), self.canonical[series]

    def _read_lines(self, lines: list[str], line_no: int) -> None:
        """_read_block one line at a time, for a block that holds an error: the line loop's error, at its line."""
        bodies, canonical, samples, keys = self.bodies, self.canonical, self.samples, self.keys
        for line in lines:
            head, _, value = line.rpartition("} ")
            name, _, body = head.partition("{")
            labels = bodies.get(body)
            if labels is None:
                # the first sample may own a new label dict: later ones copy it before parse returns
                try:
                    labels = self._labels(body, "", line_no)
                except ParseError:
                    self._labels(body, line, line_no)  # the same error, with its line
                    raise
            else:
                labels = labels.copy()
            try:
                number = float(value)
            except ValueError:
                self._add(self._sample(line, line_no, name))
            else:
                if "_" in value:  # float() reads digit separators; the format has none
                    raise ParseError(f"invalid value {value!r}", line_no=line_no, line=line)
                samples.append(Sample(name, labels, number))
                keys.append((name, canonical[body], None))
            line_no += 1

    def _pass_families(self, text: str, start: int, passed: list[tuple[int, int, int]], line_no: int) -> int:
        """Pass over the run of whole unwanted families whose first line, line ``line_no`` as counted, starts at offset
        ``start``, unread, and note the run in ``passed``.

        Returns the offset after the run (``start`` when the first family is wanted or not of the usual
        shape), the last family passed over left current as if its lines had been read one by one: a
        line after the run may still belong to it. See _FAMILY for what a family passed over may hold.
        """
        run = self.runs[0]
        if run is not None:
            last = run.match(text, start)
            if last is None or (end := last.end()) == start:
                return start
        else:
            keep = self.keep
            end = start
            found = None
            while (m := _ONE_FAMILY_RE.match(text, end)) is not None:
                candidate = m.group(_P) or m.group(_Q)  # one family: one of its two branches
                if keep(candidate) or (candidate.endswith("_total") and keep(candidate[:-6])):
                    break
                found, end = m, m.end()
            if found is None:
                return start
            last = found
        passed.append((line_no, start, end))
        if self.name:  # the family before the run, if any (none at a page's start)
            self._close()
        # A group keeps its value from an earlier family of the run: the last family's are those its own lines
        # captured, which end with the group captured last (a failed try at a further family captures nothing): t
        # (its type, after its name p) for a family that opened with its HELP and TYPE lines, p for one with no TYPE
        # line, u (its type, after its name q) for one that opened with its TYPE line.
        last_group = last.lastindex
        if last_group == _T:
            name: str = last[_P]
            typ: str | None = last[_T]
        elif last_group == _P:
            name, typ = last[_P], None
        else:
            name, typ = last[_Q], last[_U]
        # (its help, samples and keys are left as they were: unused while it is not wanted)
        self.name, self.wanted = name, None
        if typ is not None:
            self.typ = typ
            # _admitted, inline: once per run of unwanted families, most of a small page's runs
            if typ == "histogram":
                self.allowed = (name + "_count", name + "_sum", name + "_bucket")
            elif typ == "summary":
                self.allowed = (name + "_count", name + "_sum", name)
            else:
                self.allowed = (name,)
        else:
            self.typ = "untyped"
            self.allowed = (name,)
        return end

    def _sample(self, line: str, line_no: int, name: str) -> Sample:
        """One sample line of a wanted family; ``name`` is its metric-name prefix."""
        at = len(name)
        close_at = line.rfind("}")
        if line[at : at + 1] != "{" or close_at < at:  # no labels, or a blank before them: the general pattern
            return self._general(line, line_no)
        body = line[at + 1 : close_at]
        labels = self.bodies.get(body)
        if labels is None:
            labels = self._labels(body, line, line_no)
        value = line[close_at + 1 :]
        if value[:1] == " " and " " not in (value := value[1:]) and "\t" not in value:
            return _sample(name, dict(labels), value, None, line, line_no)  # the usual "} 1.5"
        tail = _TAIL_RE.fullmatch(line, close_at + 1)
        if tail is None:
            raise ParseError(_diagnose(line), line_no=line_no, line=line)
        return _sample(name, dict(labels), tail[1], tail[2], line, line_no)

    def _labels(self, body: str, line: str, line_no: int) -> dict[str, str]:
        """Validate a label body seen for the first time on this page, and remember it and its label set.

        A histogram's bucket (a summary's quantile) is its series' labels plus ``le="..."``
        (``quantile="..."``), written last by most client libraries and first by prometheus_client, which
        sorts label names: each bucket line has a body of its own, but all of them share the rest, which is
        the ``_count`` and ``_sum`` lines' body. That rest is validated once and each bucket adds its one
        label to a copy. It is exact: the comma before a well-formed last label that ends the body cannot sit
        inside a quoted value, nor can the first quote-and-comma after a well-formed first label (see
        test_exposition_text); any body this does not take, or that would repeat a name, is validated whole.
        """
        bodies, canonical = self.bodies, self.canonical
        if 'le="' not in body and 'quantile="' not in body:  # most bodies: none of the ways below applies
            labels = self._validate(body, line, line_no)
            canonical[body] = _label_set(labels)
            return labels
        if body.startswith('le="'):
            cut = body.find('",', 4)
            value = body[4:cut]
            if cut > 0 and '"' not in value and "\\" not in value:
                rest = body[cut + 2 :]
                base = bodies.get(rest)
                if base is None:
                    base = self._labels(rest, line, line_no)
                if "le" not in base:
                    labels = {"le": value}
                    labels.update(base)
                    bodies[body] = labels
                    canonical[body] = (canonical[rest], value)  # a pair, as _label_set makes for a set with le
                    return labels
        cut = body.rfind(',le="')  # the usual last label, found without a pattern
        if cut > 0 and body[cut - 1] == '"' and body[-1] == '"' and len(body) - cut > 5:
            value = body[cut + 5 : -1]
            if '"' not in value and "\\" not in value:
                prefix = body[:cut]
                base = bodies.get(prefix)
                if base is None:
                    base = self._labels(prefix, line, line_no)
                if "le" not in base:
                    labels = base.copy()
                    labels["le"] = value
                    bodies[body] = labels
                    canonical[body] = (canonical[prefix], value)
                    return labels
        cut = body.rfind(",")
        if cut > 0 and body[cut - 1] == '"':
            tail = _BOUND_LABEL_RE.fullmatch(body, cut + 1)
            if tail is not None:
                prefix = body[:cut]
                base = bodies.get(prefix)
                if base is None:
                    base = self._labels(prefix, line, line_no)
                name, value = tail.groups()
                if name not in base:
                    labels = base.copy()
                    labels[name] = value
                    bodies[body] = labels
                    canonical[body] = (canonical[prefix], value) if name == "le" else _label_set(labels)
                    return labels
        labels = self._validate(body, line, line_no)
        canonical[body] = _label_set(labels)
        return labels

    def _add(self, sample: Sample) -> None:
        """A sample read by the general path: kept with its series."""
        self.samples.append(sample)
        self.keys.append((sample.name, _label_set(sample.labels), sample.timestamp))

    def _validate(self, body: str, line: str, line_no: int) -> dict[str, str]:
        if "\\" not in body:
            # Without escapes a quote always delimits a value: split on quotes, and check the names and
            # separators between the values with one short pattern ("a=,b=," for `a="x",b="y",`).
            parts = body.split('"')
            if len(parts) == 3 and parts[2] in ("", ",") and _KEY_RE.fullmatch(parts[0]):  # one label
                labels = {parts[0][:-1]: parts[1]}
                self.bodies[body] = labels
                return labels
            between = "".join(parts[0::2])
            layout = _LAYOUTS.get(between)  # the label names of a body, validated once per process
            if layout is None:
                names = between.rstrip(",")[:-1].split("=,") if between else []
                if not _NAMES_RE.fullmatch(between):
                    layout = None
                elif len(set(names)) != len(names):
                    raise ParseError("duplicate label name", line_no=line_no, line=line)
                else:
                    # what each stretch between two values must be: `a=`, `,b=`, ... (cut from the names' text: a
                    # valid name holds neither "=" nor "," nor NUL)
                    stretches = between.rstrip(",").replace("=,", "=\0,").split("\0") if between else []
                    layout = (names, stretches)
                    if len(between) <= _MAX_LAYOUT_CHARS:
                        if len(_LAYOUTS) >= _MAX_LAYOUTS:
                            _LAYOUTS.clear()
                        _LAYOUTS[between] = layout
            # each value must follow its own "name=" (`a="1",b=,""` joins to the same "a=,b=," as `a="1",b="",`)
            if (
                layout is not None
                and len(parts) & 1  # an even number of quotes
                and parts[-1] in ("", ",")
                and parts[0:-1:2] == layout[1]
            ):
                labels = dict(zip(layout[0], parts[1::2]))  # noqa: B905  # equal lengths, checked above
                self.bodies[body] = labels
                return labels
        if _BODY_RE.fullmatch(body) is None:
            raise ParseError(_diagnose(line), line_no=line_no, line=line)
        pairs = LABEL_PAIR_RE.findall(body)
        labels = dict(pairs)
        if len(labels) != len(pairs):
            raise ParseError("duplicate label name", line_no=line_no, line=line)
        if "\\" in body:
            labels = {k: unescape_label_value(v) for k, v in pairs}
        self.bodies[body] = labels
        return labels

    def _general(self, line: str, line_no: int) -> Sample:
        m = SAMPLE_RE.fullmatch(line)
        if m is None:
            raise ParseError(_diagnose(line), line_no=line_no, line=line)
        name, body, value, stamp = m.groups()
        labels: dict[str, str] = {}
        if body is not None:
            pairs = LABEL_PAIR_RE.findall(body)
            labels = dict(pairs)
            if len(labels) != len(pairs):
                raise ParseError("duplicate label name", line_no=line_no, line=line)
            if "\\" in body:
                labels = {k: unescape_label_value(v) for k, v in pairs}
        return _sample(name, labels, value, stamp, line, line_no)

    def _comment(self, line: str, line_no: int) -> None:
        """A "#" line the usual-shape pattern did not take: the oracle's exact tokenisation."""
        if '"' not in line and "HELP" not in line and "TYPE" not in line:
            return  # a plain comment: without quotes its tokens are substrings, none of them HELP or TYPE
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
        if keyword in ("TYPE", "HELP"):
            self._metadata(keyword, candidate, parts[3] if len(parts) == 4 else None, line, line_no)

    def _metadata(
        self, keyword: str, candidate: str, rest: str | None, line: str, line_no: int, wanted: bool | None = None
    ) -> None:
        """A HELP or TYPE line: a new name ends the current family and starts another (``wanted``: whether it
        is wanted, when the caller knows)."""
        if keyword == "TYPE" and rest is None:
            raise ParseError("TYPE needs a metric name and a type", line_no=line_no, line=line)
        if candidate != self.name:
            self._close()
            self.name, self.help, self.typ, self.samples, self.keys = candidate, "", "untyped", [], []
            if wanted is None:  # the family's final name depends on its type only through a counter's "_total"
                keep = self.keep
                wanted = keep(candidate) or (candidate.endswith("_total") and keep(candidate[:-6]))
            self.wanted = wanted
            if keyword == "HELP":
                self.allowed = (candidate,)
        if keyword == "HELP":
            self.help = rest or ""  # unescaped only if the family is emitted
            return
        self.typ = typ = rest or ""
        self.type_line = line_no
        self.allowed = _admitted(candidate, typ)
        if self.wanted is None:  # a family passed over: its new type is checked when it closes
            self.wanted = False

    def _close(self) -> None:
        """Emit the current family (the oracle's ``build_metric``), renaming counters its way."""
        name = self.name
        if not name:
            return
        self.name = ""
        wanted = self.wanted
        if wanted is None:  # passed over: its name and type were checked by the pattern, and it is not emitted
            return
        typ = _TYPES.get(self.typ)
        if typ is None:
            raise ParseError(f"invalid metric type {self.typ!r} for {name!r}", line_no=self.type_line)
        declared_total = name.endswith("_total")
        if typ == "counter" and declared_total:
            name = name[:-6]
            if not name:
                raise ParseError("counter family name is empty once '_total' is removed", line_no=self.type_line)
        if not name.isascii():
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                raise ParseError(f"metric name {name!r} is not valid UTF-8", line_no=self.type_line) from None
        if not wanted or not self.keep(name):
            return
        samples, keys = self.samples, self.keys
        if typ == "counter" and not declared_total:  # the oracle names counter samples "<family>_total"
            samples = [Sample(s.name + "_total", s.labels, s.value, s.timestamp) for s in samples]
            keys = [(n + "_total", labels, ts) for n, labels, ts in keys]
        # the usual case inline: the family's first block, no series twice (else _check_series says which); a family
        # of one sample, most of a small page's, cannot repeat a series of its own: its set is a display, not a call
        series = self.series
        if name in series:
            self._check_series(name, samples, keys, self.type_line)
        elif len(keys) == 1:
            series[name] = {keys[0]}
        elif len(seen := set(keys)) != len(keys):
            self._check_series(name, samples, keys, self.type_line)
        else:
            series[name] = seen
        help_text = self.help
        if "\\" in help_text:
            help_text = unescape_text_help(help_text)
        families = self.sink.families  # Sink.add, inline
        family = families.get(name)
        if family is None:
            families[name] = MetricFamily(name, typ, help_text, samples)
        else:
            family.samples.extend(samples)

    def _check_series(self, family: str, samples: list[Sample], keys: list[SeriesKey], line_no: int) -> None:
        """Refuse a series the family already holds (see the module docstring)."""
        seen = self.series.get(family)
        if seen is None:  # the usual case: the family's first block
            seen = self.series[family] = set(keys)
            if len(seen) == len(keys):
                return
            seen = set()
        for s, key in zip(samples, keys, strict=True):
            if key in seen:
                body = ",".join(f'{k}="{v}"' for k, v in s.labels.items())
                raise ParseError(
                    f"duplicate series {s.name}{{{body}}} in family {family!r} (a page may carry each series once)",
                    line_no=line_no or None,
                )
            seen.add(key)


def _admitted(family: str, typ: str) -> tuple[str, ...]:
    """The sample names a family of this declared type holds."""
    if typ == "histogram":
        return (family + "_count", family + "_sum", family + "_bucket")
    if typ == "summary":
        return (family + "_count", family + "_sum", family)
    return (family,)


# A run of sample lines of one family, from its first sample on: the family name is captured from the
# first line and must start every following one, followed by a suffix the type admits.
_LINE_REST = r"[{ \t][^\n]*+\n"


def _run_patterns(rest: str) -> tuple[dict[str, re.Pattern[str]], re.Pattern[str]]:
    """Patterns for a run of one family's lines, each line its name (with a suffix its type admits) then ``rest``:
    per histogram/summary type, and for every other type."""
    typed = {
        "histogram": re.compile(
            rf"([a-zA-Z_:][a-zA-Z0-9_:]*?)(?:_bucket|_count|_sum){rest}(?:\1(?:_bucket|_count|_sum){rest})*+"
        ),
        "summary": re.compile(rf"([a-zA-Z_:][a-zA-Z0-9_:]*?)(?:_count|_sum|){rest}(?:\1(?:_count|_sum|){rest})*+"),
    }
    return typed, re.compile(rf"({NAME}){rest}(?:\1{rest})*+")


_BLOCK_RE, _PLAIN_BLOCK_RE = _run_patterns(_LINE_REST)

# The same runs for a wanted family, of the usual sample line only: `name{labels} value`, the labels ending at
# the line's last "}" as in the line loop (a value holds no "}"), no timestamp, no blank (as str.strip() sees
# blanks) in the value or before the line's end, so that each line is exactly what the line loop would read. No
# "_" in the value either: float() reads digit separators, which the format has not (the line loop says so).
# Lines so checked are cut by plain string operations (see _read_block): the name ends at the first "{", the
# value follows the last "} ".
_USUAL_REST = r'\{[^\n]*\} [^\s{}"_]++\n'
_READ_BLOCK_RE, _PLAIN_READ_BLOCK_RE = _run_patterns(_USUAL_REST)


# One whole family of the usual shape, as the oracle groups lines into families: an optional HELP, an
# optional TYPE (a valid type), at least one of the two, then the sample lines whose names that type admits, then
# blank lines. A sample line is any line that starts with an admitted name followed by "{", space or tab: the line
# loop passes over such lines of an unwanted family unread too. The family's name must not be "_total" (a counter
# so named is an error when the family closes) and the next line must not continue the family (its HELP or TYPE
# again); anything else unusual (blank lines inside, comments, leading blanks, "\r", other spacing) ends the run
# there and the line loop reads on from that line. Lines of families not wanted are not validated beyond this (see
# the module docstring), as when they are stepped line by line. A family that opens with its HELP line has its name
# in group p and its type, if any, in group t; one that opens with its TYPE line (no HELP) in groups q and u
# (see _family_passed): two branches, so that the name is read once where it is written, not first by a lookahead.
_TYPED_SAMPLES = (
    r"(?:histogram\n(?:(?P={g})(?:_bucket|_count|_sum)[{{{{ \t]{{rest}})*+"
    r"|summary\n(?:(?P={g})(?:_count|_sum)?+[{{{{ \t]{{rest}})*+"
    r"|(?:counter|gauge|untyped|unknown|info|stateset|gaugehistogram)\n(?:(?P={g})[{{{{ \t]{{rest}})*+)"
)
_FAMILY = (
    r"(?:\#\ HELP\ (?!_total[ \t\n]){unwanted}(?P<p>{name})(?:[ \t][^\n]*+)?+\n"
    r"(?:\#\ TYPE\ (?P=p)\ (?=(?P<t>[a-z]++)\n)" + _TYPED_SAMPLES.format(g="p") + r"|(?:(?P=p)[{{ \t]{rest})*+)"
    r"(?:[ \t\r]*+\n)*+"
    r"(?!\#\ (?:HELP|TYPE)\ (?P=p)[ \t\n])"
    r"|\#\ TYPE\ (?!_total[ \t\n]){unwanted}(?P<q>{name})\ (?=(?P<u>[a-z]++)\n)"
    + _TYPED_SAMPLES.format(g="q")
    + r"(?:[ \t\r]*+\n)*+"
    r"(?!\#\ (?:HELP|TYPE)\ (?P=q)[ \t\n]))"
)
_REST = r"[^\n]*+\n"  # the rest of a line passed over
_ONE_FAMILY_RE = re.compile(_FAMILY.format(unwanted="", name=NAME, rest=_REST))
# Its groups by number (a run's pattern has the same: the wanted names' trie captures nothing), looked up once: a
# match's group by name costs a lookup in the pattern's table each time.
_P, _T, _Q, _U = (_ONE_FAMILY_RE.groupindex[group] for group in "ptqu")

# Wanted selections seen (usually one or two per process) -> their run patterns (None: family by family, line by line).
_UNWANTED_RUNS: dict[frozenset[object], _Runs] = {}
_MAX_RUN_NAMES = 5000  # a pattern for more names costs more to build than it saves


def _wanted_family(keep: Callable[[str], bool]) -> Callable[[str], bool]:
    """Whether ``keep`` wants a family of this name: the family's final name depends on its type only through a
    counter's "_total" (see _metadata)."""

    def wanted(name: str) -> bool:
        return keep(name) or (name.endswith("_total") and keep(name[:-6]))

    return wanted


def _unwanted_run(names: frozenset[object]) -> _Runs:
    """Patterns matching a run of whole families none of which ``names`` wants, and a run of sample lines none of whose
    names ``names`` wants (lines no family admits: see ``_TextParser.run``); None, None to go family by family and line
    by line.

    A family is wanted when its name is in ``names`` or is a wanted name plus "_total" (see _metadata), a line no family
    admits when its metric name (the longest name its text starts with) is in ``names``; the names are matched through
    a trie, so each family or line costs a few character tests, not one per wanted name.
    """
    if names in _UNWANTED_RUNS:
        return _UNWANTED_RUNS[names]
    if len(_UNWANTED_RUNS) >= 16:
        _UNWANTED_RUNS.clear()
    strings = [n for n in names if isinstance(n, str)]
    # a family is wanted by its name, or by its name without a counter's "_total": one lookup in a set of both
    runs: _Runs = (None, None, names.union([n + "_total" for n in strings]).__contains__)
    if len(strings) == len(names) <= _MAX_RUN_NAMES:
        wanted = _trie(strings)
        unwanted = rf"(?!{wanted}(?:_total|)[ \t\n])" if wanted else ""
        unwanted_name = rf"(?!{wanted}(?![a-zA-Z0-9_:]))" if wanted else ""
        runs = (
            re.compile("(?:" + _FAMILY.format(unwanted=unwanted, name=NAME, rest=_REST) + ")*+"),
            re.compile(_LINES.format(unwanted=unwanted_name)),
            runs[2],
        )
    _UNWANTED_RUNS[names] = runs
    return runs


# A run of sample lines that no family admits, each as the line loop reads one whose metric name is not wanted: a
# name (the longest, NAME_RE's, not wanted) first, the rest of the line unread; or a blank line. Anything else (a
# comment, a blank before the name, a wanted name, the last line without its newline) ends the run.
_LINES = r"(?:{unwanted}[a-zA-Z_:][^\n]*+\n|[ \t\r]*+\n)++"


_Trie = dict[str, "_Trie"]


def _trie(names: list[str]) -> str:
    """A pattern matching exactly ``names``, factored by common prefixes ("" when it would match only "")."""
    root: _Trie = {}
    for name in names:
        node = root
        for char in name:
            node = node.setdefault(char, {})
        node[""] = {}
    return _trie_pattern(root)


def _trie_pattern(node: _Trie) -> str:
    branches = [re.escape(char) + _trie_pattern(child) for char, child in sorted(node.items()) if char]
    if not branches:
        return ""
    # A name that ends where another goes on: an empty branch last, not "?" (the same match; a repeat costs `re` a
    # context of its own at each such node, an empty branch none)
    return "(?:" + "|".join(branches) + ("|)" if "" in node else ")")


def _skip_block(text: str, start: int, family: str, typ: str) -> int:
    """Pass over the run of ``family``'s sample lines that begins at offset ``start``, unread.

    Returns the offset after it, or the next line's when the run could not be established (the caller then
    reads on line by line). One regex pass in C instead of a Python step per line is what makes unwanted
    families nearly free.
    """
    m = _BLOCK_RE.get(typ, _PLAIN_BLOCK_RE).match(text, start)
    if m is None or m.group(1) != family:
        end = text.find("\n", start)
        return end + 1 if end >= 0 else len(text)
    return m.end()


SeriesKey = tuple[str, Hashable, float | None]  # sample name, label set (see _label_set), timestamp
_NO_LABELS: Hashable = frozenset()  # _label_set({})
_EMPTY: dict[str, str] = {}  # never filled: only ever copied


def _label_set(labels: dict[str, str]) -> Hashable:
    """A label set as a cheap hashable key: equal sets get equal keys, others not. No sort, no numbering table:
    2-3x cheaper than a sorted tuple. A set with "le" is the pair (its other labels, the bound), so that a
    bucket's key is built from its series' (see _TextParser._labels)."""
    bound = labels.get("le")
    if bound is None:
        return frozenset(labels.items())
    return frozenset([item for item in labels.items() if item[0] != "le"]), bound


def _sample(name: str, labels: dict[str, str], value: str, stamp: str | None, line: str, line_no: int) -> Sample:
    try:
        if stamp is None and "_" not in value:
            return Sample(name, labels, float(value))
        number = float(value)
    except ValueError:
        # Starlette's plain `Not Found` reads as a sample `Not` valued `Found`: as a page's first line, the page is
        # the error (further down a page, only that line is bad and is read around)
        not_metrics = _not_metrics(line) if line_no == 1 else None
        if not_metrics is not None:
            raise ParseError(not_metrics, line_no=line_no, line=line, whole_page=True) from None
        raise ParseError(f"invalid value {value!r}", line_no=line_no, line=line) from None
    if "_" in value:  # float() reads digit separators; the format has none
        raise ParseError(f"invalid value {value!r}", line_no=line_no, line=line)
    try:
        return Sample(name, labels, number, _timestamp(stamp)) if stamp is not None else Sample(name, labels, number)
    except (ValueError, OverflowError):
        raise ParseError(f"invalid timestamp {stamp!r}", line_no=line_no, line=line) from None


def _timestamp(token: str) -> float:
    """Milliseconds to seconds, dividing an integer exactly as the oracle does (no double rounding)."""
    if "_" in token:
        raise ValueError(f"invalid timestamp {token!r}")
    try:
        return int(token) / 1000
    except ValueError:
        return float(token) / 1000


_LABELS_RE = re.compile(rf"\{{{_BODY}\}}", re.DOTALL)


# A sample line whose metric name is written inside the braces, quoted (the text format as Prometheus 3 negotiates it,
# `escaping=allow-utf-8`): `{"name"` then a comma and the labels, or the closing brace.
_NAME_INSIDE_RE = re.compile(r'\{[ \t]*+"([^"\\\n]*+(?:\\.[^"\\\n]*+)*+)"[ \t]*+(?:,|(?=\}))')


def _name_inside(line: str, line_no: int) -> tuple[str, str]:
    """``{"name",a="b"} 1`` as ``name{a="b"} 1`` and the name (unescaped: any UTF-8, as the oracle reads it).

    Servers quote a name only when a scraper asks for UTF-8 names, and then only a name the classic format cannot
    write (client_golang and prometheus_client alike); a saved page may hold either, so both read the same. The
    line goes on through the usual path: its labels are validated as any line's, its family decided by the name.
    """
    m = _NAME_INSIDE_RE.match(line)
    if m is None:
        raise ParseError(_diagnose(line), line_no=line_no, line=line)
    name = unescape_label_value(m[1]) if "\\" in m[1] else m[1]
    if not name:
        raise ParseError("empty metric name inside the braces", line_no=line_no, line=line)
    return name + "{" + line[m.end() :], name


_JSON_START = re.compile(r"\s*+[\[{]")  # a body that may be JSON: its first non-space character


def _json_page(line: str) -> str | None:
    """What a line that is JSON says about the page, or None for a line that is not JSON.

    Only on the error path. Two real pages: llama-server from build 7010 until ggml-org/llama.cpp pull request
    #17386 answered ``/metrics`` with its exposition text serialised as one JSON string (quoted, ``\\n`` for each
    newline: issue #17384), which Prometheus cannot read either; trtllm-serve answers ``/metrics`` with its iteration
    stats as JSON (``[]`` before any, NVIDIA/TensorRT-LLM issue #6364, vllm-project/aibrix issue #2004) and serves
    Prometheus text at ``/prometheus/metrics``.
    """
    if not line.startswith(('"', "[", "{")):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, str) and ("# TYPE " in value or "# HELP " in value or "\n" in value):
        return (
            "the page is a JSON string holding exposition text (quoted, newlines escaped), not the text itself;"
            " llama-server from build 7010 served /metrics this way until ggml-org/llama.cpp pull request #17386"
            " (issue #17384): upgrade the server"
        )
    if isinstance(value, dict) and value.keys() <= _ERROR_BODY_KEYS and not value.keys().isdisjoint(_ERROR_KEYS):
        # an error answered as JSON: FastAPI's `{"detail":"Not Found"}` for a path it does not serve (SGLang 0.4.6
        # without metrics on that node: sgl-project/sglang issue #7305, the second node of a two-node dp=2 server;
        # fixed by pull request #7720, July 2025), an OpenAI-style `{"error": ...}`
        return (
            "the page is an error answered in JSON, not metrics: nothing is served at this path, or the server's"
            " metrics are off (SGLang serves /metrics only with --enable-metrics, and a multi-node SGLang server only"
            " on its first node before sgl-project/sglang pull request #7720: the other nodes answer this, issue #7305)"
        )
    return (
        "the page is JSON, not the Prometheus text format; trtllm-serve answers /metrics with JSON iteration"
        " stats and serves its Prometheus page at /prometheus/metrics"
    )


_ERROR_KEYS = frozenset(("detail", "error", "message"))
_ERROR_BODY_KEYS = _ERROR_KEYS | {"object", "type", "param", "code", "status"}
# A whole line that is an HTTP error's text, not a sample: Go's net/http and gin answer a path they do not serve with
# `404 page not found` (a real answer to /metrics: eko/pihole-exporter issue #33), Starlette with `Not Found`.
_ERROR_TEXT = re.compile(
    r"(?i)\s*(?:\d{3}\s+)?(?:page not found|not found|unauthorized|forbidden|bad gateway|service unavailable"
    r"|internal server error|method not allowed)\.?\s*"
)


def _not_metrics(line: str) -> str | None:
    """What the page is when its bad line says it is no exposition at all: HTML, or an HTTP error's text.

    Only on the error path. A real HTML answer: a Squid proxy's error page to a MindIE server's /metrics
    (gpustack/gpustack issue #1785)."""
    if line[:1] == "<" and line[1:15].lower().startswith(("!doctype html", "html", "head", "body", "?xml")):
        return (
            "the page is HTML, not the Prometheus text format: an error or login page of the server or of a proxy"
            " in between; check the URL and that no proxy answers for the target"
        )
    if _ERROR_TEXT.fullmatch(line):
        return (
            "the page is an HTTP error's text, not metrics: nothing is served at this path (Go servers such as"
            " Ollama's answer `404 page not found` for a path they lack, Starlette's `Not Found`)"
        )
    return None


def _diagnose(line: str) -> str:
    """Say what is wrong with a sample line the fast pattern refused."""
    not_metrics = _not_metrics(line)
    if not_metrics is not None:
        return not_metrics
    m = NAME_RE.match(line)
    if m is None:
        json_page = _json_page(line)
        if json_page is not None:
            return json_page
        if line.startswith("{"):
            return 'invalid metric name inside the braces; expected {"name",labels} value'
        return "invalid metric name"
    end = m.end()
    if end < len(line) and line[end] not in " \t{":
        return f"invalid character {line[end]!r} in metric name"
    rest = line[end:].lstrip(" \t")
    if rest.startswith("{"):
        labels = _LABELS_RE.match(rest)
        if labels is None:
            return "invalid label set: expected name=\"value\" pairs (names not starting with '__')"
        rest = rest[labels.end() :]
    tokens = rest.split()
    if not tokens:
        return "missing value"
    if len(tokens) > 2:
        return "unexpected text after the value and timestamp"
    return "invalid value or timestamp"
