"""Page layouts: a target's page read without parsing it when its layout is the one seen before.

A serving engine's /metrics page keeps its layout scrape after scrape: the same families in the same
order, the same label sets; only the values move. Prometheus relies on this too (its scrape cache maps
each series' bytes to a stored reference and skips parsing the labels: prometheus/prometheus,
scrape/scrape.go, ``scrapeCache``, commit fcdb6c2b14ee931f3601a1a6fa6ee478a56f1bf0). A ``PageLayout``
is built once from a page the parser read: every line is pinned except the values, so a later page
either fits it, and then holds the same families, samples and labels with new values, or does not, and
is parsed in full (and its layout learnt).

How the layout learns which line feeds which sample without knowing the parser's internals: it parses a
*probe* page, the page with every sample value replaced by its line number, and reads the line each
sample came from off its value. Lines the probe does not return are lines the selective parse skips;
their name is pinned (the parser decides a line's family from its name alone) and the rest may change.
Values of the samples read must be plain numbers (``1``, ``-2.5e-3``, ``+Inf``, ``NaN``); anything else
does not match and takes the parser, which accepts it or says what is wrong.

A page read around bad lines (``parse(..., drop_bad_lines=True)``, collector.exposition._partial) has a layout too:
every sample line of a name set aside, and of a family left out, is pinned word for word (the probe keeps it as it
is), so a later page has the layout only while those lines are what they were, and then fails as that page failed
and reads as it read: the same families, the same errors. A field that heals, or a new bad line, changes a line the
layout pins or checks, and the page takes the parser. The cache also remembers, per source, the names set aside
on its last page and hands them to the parser (``expect_bad``), so that a page too large for a layout, or off it,
is read once rather than once more per bad name.
"""

from __future__ import annotations

import operator
import re
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from collector.exposition._lex import NAME_RE
from collector.exposition._model import MetricFamily, ParseError, Wanted, decode_utf8, selector
from collector.exposition._page import FamilySpec, LaidOutPage, ReadAround
from collector.exposition._partial import _SUFFIXES, _belongs

# A value the fast path reads: a plain decimal, Inf or NaN (float() reads each exactly as the parser does);
# a page's values are checked at once, joined by newlines.
_VALUE = r"[-+]?(?:[0-9]++(?:\.[0-9]*+)?+|\.[0-9]++)(?:[eE][-+]?[0-9]++)?+|[-+]?Inf|NaN"
_VALUES_RE = re.compile(rf"(?:(?:{_VALUE})\n)*+(?:{_VALUE})")
# Values made of these characters only are checked by float() itself: on them it takes exactly _VALUE's decimals
# (digits, one point, an exponent, a sign before each; no blank, underscore, Inf or NaN can be among them), so one
# character-class pass replaces _VALUES_RE's alternation per value, and the rest (Inf, NaN, anything odd) take it.
_DECIMAL_CHARS_RE = re.compile(r"[-+.0-9eE]*+")
# A sample line split into what comes before its value, the value, and what follows (timestamp, blanks).
_SPLIT_RE = re.compile(r"(.*?(?<=[ \t}]))([^ \t\r\x0b\x0c{}\"]++)((?:[ \t]++[^ \t\r\x0b\x0c{}\"]++)?+[ \t\r]*+)")
# A skipped line's start: its name and the character after it (which ends the name).
_LEAD_RE = re.compile(r"[ \t]*+[a-zA-Z_:][a-zA-Z0-9_:]*+[^a-zA-Z0-9_:]")
# A "# TYPE name type" line's name.
_TYPE_RE = re.compile(r"[ \t]*+#[ \t]++TYPE[ \t]++([a-zA-Z_:][a-zA-Z0-9_:]*+)")

MAX_LAYOUT_CHARS = 512 * 1024  # larger pages are parsed every time (a layout holds its page's lines)

# Rests per regex: a layout with more (a page of tens of thousands of lines) walks the page with several regexes, one
# after the other. re compiles one pattern in time and memory that grow faster than its length (the largest page a
# layout takes, 131,072 lines: 4.4 s and +204 MB RSS as one pattern, 0.46 s and +8 MB in chunks of 4,096).
_STEPS_PER_REGEX = 4096

_Parse = Callable[..., Mapping[str, MetricFamily]]
_Pick = Callable[[Sequence[Any]], tuple[Any, ...]]


