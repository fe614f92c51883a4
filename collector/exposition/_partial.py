"""A text page read around the lines that break it: ``parse(..., drop_bad_lines=True)``, what the scrape loop reads.

A serving stack sometimes writes a line no parser can read: dcgm-exporter writes ``ERROR - FAILED TO CONVERT TO STRING``
as the value of a field it cannot render as text, an exporter cuts a line short, a label value holds a stray quote. Read
strictly, one such line loses the whole page: every replica's queue and every GPU's health on it. With
``drop_bad_lines``, a line whose fault is its own (its value, timestamp, labels or name) loses only its family: every
sample line of the same metric name is set aside, the page is read again with a stand-in where each of those lines
stood, and every family holding a stand-in is left out: the families those lines belong to, wherever their name and
place put them (on a page whose families are not contiguous, Envoy's, one name's lines feed more than one family). The
whole family, not only the bad series: a family with one series unreadable would otherwise be summed or averaged as if
it had one series fewer (a queue read short, a mean KV usage over the GPUs that could be read), where a missing family
reads as unknown, which every reader already handles.

What was left out is on the result (``PartialPage``): ``errors``, one ``ParseError`` per metric name set aside,
each naming its first bad line, in the page's order, ``names``, those metric names, and ``dropped``, the families left
out. What still loses the page, as before: a fault in a HELP or TYPE line (they decide where families begin and end),
a series a typed family carries twice (which copy is right is unknowable), the sample cap and the time budget
(``ParseError.whole_page``), invalid UTF-8, and faults under more than ``MAX_BAD_NAMES`` metric names (a page that
broken is not one to guess at). OpenMetrics pages are read strictly: the format's strictness is its point.

What it costs: a page with bad lines is read twice, however many names they break, not once more per name. Once the
first read has failed, one pattern in C finds the sample lines that are not of the usual shape (``name{labels}
value``); each of their metric names is tried on its own, its lines read under the page's HELP and TYPE lines and
nothing else (the fault of a line that fails there is its own), and every name whose lines fail, and whose first bad
line comes after the first read's (lines before it were read in place), is set aside with it before the page is read
again. A name this misses is found as before, by that read failing on it. A caller that knows which names were set
aside on a source's last page (the scrape loop, per target: ``collector.exposition._layout.LayoutCache``) passes them
as ``expected``: each is tried on its own first, set aside if its lines still fail, and the page is then read once;
a name whose lines read again (a field that healed) is read with the page on that very scrape.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable
from itertools import islice

from collector.exposition._lex import NAME, NAME_RE
from collector.exposition._model import MetricFamily, ParseError

MAX_BAD_NAMES = 8
# Names of lines of an unusual shape tried on their own after a page's first read fails, at most (a page whose every
# line is unusual, `{a="1", b="2"}` say, is then read around as before, one more read per bad name).
MAX_SUSPECTS = 2 * MAX_BAD_NAMES

# What follows a family's name in its samples' names (a counter's _total, a histogram's parts, OpenMetrics' _created).
_PARTS = ("_bucket", "_sum", "_count")  # a histogram's or summary's parts (collector.exposition._untyped)
_SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created", "_info", "_gsum", "_gcount")

_NAME_END = r"(?![a-zA-Z0-9_:])"
# A line's start and the blanks str.lstrip() takes off (``\s`` is str.isspace): patterns run over the page with a
# newline put in front, so that they start with a character sought in C rather than tried at every offset.
_LEAD = r"\n[^\S\n]*+"
# The usual sample line, `name{labels} value` with an optional timestamp; a line of another shape is a suspect.
_PLAIN_VALUE = r"[-+]?(?:[0-9]++(?:\.[0-9]*+)?+|\.[0-9]++)(?:[eE][-+]?[0-9]++)?+|[-+]?Inf|NaN"
_PLAIN_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*+="(?:[^"\\\n]++|\\.)*+"'
_PLAIN_LINE = rf"{NAME}(?:\{{(?:{_PLAIN_LABEL}(?:,{_PLAIN_LABEL})*+,?+)?+\}})? (?:{_PLAIN_VALUE})(?: -?[0-9]++)?+\r?$"
_SUSPECT_RE = re.compile(rf"{_LEAD}(?![#\n])(?!{_PLAIN_LINE})({NAME})", re.MULTILINE)


class PartialPage(dict[str, MetricFamily]):
    """A page's families less those some of its lines broke: ``errors`` says which lines and why, ``names`` the
    metric names set aside, ``dropped`` which families were left out (see the module docstring)."""

    __slots__ = ("dropped", "errors", "names")

    def __init__(
        self,
        families: dict[str, MetricFamily],
        errors: tuple[ParseError, ...],
        dropped: frozenset[str],
        names: tuple[str, ...] = (),
    ) -> None:
        super().__init__(families)
        self.errors = errors
        self.dropped = dropped
        self.names = names


def read_around(
    text: str,
    read: Callable[[str], dict[str, MetricFamily]],
    first: ParseError | None,
    expected: Collection[str] = (),
) -> dict[str, MetricFamily]:
    """``text`` read by ``read`` without the families of the sample lines that break it; ``first`` is the error the
    whole page ended in (None: not read yet), ``expected`` the names set aside on the source's last page. A plain
    dict when no line breaks it, else a ``PartialPage``. Raises the error that cannot be read around (see the module
    docstring)."""
    lines: list[str] = []  # the page's lines, split when an error needs its line's name
    found: dict[str, ParseError] = {}  # metric name set aside -> its first bad line's error
    if first is not None:
        lines = text.split("\n")
        name = _line_name(lines, first)
        if name is None:
            raise first
        found[name] = first
        # the names of the lines of an unusual shape after the bad line, tried on their own
        after = sum(map(len, lines[: first.line_no])) + (first.line_no or 0)  # the offset of the line after it
        candidates: Iterable[str] = expected or list(
            islice(dict.fromkeys(m[1] for m in _SUSPECT_RE.finditer("\n" + text, after) if m[1] != name), MAX_SUSPECTS)
        )
    else:
        candidates = expected
    tried = [n for n in candidates if n not in found]
    marked: _Marked = []
    if tried:
        marked = _marked(text, [*found, *tried])
        for name, error in _failing_alone(marked, tried, read, text).items():
            # a line before the first read's bad line was read in place: one failing alone there is not bad in place
            if first is None or (error.line_no or 0) > (first.line_no or 0):
                found[name] = error
    ordered = sorted(found.values(), key=lambda e: e.line_no or 0)
    if len(ordered) > MAX_BAD_NAMES:
        raise ordered[MAX_BAD_NAMES]
    stand_ins = True  # each line set aside has a stand-in on the page read again (``_stood_in``) unless one is refused
    while True:
        page, standing = text, frozenset[int]()
        if found:
            marked = marked or _marked(text, found)
            page, standing = _stood_in(text, marked, found) if stand_ins else (_blanked(text, marked, found), standing)
        try:
            families = read(page)
        except ParseError as e:
            if e.line_no in standing:  # a stand-in refused (none is known to be): the lines blanked instead, and
                # the families left out found by the lines' names (``_left_out``)
                stand_ins = False
                continue
            lines = lines or text.split("\n")
            name = _line_name(lines, e)
            if name is None or name in found or len(found) >= MAX_BAD_NAMES:
                raise
            found[name] = e
            marked = []
            continue
        break
    if not found:
        return families  # the names expected all read again
    names = tuple(sorted(found, key=lambda n: found[n].line_no or 0))
    left_out, dropped = _lost(names, families) if stand_ins else _left_out(names, families, text)
    kept = {n: f for n, f in families.items() if n not in left_out}
    return PartialPage(kept, tuple(found[n] for n in names), dropped, names)


def _left_out(names: Iterable[str], families: dict[str, MetricFamily], text: str) -> tuple[set[str], frozenset[str]]:
    """The families read that the bad lines' metric ``names`` leave out (``_families_of``), and the families said to
    be left out: an untyped histogram's parts as that histogram; a family none of whose lines is left (no HELP or
    TYPE line either) by its lines' metric name."""
    left_out = set().union(*(_families_of(n, families, text) for n in names))
    said = {n for n in left_out if not (_untyped_part(n, families) and _untyped_base(n, families, text) in left_out)}
    said.update(n for n in names if not any(_belongs(f, (n,)) for f in said))
    return left_out, frozenset(said)


