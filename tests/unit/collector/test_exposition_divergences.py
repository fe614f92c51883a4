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
    # UTF-8 metric names inside the braces: Prometheus serves them only to scrapers that negotiate
    # `escaping=allow-utf-8`; kvpilot does not, so on its pages this is corruption.
    '{"my.metric",a="b"} 1\n',
    # the same for a legacy name given as __name__
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
