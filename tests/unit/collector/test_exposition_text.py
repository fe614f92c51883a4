"""The text-format parser against its oracle, prometheus_client.parser, on real pages and generated ones.

Every comparison is differential: the expected families come from the oracle in the same test, never
from hard-coded values.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from collector.exposition import MetricFamily, ParseError, parse

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"
PAGES = sorted(FIXTURES.glob("*.txt"))

Canonical = dict[str, tuple[str, str, list[tuple[str, dict[str, str], Any, Any]]]]


def _value(v: float) -> Any:
    """NaN compares equal to NaN; everything else by value (values and timestamps: both parsers take `NaN` as a
    timestamp, as prometheus_client does)."""
    return "NaN" if math.isnan(v) else v


def oracle(text: str) -> Canonical:
    """prometheus_client's families collected by name the way kvpilot's interface promises, untyped parts of a
    histogram or summary put together (the one difference on purpose: test_exposition_divergences.py)."""
    out: Canonical = {}
    for fam in text_string_to_metric_families(text):
        entry = out.setdefault(fam.name, (fam.type, fam.documentation, []))
        for s in fam.samples:
            ts = None if s.timestamp is None else _value(float(s.timestamp))
            entry[2].append((s.name, dict(s.labels), _value(float(s.value)), ts))
    return with_untyped_parts_whole(out)


def with_untyped_parts_whole(families: Canonical) -> Canonical:
    """The oracle's families with a page's untyped ``X_bucket`` (every sample with ``le``; alone or beside ``X_sum``
    or ``X_count``), ``X`` (every sample with ``quantile``), ``X_sum`` and ``X_count`` made one histogram or summary
    ``X``, as collector/exposition/_untyped.py documents; written from that description, not from its code."""
    merged: Canonical = {}
    for base in {n[: -len(p)] for n in families for p in ("_bucket", "_sum", "_count") if n.endswith(p)}:
        head, bucket, total, count = (families.get(base + p) for p in ("", "_bucket", "_sum", "_count"))
        present = [f for f in (head, bucket, total, count) if f is not None]
        if any(f[0] != "unknown" for f in present) or (total is None and count is None and bucket is None):
            continue  # a declared type, or neither X_sum, X_count nor X_bucket
        rest = [s for f in (total, count) if f is not None for s in f[2]]
        if any("le" in s[1] or "quantile" in s[1] for s in rest):
            continue
        help_text = "" if head is None else head[1]
        if bucket is not None:
            if (head is None or not head[2]) and bucket[2] and all("le" in s[1] for s in bucket[2]):
                merged[base] = ("histogram", help_text, bucket[2] + rest)
        elif total is None and count is None:
            continue  # X alone: no summary
        elif head is not None and head[2]:
            if all("quantile" in s[1] for s in head[2]):
                merged[base] = ("summary", help_text, head[2] + rest)
        elif total is not None and count is not None:
            merged[base] = ("summary", help_text, rest)
    parts = {base + p for base in merged for p in ("_bucket", "_sum", "_count")}
    return {**{n: f for n, f in families.items() if n not in parts and n not in merged}, **merged}


def canonical(families: dict[str, MetricFamily]) -> Canonical:
    out: Canonical = {}
    for key, fam in families.items():
        assert key == fam.name
        samples = [
            (s.name, s.labels, _value(s.value), None if s.timestamp is None else _value(s.timestamp))
            for s in fam.samples
        ]
        out[key] = (fam.type, fam.help, samples)
    return out


def duplicated(families: Canonical) -> bool:
    """Whether a family holds one series (name, labels, timestamp) twice: the oracle keeps both, we refuse."""
    for _typ, _help, samples in families.values():
        keys = [(name, tuple(sorted(labels.items())), ts) for name, labels, _v, ts in samples]
        if len(set(keys)) != len(keys):
            return True
    return False


def assert_agrees(text: str, wanted: frozenset[str] | None = None) -> None:
    expected = oracle(text)
    if wanted is not None:
        expected = {k: v for k, v in expected.items() if k in wanted}
    if duplicated(expected):
        with pytest.raises(ParseError, match="duplicate series"):
            parse(text, wanted=wanted)
        return
    assert canonical(parse(text, wanted=wanted)) == expected


# --- real pages -------------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_fixture_agrees_with_prometheus_client(page: Path) -> None:
    assert_agrees(page.read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_fixture_agrees_when_read_selectively(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    names = sorted(oracle(text))
    # every other family, so skipped and read families interleave through the page
    assert_agrees(text, frozenset(names[::2]))
    assert_agrees(text, frozenset(names[1::2]))


def test_fixture_bytes_parse_like_text() -> None:
    page = PAGES[0].read_bytes()
    assert canonical(parse(page)) == canonical(parse(page.decode("utf-8")))


# --- accepted edge cases (each agrees with the oracle) --------------------------------------------

EDGE_CASES = [
    # a counter declared without _total: family keeps the name, samples gain _total (oracle's munging)
    "# TYPE foo counter\nfoo 1\n",
    # a counter declared with _total: the family loses the suffix
    '# HELP foo_total Requests.\n# TYPE foo_total counter\nfoo_total{a="b"} 3\n',
    # a sample whose name the TYPE does not admit becomes its own untyped family
    "# TYPE foo counter\nfoo_total 1\n",
    # untyped samples without metadata: each line its own family, merged by name
    'a 1\nb 2\na{x="y"} 3\n',
    # histogram: buckets, sum and count stay in the base family; a bare sample does not
    '# TYPE h histogram\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 3\nh_count 2\nh 9\n',
    # summary: quantiles, sum and count stay in the base family
    '# TYPE s summary\ns{quantile="0.5"} 1\ns_sum 2\ns_count 3\n',
    # escapes in label values: backslash, quote, newline; an unknown escape stays as written
    'm{a="x\\\\y",b="q\\"q",c="l\\nl",d="t\\tt"} 1\n',
    # HELP escapes only backslash and newline
    '# HELP m Line\\none \\\\ and \\"quoted\\".\nm 1\n',
    # special values and timestamps in milliseconds
    "m NaN\nm +Inf 1700000000000\nm -Inf -5\nm 1e3 1.5\n",
    # blank lines, comments, indentation, tabs and CRLF line ends
    '\n# just a comment\n  m{a="b"}\t1\r\n\n#\n# HELP\nm 2\n',
    # spaces around label pairs, a trailing comma, empty braces and no blank before the value
    'm{ a = "b" , c="d", } 1\nm{} 2\nm{a="b"}3\n',
    # HELP after TYPE for the same name keeps the type; a second TYPE for the same name replaces it
    "# TYPE g gauge\n# HELP g Doc.\ng 1\n# TYPE g counter\ng 2\n",
    # an invalid TYPE on a family that gets renamed is still fine once replaced
    "# TYPE x_total bogus\n# TYPE x_total gauge\nx_total 1\n",
    # label names may contain colons (the oracle validates them as metric names)
    'm{a:b="c"} 1\n',
    # a quoted name in HELP/TYPE names the family like an unquoted one
    '# HELP "q" Quoted.\n# TYPE "q" gauge\nq 1\n',
    # the name inside the braces, quoted (Prometheus 3's UTF-8 names): legacy names read as unquoted ones, others
    # (dots) as the oracle reads them; no labels, blanks, a trailing comma, escapes in the name, a timestamp
    '# TYPE "vllm:x" gauge\n{"vllm:x",engine="0",model_name="m"} 4\n{"vllm:x", engine="1" ,model_name="m",} 5 1000\n',
    '# HELP "http.server.duration" Doc.\n# TYPE "http.server.duration" histogram\n'
    '{"http.server.duration_bucket",le="1"} 1\n{"http.server.duration_bucket",le="+Inf"} 2\n'
    '{"http.server.duration_count"} 2\n{ "http.server.duration_sum" } 3\n',
    '{"q\\"x\\\\y",a="b"} 1\n{"my.metric"} 2\n',
    # values the oracle reads as int or float
    'm{v="1"} 00012\nm{v="2"} -0\nm{v="3"} .5\nm{v="4"} 1.\nm{v="5"} Infinity\nm{v="6"} nan\n',
    # one series at different timestamps is not a duplicate
    "m 1 1000\nm 2 2000\n",
    # buckets and quantiles built from their series' labels plus the last le/quantile label (_text._labels):
    # escaped values before it, a comma and le="..." inside a value, a blank before le or a trailing comma
    # (read whole), and the _count/_sum body seen before the buckets
    '# TYPE h histogram\nh_bucket{m="a\\"b",le="1"} 1\nh_bucket{m="a\\"b",le="+Inf"} 2\nh_sum{m="a\\"b"} 3\n',
    'm{a="x,le=\\"1\\"",le="2"} 1\nm{a="x,le=\\"1\\""} 2\nm{a="x",b="y,le=\\"3\\"",le="4"} 5\n',
    '# TYPE h histogram\nh_count{a="1"} 2\nh_bucket{a="1", le="1"} 1\nh_bucket{a="1",le="2",} 2\n'
    'h_bucket{a="1",le="3"} 2\n',
    '# TYPE s summary\ns{a="1",b="2",quantile="0.5"} 1\ns{a="1",b="2",quantile="0.9"} 2\ns_count{a="1",b="2"} 3\n',
    '# TYPE h histogram\nh_bucket{le="1",a="1"} 1\nh_bucket{a="1",le="2"} 2\nh_bucket{le="",a=""} 0\n',
    # the same inside a histogram's run of usual lines (_text._read_buckets, cut at `",le="`): le="..." and a "}" inside
    # a value before the last le, an escaped quote, a blank before le, a trailing comma, le first, an empty bound
    '# TYPE h histogram\nh_bucket{a="x,le=\\"1\\"",le="2"} 1\nh_bucket{a="}",le="3"} 2\nh_bucket{m="a\\"b",le="4"} 3\n'
    'h_bucket{a="1", le="5"} 4\nh_bucket{a="1",le="6",} 5\nh_bucket{le="7",a="1"} 6\nh_bucket{a="1",le=""} 7\n'
    'h_count{a="1"} 7\nh_sum{a="1"} 8\nh_bucket{le="+Inf"} 9\n',
    # ... and a bound holding `,le=` or an escape, "} " and `",le="` inside values, le alone, a series seen as a whole
    # body first, and buckets of two series sharing bounds
    '# TYPE h histogram\nh_bucket{a="1",le="x,le="} 1\nh_bucket{a="1",le="y\\\\z"} 2\nh_bucket{a="} 1",le="3"} 3\n'
    'h_bucket{a="q\\",le=\\"",le="4"} 4\nh_bucket{le="5"} 5\nh_count{a="2"} 1\nh_bucket{a="2",le="1"} 1\n'
    'h_bucket{a="2",le="3"} 1\nh_bucket{a="1",le="+Inf"} 6\n',
]


@pytest.mark.parametrize("text", EDGE_CASES)
def test_edge_cases_agree(text: str) -> None:
    assert_agrees(text)


def _run(a: str, b: str) -> str:
    """Two families, for runs of unwanted ones."""
    return f'# HELP {a} A.\n# TYPE {a} gauge\n{a}{{x="1"}} 1\n# TYPE {b} counter\n{b}_total 2\n'


_RUN = _run("a", "b")
SELECTIVE_CASES = [
    # (page, wanted) -- runs of unwanted families passed over whole (_text._pass_families) must leave the
    # last family current: a line after the run may still be its own
    # a leading blank ends the run inside histogram a; its a_sum is a's, not a family "a_sum"
    (
        '# HELP a A.\n# TYPE a histogram\na_bucket{le="+Inf"} 1\na_count 1\n a_sum 1\n# TYPE k gauge\nk 1\n',
        {"a_sum", "k"},
    ),
    # HELP after TYPE for the same name continues the family (the run stops before it)
    ('# TYPE a histogram\na_count 1\n# HELP a A.\na_bucket{le="+Inf"} 1\na 2\n', {"a_bucket"}),
    # a TYPE after samples for the same name changes what the family admits
    ("# HELP a A.\na 1\n# TYPE a summary\na_count 1\na_sum 2\n# TYPE k gauge\nk 1\n", {"a_count", "k"}),
    # a HELP-only family, then a sample it does not admit (a family of its own, wanted)
    ('# HELP a A.\na{x="1"} 1\na_count 2\n', {"a_count"}),
    # a blank line and a comment between families; CRLF ends a run
    (_RUN + "\n# note\n" + _run("c", "d") + "# TYPE k gauge\r\nk 1\r\n", {"k"}),
    # wanted counters named with and without _total, right after runs
    (_RUN + "# TYPE k_total counter\nk_total 3\n" + _run("c", "d") + "# TYPE m counter\nm 4\n", {"k", "m"}),
    # a wanted family between unwanted ones, its samples in the usual shape, with a timestamp, and odd
    (
        _RUN + '# TYPE k gauge\nk{x="1"} 1\nk{x="2"} 2\nk{x="3"} 3 1000\nk{x="4"}\t4\nk{x="5"} 5\n' + _run("c", "d"),
        {"k"},
    ),
    # buckets with the bound first (prometheus_client sorts label names): an empty rest, blanks, escapes, a
    # comma inside the bound, and a bound with a quote or backslash (read whole)
    (
        '# TYPE h histogram\nh_bucket{le="1",} 1\nh_bucket{le="2", a="x"} 1\nh_bucket{le="3",a="x\\"y"} 1\n'
        'h_bucket{le="4,5",a="x"} 1\nh_bucket{le="a\\\\",b="1"} 1\nh_count 2\n',
        {"h"},
    ),
    # a CR (or another blank str.strip() removes) ends a run of read lines; the line is read as the oracle reads it
    ('# TYPE g gauge\ng{a="1"} 1\ng{a="2"} 2\r\ng{a="3"} 3\x0c\ng{a="4"} 4\n', {"g"}),
    # a summary read as a run; a family named like another's sum
    ('# TYPE s summary\ns{quantile="0.5"} 1\ns_sum 2\ns_count 3\n# TYPE s_sum gauge\ns_sum 4\n', {"s", "s_sum"}),
    # HELP lines of wanted families around the usual shape (_text._HEAD_RE takes HELP and TYPE in one): two blanks
    # or a tab before the help, blanks and other whitespace after it, a help starting with whitespace str.strip()
    # keeps, no help, a TYPE with a blank after the type or of another name, HELP of the current family again
    (
        "# HELP a  Two.\n# TYPE a gauge\na 1\n# HELP b\tTab.\n# TYPE b counter\nb 2\n# HELP c Trail. \n# TYPE c gauge\n"
        "c 3\n# HELP d Nbsp.\xa0\n# TYPE d gauge \nd 4\n# HELP e \x1cSep.\ne 5\n# HELP f\n# TYPE g gauge\ng 6\n"
        "# HELP h H.\n# TYPE h summary\nh_sum 7\n# HELP h Again.\nh_count 8\n# HELP i I.\r\n# TYPE i gauge\ni 9\n",
        {"a", "b", "c", "d", "e", "f", "g", "h", "i"},
    ),
]


@pytest.mark.parametrize(("text", "wanted"), SELECTIVE_CASES)
def test_selective_edge_cases_agree(text: str, wanted: set[str]) -> None:
    assert_agrees(text)
    assert_agrees(text, frozenset(wanted))
    # a predicate goes family by family instead of through one pattern knowing the names
    assert canonical(parse(text, wanted=lambda name: name in wanted)) == canonical(parse(text, wanted=wanted))


def _hist(*lines: str) -> str:
    return "# HELP h H.\n# TYPE h histogram\n" + "".join(line + "\n" for line in lines) + "# TYPE g gauge\ng 1\n"


_S = 'a="x",b="y"'
# Histogram runs read by _text._read_buckets, which cuts a bucket into its series and bound by string operations and
# takes the series' labels from the line before when its text is the same: each case is a way that could mis-read.
BUCKET_CASES = [
    # le last, bounds out of order, two series interleaved (the series changes on every line)
    _hist(
        'h_bucket{a="1",le="+Inf"} 3',
        'h_bucket{a="2",le="0.5"} 1',
        'h_bucket{a="1",le="0.5"} 2',
        'h_bucket{a="2",le="+Inf"} 4',
        'h_count{a="1"} 3',
        'h_sum{a="1"} 1',
        'h_count{a="2"} 4',
        'h_sum{a="2"} 2',
    ),
    # le first (prometheus_client's order), the same
    _hist(
        'h_bucket{le="+Inf",a="1"} 3',
        'h_bucket{le="0.5",a="2"} 1',
        'h_bucket{le="0.5",a="1"} 2',
        'h_bucket{le="+Inf",a="2"} 4',
        'h_count{a="1"} 3',
        'h_count{a="2"} 4',
    ),
    # both shapes in one run, and one series' text a prefix of the next one's
    _hist(
        'h_bucket{a="1",le="1"} 1', 'h_bucket{le="1",a="10"} 2', 'h_bucket{a="10",le="2"} 3', 'h_bucket{le="2",a="1"} 4'
    ),
    # escapes in the series (a quote, a backslash, a newline), le last and first; a bound with an escape (read whole)
    _hist(
        r'h_bucket{a="x\"y",le="1"} 1',
        r'h_bucket{a="x\"y",le="2"} 2',
        r'h_bucket{le="1",a="p\\"} 3',
        r'h_bucket{le="2",a="p\\"} 4',
        r'h_bucket{a="n\nl",le="1"} 5',
        r'h_bucket{a="q",le="1\\"} 6',
    ),
    # `",le="` and `"} ` inside a series' values, le last and first
    _hist(
        r'h_bucket{a="x\",le=\"0",le="1"} 1',
        r'h_bucket{a="x\",le=\"0",le="2"} 2',
        r'h_bucket{le="1",a="v\"} 9"} 3',
        r'h_bucket{le="2",a="v\"} 9"} 4',
        'h_bucket{a="} ",le="1"} 5',
    ),
    # values and bounds: NaN, infinities, exponents, a negative zero, a bound written oddly
    _hist(
        f'h_bucket{{{_S},le="-Inf"}} NaN',
        f'h_bucket{{{_S},le="1e-3"}} +Inf',
        f'h_bucket{{{_S},le="NaN"}} -Inf',
        f'h_bucket{{{_S},le="+Inf"}} 1.5e3',
        f"h_count{{{_S}}} -0.0",
        f'h_bucket{{le="",{_S}}} 7',
    ),
    # le first with a blank or a trailing comma after it, le alone, and le first of a _count line
    _hist(
        'h_bucket{le="1", a="x"} 1',
        'h_bucket{le="2",a="x",} 2',
        'h_bucket{le="3"} 3',
        'h_bucket{le="4",} 4',
        'h_count{le="5",a="x"} 5',
    ),
    # `{le="` inside the first label's value: le is not the first label
    _hist('h_bucket{a="x{le=",b="2"} 1', 'h_bucket{a="x{le=",b="2",le="+Inf"} 2'),
    # the same series and bound twice: refused as a duplicate series, le last and le first
    _hist(f'h_bucket{{{_S},le="1"}} 1', f'h_bucket{{{_S},le="1"}} 2'),
    _hist(f'h_bucket{{le="1",{_S}}} 1', f'h_bucket{{le="1",{_S}}} 2'),
    # the family split across the page: it comes back after another family, its series read again
    _hist(f'h_bucket{{{_S},le="1"}} 1', f"h_count{{{_S}}} 1")
    + f'# TYPE h histogram\nh_bucket{{{_S},le="2"}} 2\nh_bucket{{le="3",{_S}}} 3\n',
    # a line with a timestamp ends the run; the rest is read line by line
    _hist(f'h_bucket{{{_S},le="1"}} 1', f'h_bucket{{{_S},le="2"}} 2 1000', f'h_bucket{{{_S},le="3"}} 3'),
    # le between labels (prometheus_client sorts label names): two series interleaved, one differing only before le,
    # one only after it; the same series text with le at another place; the _count and _sum lines
    _hist(
        'h_bucket{a="1",le="0.5",z="1"} 1',
        'h_bucket{a="2",le="0.5",z="1"} 2',
        'h_bucket{a="1",le="+Inf",z="1"} 3',
        'h_bucket{a="1",le="0.5",z="2"} 4',
        'h_bucket{a="1",le="+Inf",z="2"} 5',
        'h_bucket{a="2",le="+Inf",z="1"} 6',
        'h_bucket{a="3",b="4",le="1",c="5"} 7',
        'h_bucket{a="3",le="1",b="4",c="5"} 8',
        'h_count{a="1",z="1"} 3',
        'h_sum{a="1",z="1"} 1',
    ),
    # le between labels: escapes, `"} ` and `",le="` after the bound; an escape before le (read whole); a blank or a
    # trailing comma after the bound's comma, and nothing after it
    _hist(
        r'h_bucket{a="1",le="1",b="x\"y"} 1',
        r'h_bucket{a="1",le="2",b="x\"y"} 2',
        r'h_bucket{a="p\\",le="1",b="2"} 3',
        'h_bucket{a="2",le="1",b="} 9"} 4',
        r'h_bucket{a="3",le="1",b="\",le=\"7"} 5',
        'h_bucket{a="4",le="1", b="2"} 6',
        'h_bucket{a="5",le="1",b="2",} 7',
        'h_bucket{a="6",le="1",} 8',
    ),
    # `",le="` opening a value, a quote-free bound and `",` after it: not a label (the text before holds no closing
    # quote)
    _hist('h_bucket{x=",le=",y=",z"} 5', 'h_bucket{x=",le=",y=",z",le="1"} 6'),
    # le alone (a histogram without labels, as prometheus_client writes TGI's): odd bounds and values, a `{` or `} ` in
    # the bound, le alone beside a series of the same family, and le alone twice (refused as a duplicate)
    _hist(
        'h_bucket{le="0.5"} 1',
        'h_bucket{le="+Inf"} NaN',
        'h_bucket{le=""} -Inf',
        'h_bucket{le="a{b"} 1e3',
        'h_bucket{le="} 1"} 2',
        'h_bucket{le="1",a="x"} 3',
        'h_bucket{a="x",le="2"} 4',
        'h_bucket{le="2"} 5',
        'h_count{le="3"} 6',
    ),
    _hist('h_bucket{le="1"} 1', 'h_bucket{le="1"} 2'),
    _hist('h_bucket{le="1"} 1', 'h_bucket{le="1",} 2'),
    # the same series and bound with le between labels and le last, and twice between: refused as duplicates
    _hist('h_bucket{a="x",le="1",b="y"} 1', 'h_bucket{a="x",b="y",le="1"} 2'),
    _hist('h_bucket{a="x",le="1",b="y"} 1', 'h_bucket{a="x",le="1",b="y"} 2'),
]


@pytest.mark.parametrize("text", BUCKET_CASES)
def test_histogram_runs_agree(text: str) -> None:
    assert_agrees(text)
    assert_agrees(text, frozenset({"h"}))
    if not duplicated(oracle(text)):  # labels in the page's order, as the oracle keeps them
        ours = [list(s.labels) for f in parse(text, wanted={"h"}).values() for s in f.samples]
        theirs = [list(s.labels) for f in text_string_to_metric_families(text) if f.name == "h" for s in f.samples]
        assert ours == theirs


@pytest.mark.parametrize(
    "line",
    [
        'h_bucket{a="1",le="2"} x",b="3"} 7',  # the bound's `"} ` is not the body's end
        'h_bucket{le="2",a="1"} x",b="3"} 7',
        'h_bucket{le="1",a="1",le="2"} 1',  # le twice, first and last
        'h_bucket{le="1", le="2"} 1',  # le twice, a blank between
        'h_bucket{le="1",a="1", le="2"} 1',
        'h_bucket{le="1",a="1"x} 1',  # a bad series after a first le
        'h_bucket{a="1",le="1"} 1 # {trace_id="t"} 0.5',  # an OpenMetrics exemplar
        'h_bucket{a="1",le="1",b="2",le="3",c="4"} 1',  # le twice, both between labels
        'h_bucket{le="1",a="1",le="2",b="2"} 1',  # le twice, first and between
        'h_bucket{a="1",le="1",a="2"} 1',  # a name on both sides of le
        'h_bucket{a="1",le="1",b="2"x} 1',  # a bad label after le
        'h_bucket{le="1"} 2"} 3',  # le alone: the bound's `"} ` is not the body's end
        'h_bucket{le="1\\"} 2',  # le alone, a bound ending in an escape
        'h_bucket{a="1"x,le="1",b="2"} 1',  # a bad label before le
    ],
)
def test_bad_bucket_lines_in_a_run_are_refused_at_their_line(line: str) -> None:
    text = _hist('h_bucket{a="1",le="0"} 0', line, 'h_count{a="1"} 1')
    with pytest.raises(ParseError) as caught:
        parse(text)
    assert caught.value.line_no == 4
    with pytest.raises(ParseError):
        parse(text, wanted={"h"})


@pytest.fixture
def validated(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The label bodies the parser validates from here on, in order (the pure parser only: a compiled parser's
    methods cannot be wrapped)."""
    from collector.exposition import _text

    if not _text.__file__.endswith(".py"):
        pytest.skip("a compiled parser's methods cannot be wrapped")
    bodies: list[str] = []
    validate = _text._TextParser._validate

    def counting(self: Any, body: str, line: str, line_no: int) -> dict[str, str]:
        bodies.append(body)
        return validate(self, body, line, line_no)

    monkeypatch.setattr(_text._TextParser, "_validate", counting)
    return bodies


