"""Malformed pages: a ParseError naming the line, never another exception, a hang or unbounded work."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.exposition import DEFAULT_MAX_SAMPLES, ParseError, is_openmetrics, parse

GOOD = '# HELP up Whether the target is up.\n# TYPE up gauge\nup{job="a"} 1\n'

MALFORMED = [
    # (page, line named, words the message must contain)
    # a label value that never closes
    (GOOD + 'm{a="b} 1\n', 4, "label"),
    # a label without a value
    (GOOD + "m{a} 1\n", 4, "label"),
    # labels may not start with two underscores
    (GOOD + 'm{__x="y"} 1\n', 4, "label"),
    # the same label twice
    (GOOD + 'm{a="1",a="2"} 1\n', 4, "duplicate"),
    # a value that is not a number
    ("m one\n", 1, "value"),
    # digit separators are not part of the format
    ("m 1_000\n", 1, "value"),
    # a timestamp that is not a number
    ("m 1 soon\n", 1, "timestamp"),
    # a sample without a value
    ("\n\nm\n", 3, "missing value"),
    # a metric name may not start with a digit
    ("9m 1\n", 1, "metric name"),
    # a metric name may not hold a dash
    ("m-x 1\n", 1, "metric name"),
    # TYPE without a type
    ("# TYPE m\n", 1, "TYPE"),
    # TYPE naming an invalid metric name
    ("# TYPE 9m gauge\n", 1, "metric name"),
    # an unknown type is reported at the TYPE line once its family ends
    ("# TYPE m fancy\nm 1\n# TYPE n gauge\n", 1, "type"),
    # a counter called just "_total" has no family name
    ("# TYPE _total counter\n", 1, "empty"),
    # garbage after the timestamp
    ("m 1 2 3\n", 1, "unexpected"),
    # a quoted name inside the braces that is not followed by a comma or the closing brace
    (GOOD + '{"m" a="b"} 1\n', 4, "inside the braces"),
    # ... that is empty, or never closes
    (GOOD + '{"",a="b"} 1\n', 4, "empty metric name"),
    (GOOD + '{"m,a="b"} 1\n', 4, "inside the braces"),
    # ... whose labels are not labels
    (GOOD + '{"m",a} 1\n', 4, "label"),
]


@pytest.mark.parametrize(("page", "line_no", "words"), MALFORMED)
def test_malformed_pages_name_the_line(page: str, line_no: int, words: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse(page)
    assert caught.value.line_no == line_no
    assert f"line {line_no}:" in str(caught.value)
    assert words.lower() in str(caught.value).lower()


# Errors a selective read still finds in the families it passes over unread: what decides where families begin
# and end (read with wanted={"kept"}; the malformed family is not wanted, nor those around it)
_BEFORE = "# HELP a A.\n# TYPE a gauge\na 1\n"
_AFTER = "# TYPE kept gauge\nkept 1\n"
MALFORMED_WHERE_SKIPPED = [
    # an unknown type, in a run of unwanted families
    (_BEFORE + "# HELP m M.\n# TYPE m fancy\nm 1\n" + _AFTER, 5, "type"),
    # a counter called just "_total"
    (_BEFORE + "# TYPE _total counter\n_total 1\n" + _AFTER, 4, "empty"),
    # a sample line no family admits, with an invalid name
    (_BEFORE + "9a 1\n" + _AFTER, 4, "metric name"),
    # a TYPE naming an invalid metric name
    (_BEFORE + "# TYPE 9m gauge\n" + _AFTER, 4, "metric name"),
]


@pytest.mark.parametrize(("page", "line_no", "words"), MALFORMED_WHERE_SKIPPED)
def test_selective_reads_still_refuse_malformed_family_boundaries(page: str, line_no: int, words: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse(page, wanted={"kept"})
    assert caught.value.line_no == line_no
    assert words.lower() in str(caught.value).lower()
    with pytest.raises(ParseError) as full:
        parse(page)
    assert str(full.value) == str(caught.value)


# A wanted family's usual lines are read as a run (_text._read_block): an error inside it names its own line
MALFORMED_IN_A_RUN = [
    # a value float() refuses
    ('# TYPE h histogram\nh_bucket{le="1"} 1\nh_bucket{le="2"} 1x\nh_bucket{le="+Inf"} 2\n', 3, "value"),
    # digit separators
    ('# TYPE h histogram\nh_bucket{le="1"} 1\nh_bucket{le="2"} 1_0\nh_bucket{le="+Inf"} 2\n', 3, "value"),
    # the bound twice, after a bucket whose series' labels were read
    (
        '# TYPE h histogram\nh_bucket{a="1",le="1"} 1\nh_bucket{a="1",le="2",le="3"} 1\nh_count{a="1"} 2\n',
        3,
        "duplicate",
    ),
    # the bound first and again later
    (
        '# TYPE h histogram\nh_bucket{le="1",a="1"} 1\nh_bucket{le="2",a="1",le="3"} 1\nh_count{a="1"} 2\n',
        3,
        "duplicate",
    ),
    # an empty label term
    ('# TYPE g gauge\ng{a="1"} 1\ng{a="2",,b="1"} 1\ng{a="3"} 2\n', 3, "label"),
    # a duplicated series
    ('# TYPE g gauge\ng{a="1"} 1\ng{a="2"} 1\ng{a="1"} 2\n', 1, "duplicate series"),
    # a value that is only a blank str.strip() removes: the line loop's "missing value", not an invalid value
    ('# TYPE g gauge\ng{a="1"} 1\ng{a="2"} \x0c\ng{a="3"} 2\n', 3, "missing value"),
]


@pytest.mark.parametrize(("page", "line_no", "words"), MALFORMED_IN_A_RUN)
def test_errors_inside_a_run_of_read_lines_name_their_line(page: str, line_no: int, words: str) -> None:
    for wanted in (None, {"h", "g"}):
        with pytest.raises(ParseError) as caught:
            parse(page, wanted=wanted)
        assert caught.value.line_no == line_no
        assert words.lower() in str(caught.value).lower()


# A selective read counts a run of lines it passes over only when an error needs the true line number (_text.run):
# errors after such runs, found at a sample line, at a family's close and at its TYPE line (read with wanted={"kept"})


def _runs(a: str = "a", b: str = "b", c: str = "c") -> str:
    """18 lines of unwanted families, passed over in runs."""
    return (
        f"# HELP {a} A.\n# TYPE {a} gauge\n{a} 1\n# HELP {b} B.\n# TYPE {b} histogram\n"
        + "".join(f'{b}_bucket{{le="{i}"}} {i}\n' for i in range(5))
        + f"{b}_count 5\n{b}_sum 1\n"
        # an unwanted family's samples after a blank line: passed over from its first sample, not from its HELP
        + f"# HELP {c} C.\n# TYPE {c} gauge\n\n"
        + "".join(f'{c}{{x="{i}"}} {i}\n' for i in range(3))
    )


_RUNS = _runs()
AFTER_PASSED_RUNS = [
    # a label set that never closes, on line 21
    (_RUNS + '# TYPE kept gauge\nkept{x="1"} 1\nkept{x="1} 2\n', 21),
    # a duplicated series, named at the family's TYPE line (19), read as a run of usual lines
    (_RUNS + '# TYPE kept gauge\nkept{x="1"} 1\nkept{x="1"} 2\n', 19),
    # an unknown type, named at its TYPE line once the family ends, after two more runs passed over
    (_RUNS + "# TYPE kept fancy\nkept 1\n" + _runs("d", "e", "f"), 19),
    # an invalid value, the last line, after runs passed over before and after another wanted family
    (_RUNS + "# TYPE kept gauge\nkept 1\n" + _runs("d", "e", "f") + 'kept{y="2"} 2\nkept x\n', 40),
]


@pytest.mark.parametrize(("page", "line_no"), AFTER_PASSED_RUNS)
def test_errors_after_lines_passed_over_name_their_true_line(page: str, line_no: int) -> None:
    with pytest.raises(ParseError) as caught:
        parse(page, wanted={"kept"})
    assert caught.value.line_no == line_no
    assert str(caught.value).startswith(f"line {line_no}: ")
    with pytest.raises(ParseError) as full:
        parse(page)  # reads every line, one at a time: its numbers are counted line by line
    assert str(full.value) == str(caught.value)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 4), st.booleans(), st.booleans()), max_size=6),
    st.integers(1, 3),  # the first right line is the one the wrong line "kept{x="0"} 1" repeats
    st.sampled_from(['kept{x="0"} 1', 'kept{x="0} 1', "kept 1x", 'kept{x="1",,} 1']),
)
def test_selective_errors_name_the_line_a_full_read_names(
    families: list[tuple[int, bool, bool]], good: int, bad: str
) -> None:
    # unwanted families (some samples, with or without HELP, a blank line before the samples or not), then a
    # wanted family with a wrong line after ``good`` right ones: both reads name the same line
    page = ""
    for i, (samples, with_help, blank) in enumerate(families):
        page += (f"# HELP u{i} U.\n" if with_help else "") + f"# TYPE u{i} gauge\n" + ("\n" if blank else "")
        page += "".join(f'u{i}{{x="{j}"}} {j}\n' for j in range(samples))
    page += "# TYPE kept gauge\n" + "".join(f'kept{{x="{j}"}} {j}\n' for j in range(good)) + bad + "\n"
    with pytest.raises(ParseError) as full:
        parse(page)
    with pytest.raises(ParseError) as caught:
        parse(page, wanted={"kept"})
    assert str(caught.value) == str(full.value)
    assert caught.value.line_no == full.value.line_no


def test_invalid_utf8_names_its_line() -> None:
    page = GOOD.encode() + b'm{a="\xff"} 1\n'
    with pytest.raises(ParseError) as caught:
        parse(page)
    assert caught.value.line_no == 4
    assert "UTF-8" in str(caught.value)


def test_max_samples_refuses_a_page_with_more() -> None:
    page = "".join(f'm{{i="{i}"}} {i}\n' for i in range(11))
    assert len(parse(page, max_samples=11)["m"].samples) == 11
    with pytest.raises(ParseError) as caught:
        parse(page, max_samples=10)
    assert caught.value.line_no == 11
    assert DEFAULT_MAX_SAMPLES >= 1_000_000


def test_max_samples_counts_only_samples_read() -> None:
    # a selective read does not pay for families it skips
    page = "".join(f"skipped {i}\n" for i in range(50)) + "kept 1\n"
    assert len(parse(page, wanted={"kept"}, max_samples=1)["kept"].samples) == 1


HOSTILE = [
    # a long run of backslashes in a label value (quadratic in the oracle's quote scanner)
    'm{a="' + "\\\\" * 200_000 + '"} 1\n',
    # a long run of quotes in a comment, tokenised the oracle's quote-aware way
    "# HELP m " + '"' * 200_000 + "\n",
    # a quoted metric name made of escaped quotes (the exact, quote-aware comment tokeniser)
    '# HELP "' + '\\"' * 100_000 + '" doc\n',
    # backslash runs before quotes in a comment: escapes are counted once per run, not once per quote
    "# HELP " + "\\" * 100_000 + '" x "' * 1_000 + "\n",
    # a comment of separators
    "#" + " \t" * 200_000 + "x\n",
    # a long line of opening braces
    "m" + "{" * 200_000 + "\n",
    # many labels on one line
    "m{" + ",".join(f'l{i}="v"' for i in range(20_000)) + "} 1\n",
    # a huge number of tiny lines
    "m 1\n" * 200_000,
]


@pytest.mark.parametrize("page", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_pages_finish(page: str) -> None:
    # pytest-timeout bounds this; a quadratic path would not finish
    for openmetrics in (False, True):
        with contextlib.suppress(ParseError):
            parse(page, openmetrics=openmetrics)
        with contextlib.suppress(ParseError):
            parse(page, openmetrics=openmetrics, wanted={"other"})


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.text(max_size=300), st.booleans())
def test_arbitrary_text_only_ever_raises_parse_error(text: str, openmetrics: bool) -> None:
    with contextlib.suppress(ParseError):
        parse(text, openmetrics=openmetrics)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.binary(max_size=300), st.booleans())
def test_arbitrary_bytes_only_ever_raise_parse_error(data: bytes, openmetrics: bool) -> None:
    try:
        parse(data, openmetrics=openmetrics)
    except ParseError as e:
        line_no = e.line_no
    else:
        return
    assert line_no is None or line_no >= 1


@settings(max_examples=300, deadline=None)
@given(st.text('m{}="\\ \t\n#,a01.eE+-_:', max_size=200), st.sets(st.sampled_from(["m", "a", "m_total"])))
def test_selective_reads_only_ever_raise_parse_error(text: str, wanted: set[str]) -> None:
    with contextlib.suppress(ParseError):
        parse(text, wanted=wanted)


CONTENT_TYPES = [
    # the OpenMetrics media type, with its version and charset parameters
    ("application/openmetrics-text; version=1.0.0; charset=utf-8", True),
    # media types are case-insensitive
    ("Application/OpenMetrics-Text", True),
    # the Prometheus text format
    ("text/plain; version=0.0.4; charset=utf-8", False),
    # no header at all
    (None, False),
    # an empty header
    ("", False),
    # something else entirely
    ("application/json", False),
]


@pytest.mark.parametrize(("content_type", "expected"), CONTENT_TYPES)
def test_is_openmetrics(content_type: str | None, expected: bool) -> None:
    assert is_openmetrics(content_type) is expected


def test_wanted_as_a_single_name_is_refused() -> None:
    # a str is a collection of characters; reading families "a", "b", ... would silently return nothing
    with pytest.raises(TypeError):
        parse("up 1\n", wanted="up")