def _names_re(names: Iterable[str]) -> str:
    return "(?:" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + ")" + _NAME_END


# A line of the page found by ``_marked``: its number, its start and end offsets, its metric name (None: a ``#`` line).
_Marked = list[tuple[int, int, int, str | None]]


def _marked(text: str, names: Iterable[str]) -> _Marked:
    """Every ``#`` line of ``text`` and every sample line of the metric ``names``, in order, by one pattern in C."""
    pattern = re.compile(rf"{_LEAD}(?:#|({_names_re(names)}))[^\n]*+")
    out: _Marked = []
    line_no, at = 1, 0
    for m in pattern.finditer("\n" + text):
        start = m.start()  # the line's offset in ``text`` (the newline before it is the one put in front)
        line_no += text.count("\n", at, start)
        at = start
        out.append((line_no, start, m.end() - 1, m[1]))
    return out


def _blanked(text: str, marked: _Marked, names: Collection[str]) -> str:
    """``text`` with every sample line of the metric ``names`` blank (not removed: every other line keeps its
    number)."""
    pieces, at = [], 0
    for _, start, end, name in marked:
        if name is not None and name in names:
            pieces.append(text[at:start])
            at = end
    pieces.append(text[at:])
    return "".join(pieces)


# The one label of a line set aside's stand-in: the line's number, so that no two stand-ins are one series.
_STAND_IN = "kvpilot_line_set_aside"