def test_buckets_with_le_between_labels_validate_each_series_once(validated: list[str]) -> None:
    # prometheus_client sorts label names, so a vLLM V1 bucket reads {engine,le,model_name}: every bucket's body is new
    # on the page, yet its series' labels are validated once, as when le comes first or last
    buckets = [f'h_bucket{{engine="{e}",le="{b}",model_name="m"}} 1' for e in "01" for b in ("0.1", "1", "+Inf")]
    families = parse(_hist(*buckets, 'h_count{engine="0",model_name="m"} 1'), wanted={"h"})
    assert [s.labels for s in families["h"].samples][:2] == [
        {"engine": "0", "le": "0.1", "model_name": "m"},
        {"engine": "0", "le": "1", "model_name": "m"},
    ]
    assert sorted(validated) == ['engine="0",model_name="m"', 'engine="1",model_name="m"']


def test_buckets_with_le_alone_validate_no_body(validated: list[str]) -> None:
    # TGI's histograms (and prometheus_client's without labels) write `{le="..."}` alone: each bucket's body is new on
    # the page and holds one label, which is cut from the line without validating a body per bucket
    bounds = ("0.1", "1", "+Inf")
    text = _hist(*(f'h_bucket{{le="{b}"}} {n}' for n, b in enumerate(bounds)), 'h_count{a="1"} 2')
    families = parse(text, wanted={"h"})
    assert [(s.name, s.labels, s.value) for s in families["h"].samples] == [
        ("h_bucket", {"le": "0.1"}, 0.0),
        ("h_bucket", {"le": "1"}, 1.0),
        ("h_bucket", {"le": "+Inf"}, 2.0),
        ("h_count", {"a": "1"}, 2.0),
    ]
    assert validated == ['a="1"']
    assert_agrees(text)