def _picker(indices: list[int]) -> _Pick:
    """The items at ``indices`` (lines of a page, values of a family), as a tuple, picked in C."""
    if not indices:
        return lambda _lines: ()
    if len(indices) == 1:
        only = indices[0]
        return lambda lines: (lines[only],)
    return operator.itemgetter(*indices)


# The compiled patterns of the layouts alive, by source: a layout learnt again (a source whose comment carries the time
# learns its layout anew every RETRY_AFTER pages, most often a pattern of the same source) takes the one compiled
# before while a layout holds it, and a pattern no layout holds is freed (see _compiled).
_PATTERNS: weakref.WeakValueDictionary[str, re.Pattern[str]] = weakref.WeakValueDictionary()


def _compiled(source: str) -> re.Pattern[str]:
    """``re.compile(source)``, without ``re``'s own cache keeping it: a layout's pattern lives as long as a layout.

    ``re`` keeps the last 512 patterns compiled in the process, keyed by their source, whoever holds them. A layout's
    pattern is its own (each step's block length), so on 80010be up to 512 of them outlived their layouts once
    ``LayoutCache._prune`` forgot these (a vLLM page's pattern holds ~16 KB, a 4,096-step chunk's ~0.34 MB: up to
    ~175 MB alive for nothing where the largest pages' layouts came and went).

    ``re`` has no documented way to compile without its cache or to drop one entry (``re._compiler`` and
    ``re._cache`` are private and changed between releases); ``re.purge()``, which empties it, is documented. It is
    safe to empty: it is a cache only, so a pattern compiled from a string elsewhere is compiled again on its next
    use, the same pattern, and patterns compiled once and held (every module-level one here) are not touched; ``re``
    tolerates another thread emptying it mid-compile (its eviction ignores a missing entry). Its price is those
    recompiles, once a learn: a tick of the bench's loop compiles none through re's cache. What the cache did for
    layouts (a layout learnt again whose pattern is one compiled before: 12 M instead of 40 M instructions for a
    vLLM page) ``_PATTERNS`` does while a layout holds the pattern."""
    pattern = _PATTERNS.get(source)
    if pattern is None:
        pattern = re.compile(source)
        re.purge()
        _PATTERNS[source] = pattern
    return pattern


class _Rests:
    """The rests a chunked walk took, as a match's ``groups()`` gives them."""

    __slots__ = ("_rests",)

    def __init__(self, rests: list[str]) -> None:
        self._rests = tuple(rests)

    def groups(self) -> tuple[str, ...]:
        return self._rests


class _Chunked:
    """A layout's walk over a page in several regexes (``_STEPS_PER_REGEX`` rests each), each from where the last
    ended: the same rests as one regex of all the steps (every step is possessive: nothing is given back)."""

    __slots__ = ("_last", "_steps")

    def __init__(self, steps: list[str], tail: str) -> None:
        k = _STEPS_PER_REGEX
        self._steps: list[Callable[[str, int], re.Match[str] | None]] = [
            _compiled("(?s)" + "".join(steps[i : i + k])).match for i in range(0, len(steps), k)
        ]
        self._last: Callable[[str, int], re.Match[str] | None] = _compiled("(?s)" + tail).fullmatch

    def __call__(self, text: str) -> _Rests | None:
        rests: list[str] = []
        pos = 0
        for step in self._steps:
            found = step(text, pos)
            if found is None:
                return None
            rests += found.groups()
            pos = found.end()
        if self._last(text, pos) is None:
            return None
        return _Rests(rests)