def _stood_in(text: str, marked: _Marked, names: Collection[str]) -> tuple[str, frozenset[int]]:
    """``text`` with every sample line of the metric ``names`` replaced by a line the parser reads where that line
    stood and as that line's family (the parser puts a line in a family by its metric name and its place on the
    page alone): the name, the line's number as its one label (a bucket's ``le`` too) and a value of 0; and those
    lines' numbers. The families holding a stand-in are every family that lost lines (``_lost``): on a page whose
    families are not contiguous (Envoy's counter typed as ``X_total``, its later lines an untyped ``X_total``), more
    than one family of the lines' name."""
    pieces: list[str] = []
    at, standing = 0, []
    for line_no, start, end, name in marked:
        if name is not None and name in names:
            le = ',le="+Inf"' if name.endswith("_bucket") else ""
            pieces += (text[at:start], f'{name}{{{_STAND_IN}="{line_no}"{le}}} 0')
            at = end
            standing.append(line_no)
    pieces.append(text[at:])
    return "".join(pieces), frozenset(standing)


def _lost(names: Iterable[str], families: dict[str, MetricFamily]) -> tuple[set[str], frozenset[str]]:
    """The families read from ``_stood_in``'s page that hold a stand-in, to leave out, and the families said to be
    left out: those, and a metric name set aside none of whose stand-ins a family read holds (a selective read
    passes over them) by itself."""
    names = tuple(names)
    lost = {
        f
        for f, family in families.items()
        if any(n.startswith(f) for n in names) and any(_STAND_IN in s.labels for s in family.samples)
    }
    return lost, frozenset(lost.union(n for n in names if not any(_belongs(f, (n,)) for f in lost)))


def _failing_alone(
    marked: _Marked, names: list[str], read: Callable[[str], dict[str, MetricFamily]], text: str
) -> dict[str, ParseError]:
    """The ``names`` whose sample lines fail read on their own, under the page's ``#`` lines and nothing else, each
    with the error at its line's number on the page."""
    comments = [(line_no, text[start:end]) for line_no, start, end, name in marked if name is None]
    failing: dict[str, ParseError] = {}
    for name in names:
        mine = [(line_no, text[start:end]) for line_no, start, end, n in marked if n == name]
        if not mine:
            continue
        page = sorted(comments + mine)
        try:
            read("\n".join(line for _, line in page))
        except ParseError as e:
            if e.whole_page or e.line_no is None or not 0 < e.line_no <= len(page):
                continue
            line_no, line = page[e.line_no - 1]
            if _sample_name(line) == name:
                e.move_to(line_no)
                failing[name] = e
    return failing


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


def _families_of(name: str, families: dict[str, MetricFamily], text: str = "") -> set[str]:
    """The family the sample lines named ``name`` belonged to: the page's family of that very name where it declares
    one (a gauge ``x_info`` or ``x_count`` of its own, beside a healthy gauge ``x``), else the family its suffix says
    (``x_total``: counter ``x``; ``x_bucket``: histogram ``x``). ``x_created`` is a family of its own on a text page
    (``_untyped``), whether or not a TYPE line says so: a garbled ``vllm:prompt_tokens_created`` line under counter
    ``vllm:prompt_tokens`` (no TYPE of its own) lost the counter too.

    On a page without TYPE lines a histogram is put together from its parts (``_untyped``): where the bad lines were
    its ``x_sum``, its ``x_bucket`` alone is not put together again and would stay as a family of its own. The
    untyped parts left of ``x`` are then ``x``'s, and left out with it, and ``x`` is the family said to be left out
    where the page ``text`` has sample lines of another part of ``x`` (a garbled ``lmcache:time_to_retrieve_sum``
    line, LMCache issue #729's grepped page, left ``lmcache:time_to_retrieve_bucket`` behind)."""
    if name in families or name.endswith("_created"):  # a text page reads x_created as a family of its own
        return {name}
    own = {f for f in families if _belongs(f, (name,))}
    base = _untyped_base(name, families, text)
    if base is not None:
        own.add(base)
        own.update(base + part for part in _PARTS if _untyped_part(base + part, families))
    return own


def _untyped_part(name: str, families: dict[str, MetricFamily]) -> bool:
    fam = families.get(name)
    return fam is not None and fam.type == "unknown"


def _untyped_base(name: str, families: dict[str, MetricFamily], text: str) -> str | None:
    """``x`` for a part ``x_bucket``, ``x_sum`` or ``x_count`` of an untyped histogram or summary: where no family
    ``x`` was read and another part of ``x`` is read untyped, or has sample lines in the page ``text`` (a selective
    read drops a part it does not want); else None."""
    for part in _PARTS:
        if name.endswith(part):
            base = name[: -len(part)]
            if base in families:
                return None
            others = [base + p for p in _PARTS if p != part]
            if any(_untyped_part(o, families) for o in others):
                return base
            if text and re.search(_LEAD + _names_re(others), "\n" + text):
                return base
    return None


def _belongs(family: str, names: Iterable[str]) -> bool:
    """Whether a sample named one of ``names`` belongs to ``family`` (``x_total`` to counter ``x``, ``x_bucket`` to
    histogram ``x``...)."""
    return any(n == family or (n.startswith(family) and n[len(family) :] in _SUFFIXES) for n in names)