# --- generated valid pages ------------------------------------------------------------------------

_NAME_START = "abcxyz_:"
_NAME_CHARS = _NAME_START + "019"
names = st.builds(lambda a, b: a + b, st.sampled_from(_NAME_START), st.text(_NAME_CHARS, max_size=6))
label_names = st.builds(lambda a, b: a + b, st.sampled_from("abl_"), st.text("abel_:09", max_size=5)).filter(
    lambda n: not n.startswith("__")
)
label_values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**15), 10**15).map(str),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e-3", "0", "-0.0"]),
)
timestamps = st.one_of(st.none(), st.integers(-(10**13), 10**13).map(str))
blank = st.sampled_from([" ", "\t", "  ", " \t"])


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


@st.composite
def sample_lines(draw: st.DrawFn, name: str, extra: tuple[str, str] | None = None, quoted: bool = False) -> str:
    labels = draw(st.dictionaries(label_names, label_values, max_size=3))
    if extra is not None:  # le or quantile anywhere: first, between (as prometheus_client sorts names) or last
        labels.pop(extra[0], None)
        items = list(labels.items())
        items.insert(draw(st.integers(0, len(items))), extra)
        labels = dict(items)
    body = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items())
    if quoted:  # the name inside the braces, as a page served with UTF-8 names writes it: `{"name",labels}`
        head = "{" + f'"{_escape_label(name)}"' + ("," + body if body else "") + "}"
    else:
        head = f"{name}{{{body}}}" if labels or draw(st.booleans()) else name
    line = head + draw(blank) + draw(numbers)
    stamp = draw(timestamps)
    if stamp is not None:
        line += draw(blank) + stamp
    return line