class PageLayout:
    """One page layout: its lines, pinned except for what may change, and the families they yield.

    A page has the layout when it has as many lines; its comment, blank and otherwise odd lines are the
    same; each skipped line starts with the same name (the parser decides a line's family from its name
    alone, and skips the rest); each line read starts with the same name and labels and ends in a plain
    number. Every check runs in C over the whole page at once, without splitting it into lines (one regex, one join,
    one comparison; see ``__init__``). The page is then its values (``LaidOutPage``): no sample is built unless a
    reader asks for its family."""

    __slots__ = (
        "families",
        "fixed",
        "key",
        "line_count",
        "match",
        "page_shape",
        "partial",
        "pick_values",
        "read_starts",
    )

    def __init__(
        self,
        lines: list[str],
        pinned: list[int],
        skipped: dict[int, str],
        read: dict[int, str],
        families: dict[str, FamilySpec],
        partial: ReadAround | None = None,
    ) -> None:
        self.line_count = len(lines)
        # a page read around bad lines: its errors, the families left out and the metric names set aside
        self.partial = partial
        self.read_starts = tuple(read.values())
        # The page as fixed blocks and the rests between them: a block is what the layout pins (pinned lines, newlines,
        # each checked line's start), a rest what follows a checked line's start up to its line's end (a line read:
        # its value; a line skipped: anything). The page has the layout when and only when the blocks with the page's
        # rests between them make the page (no rest holds a newline, so the lines are the layout's, each pinned line
        # as it was, each checked line beginning with its start).
        starts = {**skipped, **read}
        blocks: list[str] = []
        block: list[str] = []
        rest_lines: list[int] = []
        for i, line in enumerate(lines):
            if i:
                block.append("\n")
            start = starts.get(i)
            if start is None:
                block.append(line)
                continue
            block.append(start)
            blocks.append("".join(block))
            block = []
            rest_lines.append(i)
        blocks.append("".join(block))
        # One regex walks the page: it steps over each block by its length without reading it ((?s).{n}+ moves the
        # position, in C and in constant time) and takes each rest up to the next newline; the blocks are then checked
        # all at once, by rebuilding the page from them and the rests taken (one join, one comparison).
        steps = [f".{{{len(b)}}}+([^\\n]*+)" for b in blocks[:-1]]
        tail = f".{{{len(blocks[-1])}}}+" if blocks[-1] else ""
        self.match: Callable[[str], re.Match[str] | _Rests | None]
        if len(steps) <= _STEPS_PER_REGEX:
            self.match = _compiled("(?s)" + "".join(steps) + tail).fullmatch
        else:
            self.match = _Chunked(steps, tail)
        # the page to be: its blocks with a place between each two for a rest (filled per page on a copy)
        self.fixed = [""] * (2 * len(blocks) - 1)
        self.fixed[0::2] = blocks
        self.pick_values = _picker([k for k, i in enumerate(rest_lines) if i in read])
        self.families = families
        self.page_shape = tuple(spec[5] for spec in families.values())
        # What makes two layouts one (a deployment's replicas serve one layout): they then share the families'
        # shapes, and so what readers plan per shape.
        self.key = (tuple(pinned), "\n".join(lines[i] for i in pinned), tuple(skipped.items()), tuple(read.items()))

    def read(self, text: str) -> LaidOutPage | None:
        """The families of ``text`` if it has this layout, else None: its values, from which a family's samples
        are built when it is looked up (``LaidOutPage``). Label dicts are shared between pages of one layout
        (samples are read-only)."""
        found = self.match(text)
        if found is None:
            return None
        rests = found.groups()
        page = self.fixed.copy()
        page[1::2] = rests
        if "".join(page) != text:
            return None
        values = self.pick_values(rests)
        if _DECIMAL_CHARS_RE.fullmatch("".join(values)) is not None:
            try:
                numbers = list(map(float, values))
            except ValueError:  # not a decimal after all ("1-2", "e", ".", ""): as _VALUES_RE would have said
                return None
        elif _VALUES_RE.fullmatch("\n".join(values)) is None:
            return None
        else:
            numbers = list(map(float, values))
        if self.partial is None:
            return LaidOutPage(self.families, self.page_shape, numbers)
        return LaidOutPage(self.families, self.page_shape, numbers, self.partial)


