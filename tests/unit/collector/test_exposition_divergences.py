"""Where we knowingly differ from prometheus_client's text parser, and why.

Each case asserts both sides, so it fails if either parser changes: the oracle's behaviour is checked
live, not assumed. Everything not listed here agrees (see test_exposition_text.py).
"""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from collector.exposition import ParseError, parse

ORACLE_ACCEPTS_WE_REFUSE = [
    # a legacy name given as a __name__ label: no exposition writes it (a quoted name inside the braces, as Prometheus
    # 3 negotiates UTF-8 names, is read: test_exposition_text)
    '{__name__="up",a="b"} 1\n',
    # no blank between name and value: the oracle cuts the last character off the name ("in" = +Inf)
    "inf\n",
    # extra tokens: the oracle keeps the first as value and the last as timestamp, dropping the middle
    "m 1 2 3\n",
    # an OpenMetrics exemplar in a text page: read as more value tokens, its value as the timestamp
    'm 1 # {trace_id="a"} 2\n',
    # a metric name with a blank in it, accepted because names before "{" are not validated
    "my metric{} 1\n",
    # an empty label value term, silently dropped
    "m{a=} 1\n",
    # a leading comma in the label set
    'm{,a="b"} 1\n',
    # a no-break space between labels, stripped by str.strip() in the oracle; not a separator in the format
    'm{a="b",\xa0c="d"} 1\n',
]


@pytest.mark.parametrize("text", ORACLE_ACCEPTS_WE_REFUSE)
def test_lenient_oracle_inputs_are_refused(text: str) -> None:
    assert list(text_string_to_metric_families(text))  # the oracle accepts it ...
    with pytest.raises(ParseError):  # ... we refuse, naming the line
        parse(text)


ORACLE_CRASHES_WE_REFUSE = [
    # a timestamp too large for a float: OverflowError from the oracle's int division
    ("m 1 " + "9" * 400 + "\n", OverflowError),
    # a HELP whose name token is a non-ASCII blank: IndexError from the oracle's unquoting
    ("# HELP \xa0 doc\n", IndexError),
]


@pytest.mark.parametrize(("text", "crash"), ORACLE_CRASHES_WE_REFUSE)
def test_oracle_crashes_become_parse_errors(text: str, crash: type[Exception]) -> None:
    with pytest.raises(crash):
        list(text_string_to_metric_families(text))
    with pytest.raises(ParseError):
        parse(text)


def test_integer_beyond_float_range_reads_as_infinity() -> None:
    # The oracle keeps such a value as a Python int, which no float (and no consumer of ours) can hold;
    # float() of its text is +Inf, which is what a Go scraper reports too.
    text = "m " + "9" * 400 + "\n"
    (family,) = text_string_to_metric_families(text)
    assert family.samples[0].value == int("9" * 400)
    assert math.isinf(parse(text)["m"].samples[0].value)


def test_skipped_families_are_not_validated() -> None:
    # A selective read does not look inside the lines of families it was not asked for.
    text = "# TYPE skipped gauge\nskipped{broken 1\n# TYPE kept gauge\nkept 1\n"
    with pytest.raises(ParseError):
        parse(text)
    assert parse(text, wanted={"kept"})["kept"].samples[0].value == 1.0


DUPLICATED_SERIES = [
    # the same gauge twice (two exporters concatenated): read as one sum, "running 21" became 42
    '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 21\n'
    'vllm:num_requests_running{model_name="m"} 21\n',
    # the same series with its labels in another order
    'm{a="1",b="2"} 1\nm{b="2",a="1"} 1\n',
    # a family that comes back later on the page with a series it already had
    "# TYPE c counter\nc_total 1\n# TYPE g gauge\ng 1\n# TYPE c counter\nc_total 2\n",
    # a histogram bucket repeated
    '# TYPE h histogram\nh_bucket{le="1"} 1\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 2\n',
]


@pytest.mark.parametrize("text", DUPLICATED_SERIES)
def test_duplicated_series_are_refused(text: str) -> None:
    families = list(text_string_to_metric_families(text))  # the oracle keeps every copy ...
    assert sum(len(f.samples) for f in families) > len(
        {(s.name, frozenset(s.labels.items())) for f in families for s in f.samples}
    )
    with pytest.raises(ParseError, match="duplicate series"):  # ... we refuse the page
        parse(text)


def test_duplicates_in_families_not_read_do_not_refuse_the_page() -> None:
    text = "other 1\nother 1\n# TYPE g gauge\ng 2\n"
    assert parse(text, wanted={"g"})["g"].samples[0].value == 2
    with pytest.raises(ParseError, match=r"line 2: duplicate series other\{\} in family 'other'"):
        parse(text)


def test_a_label_value_must_follow_its_name_and_equals_sign() -> None:
    # found by hypothesis: the comma-and-quote layout matches `a00="…",a0="",` once the quotes are removed
    text = 'a0{a00="000000",a0=,""} 0.0\n'
    with pytest.raises(ValueError, match="metric name specified more than once"):
        list(text_string_to_metric_families(text))  # the oracle refuses it too (for its own reason)
    with pytest.raises(ParseError):
        parse(text)


def test_untyped_histogram_parts_are_one_histogram() -> None:
    # The one place we return other families than the oracle on purpose (collector/exposition/_untyped.py): a page
    # without TYPE lines (`curl … | grep -v '^#'`) keeps a histogram's buckets, sum and count on it, and the text
    # format says what they are; the oracle makes each sample name an untyped family of its own.
    text = 'ttft_bucket{le="0.1"} 1\nttft_bucket{le="+Inf"} 3\nttft_sum 0.9\nttft_count 3\n'
    assert {f.name: f.type for f in text_string_to_metric_families(text)} == {
        "ttft_bucket": "unknown",
        "ttft_sum": "unknown",
        "ttft_count": "unknown",
    }
    ours = parse(text)
    assert {name: f.type for name, f in ours.items()} == {"ttft": "histogram"}
    assert [s.name for s in ours["ttft"].samples] == ["ttft_bucket", "ttft_bucket", "ttft_sum", "ttft_count"]