help_texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12).map(
    lambda t: t.replace("\\", "\\\\").replace("\n", "\\n").strip()
)


@st.composite
def families(draw: st.DrawFn) -> list[str]:
    name = draw(names)
    # one family in five is written with its names quoted, as Prometheus 3 negotiates UTF-8 names: then the name may
    # hold what only quoting allows ("."), and each sample line has it inside the braces or, legacy names, may not
    quoted = draw(st.integers(0, 4)) == 0
    if quoted and draw(st.booleans()):
        name += "." + draw(st.text(_NAME_CHARS, max_size=3))
    legacy = "." not in name

    def line(sample: str, extra: tuple[str, str] | None = None) -> str:
        return draw(sample_lines(sample, extra, quoted=quoted and (not legacy or draw(st.booleans()))))

    def meta(declared: str) -> str:
        return f'"{declared}"' if quoted and (not legacy or draw(st.booleans())) else declared

    kind = draw(st.sampled_from(["counter", "counter_total", "gauge", "histogram", "summary", "untyped", "bare"]))
    lines: list[str] = []
    if kind == "bare":  # samples without any metadata
        return [line(name) for _ in range(draw(st.integers(1, 3)))]
    declared = name + "_total" if kind == "counter_total" else name
    typ = {"counter_total": "counter"}.get(kind, kind)
    if draw(st.booleans()):
        lines.append(f"# HELP {meta(declared)} {draw(help_texts)}".rstrip())
    lines.append(f"# TYPE {meta(declared)} {typ}")
    count = draw(st.integers(0, 3))
    if kind == "histogram":
        for le in ["0.1", "1", "+Inf"][:count] or ["+Inf"]:
            lines.append(line(name + "_bucket", ("le", le)))
        lines += [line(name + "_sum"), line(name + "_count")]
    elif kind == "summary":
        for q in ["0.5", "0.9", "0.99"][:count]:
            lines.append(line(name, ("quantile", q)))
        lines += [line(name + "_sum"), line(name + "_count")]
    else:
        lines += [line(declared) for _ in range(count)]
    return lines