def learn_layout(
    text: str, wanted: Wanted, parse: _Parse, max_samples: int, page: Mapping[str, MetricFamily] | None = None
) -> PageLayout | None:
    """``text``'s layout (``parse`` is the parser, called on a probe page: see the module docstring), or None
    when the page does not lend itself to one (too large, a timestamp on a line read, an odd line). ``page`` is
    what ``parse`` made of ``text``, where the caller has it: a page read around bad lines says which."""
    if len(text) > MAX_LAYOUT_CHARS:
        return None
    names: tuple[str, ...] = getattr(page, "names", ())
    partial: ReadAround | None = None
    if names:
        partial = (getattr(page, "errors"), getattr(page, "dropped"), names)  # noqa: B009 (a PartialPage's)
    lines = text.split("\n")
    probe = list(lines)
    split: dict[int, tuple[str, str]] = {}  # line index -> (before the value, after it)
    for i, raw in enumerate(lines):
        stripped = raw.strip()
        if not stripped or stripped[0] == "#":
            continue
        if partial is not None:
            # a line of a name set aside or of a family left out: pinned word for word, kept as is in the probe
            lead = NAME_RE.match(raw.lstrip())
            if lead is not None and (lead.group() in names or any(_belongs(f, (lead.group(),)) for f in partial[1])):
                continue
        m = _SPLIT_RE.fullmatch(raw)
        if m is None:
            return None
        split[i] = (m[1], m[3])
        probe[i] = f"{m[1]}{i}{m[3]}"
    try:
        if partial is None:
            families = parse("\n".join(probe), wanted=wanted, max_samples=max_samples)
        else:
            families = parse("\n".join(probe), wanted=wanted, max_samples=max_samples, expect_bad=names)
    except ParseError:
        return None
    if partial is None:
        if getattr(families, "errors", None):
            return None  # read around a line the page itself did not break (a value the probe changed)
    elif (
        getattr(families, "names", ()) != names
        or getattr(families, "dropped", None) != partial[1]
        or [(e.line_no, str(e)) for e in getattr(families, "errors", ())] != [(e.line_no, str(e)) for e in partial[0]]
    ):
        return None  # the probe did not fail as the page did
    read: dict[int, str] = {}  # line index -> what precedes its value
    specs: list[tuple[str, str, str, str, list[tuple[str, dict[str, str], float | None, int]]]] = []
    for fam in families.values():
        samples = []
        for s in fam.samples:
            line = int(s.value) if s.value.is_integer() else -1
            if line not in split or line in read or split[line][1]:
                return None  # not one line's value, or a line with a timestamp or trailing blanks
            read[line] = split[line][0]
            samples.append((s.name, s.labels, s.timestamp, line))
        specs.append((fam.name, fam.type, fam.help, fam.unit, samples))
    # Lines the parser reads but the probe did not return (see _read_unreturned) are checked as lines read are, their
    # values plain numbers, though no sample takes them; with a timestamp after the value, pinned word for word.
    want = selector(wanted)
    typed = {m[1] for m in map(_TYPE_RE.match, lines) if m is not None}
    checked_pinned: set[int] = set()
    for i, (before, after) in split.items():
        lead = _LEAD_RE.match(lines[i])
        if i not in read and lead is not None and _read_unreturned(lead.group()[:-1].lstrip(), want, typed):
            if after:
                checked_pinned.add(i)
            else:
                read[i] = before
    read = dict(sorted(read.items()))
    order = {line: k for k, line in enumerate(read)}
    pinned: list[int] = []
    skipped: dict[int, str] = {}
    for i, raw in enumerate(lines):
        if i in read:
            continue
        lead = _LEAD_RE.match(raw) if i in split else None
        if lead is None or i in checked_pinned:
            pinned.append(i)
        else:
            skipped[i] = lead.group()
    final: dict[str, FamilySpec] = {}
    for n, t, h, u, ss in specs:
        positions = [order[line] for _sn, _sl, _st, line in ss]
        final[n] = (n, t, h, u, [(sn, sl, st, order[line]) for sn, sl, st, line in ss], object(), _picker(positions))
    return PageLayout(lines, pinned, skipped, read, final, partial)


def _read_unreturned(name: str, want: Callable[[str], bool], typed: set[str]) -> bool:
    """Whether the parser reads a line of this name although the probe did not return it: an untyped sample of a
    wanted family's name, or of one with a family suffix (an ``x_count`` with no ``# TYPE`` may belong to a wanted
    ``x``, so its value is read and a bad one is an error, yet alone it makes no sample). A line of a typed family
    is read or skipped by that family alone (the probe tells which). Such a line is pinned word for word: skipped,
    a later page with a bad value there would fit the layout and lose the error the parser reports."""
    bases = [name[: -len(sfx)] for sfx in _SUFFIXES if name.endswith(sfx)]
    if name in typed or any(b in typed for b in bases):
        return False
    return want(name) or any(map(want, bases))


MAX_MISSES = 3  # pages in a row that did not fit their source's layout, after which it is no longer learnt...
RETRY_AFTER = 64  # ...until this many pages later
RECENT_LAYOUTS = 8  # layouts a source seen for the first time tries before its page is parsed and learnt
UNHELD_LAYOUTS = 16  # layouts learnt beyond those held, after which those no source holds are forgotten