@st.composite
def pages(draw: st.DrawFn) -> str:
    lines: list[str] = []
    for fam in draw(st.lists(families(), max_size=6)):
        for line in fam:
            if draw(st.integers(0, 9)) == 0:
                lines.append(draw(st.sampled_from(["", "# a comment", "#", "   "])))
            lines.append(draw(st.sampled_from(["", " ", "\t"])) + line if draw(st.integers(0, 9)) == 0 else line)
    return "\n".join(lines) + draw(st.sampled_from(["", "\n"]))


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(pages())
def test_generated_pages_agree(text: str) -> None:
    assert_agrees(text)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(pages(), st.data())
def test_selective_read_is_the_full_read_filtered(text: str, data: st.DataObject) -> None:
    expected = oracle(text)
    wanted = frozenset(data.draw(st.sets(st.sampled_from(sorted(expected) or ["none"]))))
    if duplicated({k: v for k, v in expected.items() if k in wanted}):
        with pytest.raises(ParseError, match="duplicate series"):
            parse(text, wanted=wanted)
        return
    if duplicated(expected):
        assert canonical(parse(text, wanted=wanted)) == {k: v for k, v in expected.items() if k in wanted}
        return
    full = parse(text)
    assert canonical(parse(text, wanted=wanted)) == {k: v for k, v in canonical(full).items() if k in wanted}
    assert canonical(parse(text, wanted=wanted.__contains__)) == canonical(parse(text, wanted=wanted))
    assert canonical(parse(text, wanted=lambda name: name in wanted)) == canonical(parse(text, wanted=wanted))


# --- arbitrary and mutated text: whatever we accept, the oracle accepts identically -------------------

_ALPHABET = 'ab_:{}=",# \t\n\\.01eE+-NaInfHELPTYPEcountergaugehistogramsummary\r\x0c\xa0'


@st.composite
def mutated_pages(draw: st.DrawFn) -> str:
    text = draw(pages())
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        piece = draw(st.text(_ALPHABET, min_size=1, max_size=3))
        if op == "insert":
            text = text[:at] + piece + text[at:]
        elif op == "delete":
            text = text[:at] + text[at + len(piece) :]
        else:
            text = text[:at] + piece + text[at + len(piece) :]
    return text


def assert_sound(text: str) -> None:
    """Ours either refuses with ParseError or returns exactly what the oracle returns."""
    try:
        ours = canonical(parse(text))
    except ParseError:
        return
    assert ours == oracle(text)
    assert not duplicated(ours)


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(mutated_pages())
def test_mutated_pages_are_refused_or_agree(text: str) -> None:
    assert_sound(text)


@settings(max_examples=400, deadline=None)
@given(st.text(_ALPHABET, max_size=80))
def test_arbitrary_text_is_refused_or_agrees(text: str) -> None:
    assert_sound(text)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(mutated_pages(), st.data())
def test_selective_read_of_mutated_pages_is_the_full_read_filtered(text: str, data: st.DataObject) -> None:
    # skipping families unread must not change what the families that are read contain
    try:
        full = canonical(parse(text))
    except ParseError:
        return
    wanted = frozenset(data.draw(st.sets(st.sampled_from(sorted(full) or ["none"]))))
    assert canonical(parse(text, wanted=wanted)) == {k: v for k, v in full.items() if k in wanted}