class LayoutCache:
    """Page layouts by source (a target), for the text format: ``parse`` reads a page with its source's
    layout when it matches, else with the parser, and then learns the page's layout for next time.

    A source whose layout keeps changing stops costing a layout per page: after ``MAX_MISSES`` pages in a
    row that did not fit, it is parsed only, and tried again after ``RETRY_AFTER`` pages. Sources whose pages
    have one layout share it: a source seen for the first time tries the layouts learnt last before its page is
    parsed, so a deployment's replicas learn one layout between them, not one each (a first tick over a
    thousand targets would otherwise cost two parses per target)."""

    def __init__(self, parse: _Parse, max_sources: int = 10_000) -> None:
        self._parse = parse
        self._max_sources = max_sources
        # source -> [layout or None, misses in a row, pages since the last miss beyond MAX_MISSES, the metric names
        # its last page was read around (``PartialPage.names``)]
        self._sources: OrderedDict[Hashable, list[object]] = OrderedDict()
        # One layout per distinct layout seen (bounded: forgotten all at once when full; sources keep theirs). A
        # layout no source holds any more is forgotten once UNHELD_LAYOUTS such may be here (``_prune``).
        self._shared: dict[Hashable, PageLayout] = {}
        self._held = 0  # layouts here after the last prune
        self._recent: list[tuple[Wanted, PageLayout]] = []
        self.hits = 0  # pages read off a layout
        self.misses = 0  # pages parsed
        self.learnt = 0  # layouts learnt (or tried)

    def parse(
        self, source: Hashable, text: str | bytes, *, wanted: Wanted, max_samples: int
    ) -> Mapping[str, MetricFamily]:
        """``text``'s families as ``parse(text, wanted=wanted, max_samples=max_samples)`` returns them."""
        if isinstance(text, bytes):
            text = decode_utf8(text)
        entry = self._sources.get(source)
        if entry is None:
            entry = [None, 0, 0, ()]
            self._sources[source] = entry
            if len(self._sources) > self._max_sources:
                self._sources.popitem(last=False)
        layout = entry[0]
        if isinstance(layout, PageLayout) and len(layout.read_starts) <= max_samples:
            families: Mapping[str, MetricFamily] | None = layout.read(text)
            if families is not None:
                self.hits += 1
                entry[1] = 0
                return families
        elif layout is None and entry[1] == 0:
            # A source seen for the first time: its page may have a layout another source's pages have (the
            # replicas of one deployment), which is then taken as is instead of learnt again.
            for known_wanted, known in self._recent:
                if known_wanted is wanted and len(known.read_starts) <= max_samples and (families := known.read(text)):
                    self.hits += 1
                    entry[0] = known
                    entry[3] = getattr(families, "names", ())
                    return families
        self.misses += 1
        expected: tuple[str, ...] = entry[3]  # type: ignore[assignment]
        if expected:  # the names set aside on the last page: tried first (collector.exposition._partial)
            families = self._parse(text, wanted=wanted, max_samples=max_samples, expect_bad=expected)
        else:
            families = self._parse(text, wanted=wanted, max_samples=max_samples)
        entry[3] = getattr(families, "names", ())
        misses = entry[1] = int(entry[1]) + 1  # type: ignore[call-overload]
        if misses > MAX_MISSES:
            waited = entry[2] = int(entry[2]) + 1  # type: ignore[call-overload]
            if waited < RETRY_AFTER:
                return families
            entry[2] = 0
        self.learnt += 1
        layout = learn_layout(text, wanted, self._parse, max_samples, families)
        if layout is not None:
            if len(self._shared) > self._held + UNHELD_LAYOUTS:
                self._prune()
            if len(self._shared) >= self._max_sources:
                self._shared.clear()
            layout = self._shared.setdefault(layout.key, layout)
            # tried first on sources seen for the first time, most recent first (a layout is only valid for the
            # selection it was learnt with: ``wanted`` is kept and compared by identity)
            self._recent = [(wanted, layout), *(r for r in self._recent if r[1] is not layout)][:RECENT_LAYOUTS]
        entry[0] = layout
        return families

    def _prune(self) -> None:
        """Forget the layouts that neither a source nor the recent list holds. A source whose layout keeps changing
        (a comment carrying the time) learns one every RETRY_AFTER pages: each stayed here until ``max_sources`` of
        them were (GBs of layouts for large pages). One pass over the sources per UNHELD_LAYOUTS layouts learnt."""
        held = {id(entry[0]) for entry in self._sources.values()}
        held.update(id(layout) for _wanted, layout in self._recent)
        self._shared = {key: layout for key, layout in self._shared.items() if id(layout) in held}
        self._held = len(self._shared)

    def forget(self, source: Hashable) -> None:
        self._sources.pop(source, None)