@pytest.mark.parametrize(
    "text",
    [
        'h_bucket{a="1",le="1",le="2"} 1\n',  # le twice
        'h_bucket{le="1",le="2"} 1\n',
        'h_bucket{a="1",a="2",le="2"} 1\n',  # the part before le repeats a name
        'h_bucket{a="1",le="1"} 1\nh_bucket{a="1",le="1",le="2"} 1\n',  # after the part before le was seen
    ],
)
def test_a_label_repeated_around_le_is_refused(text: str) -> None:
    with pytest.raises(ParseError, match="duplicate label name"):
        parse(text)
    # and inside a histogram's run of usual lines (_text._read_buckets), at its line
    with pytest.raises(ParseError, match="duplicate label name") as caught:
        parse('# TYPE h histogram\nh_bucket{z="0",le="0"} 0\n' + text)
    assert caught.value.line_no == 2 + text.count("\n")


@pytest.mark.parametrize("body", ['a="1,le="2"', 'a="1"x,le="2"', '__a="1",le="2"', 'a="1\\",le="2"'])
def test_a_bad_body_ending_in_le_is_refused(body: str) -> None:
    with pytest.raises(ParseError):
        parse(f"h_bucket{{{body}}} 1\n")
    with pytest.raises(ParseError) as caught:  # inside a histogram's run of usual lines, at its line
        parse(f'# TYPE h histogram\nh_bucket{{z="0",le="0"}} 0\nh_bucket{{{body}}} 1\nh_count 1\n')
    assert caught.value.line_no == 3


def test_samples_never_share_label_dicts() -> None:
    # label sets are cached while a page is parsed; each sample must still own its dict
    families = parse(
        'm{a="b"} 1\nm{a="b"} 2 1000\n# TYPE c counter\nc{a="b"} 3\n'
        '# TYPE h histogram\nh_bucket{a="b",le="1"} 1\nh_bucket{a="b",le="+Inf"} 1\nh_count{a="b"} 1\n'
    )
    dicts = [s.labels for f in families.values() for s in f.samples]
    assert len(dicts) == 6
    assert len({id(d) for d in dicts}) == 6
