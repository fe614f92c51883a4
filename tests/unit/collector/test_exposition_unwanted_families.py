"""Runs of whole unwanted families, passed over by one pattern that knows the wanted names (_text._pass_families),
cost less each (session 32, D): the run's last family is taken from the groups its own lines captured
(``Match.lastindex``), it is not closed (its name and type were checked by the pattern, and it is never emitted), and
the wanted names' pattern has no repeat where a name ends and another goes on. What a page reads is unchanged: the
last family stays current as if its lines had been read one by one, a line of its own after the run is still its own,
and an error it holds is still said where it was."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.exposition import ParseError, _text, parse
from tests.unit.collector.test_exposition_text import assert_agrees, canonical

WANTED = frozenset({"k", "k_bucket", "ab", "b_sum"})
K = "# HELP k K.\n# TYPE k gauge\nk 1\n"


@pytest.mark.parametrize(
    "text",
    [
        # the run's last family opened by its HELP line without TYPE, after a typed one (t holds the first's type)
        '# HELP a A.\n# TYPE a histogram\na_bucket{le="+Inf"} 1\na_count 1\n# HELP b B.\nb 2\n b_sum 3\n' + K,
        # ... by its HELP and TYPE lines, after one opened by its TYPE line (q and u hold the first's)
        "# TYPE a counter\na_total 1\n# HELP b B.\n# TYPE b summary\nb_count 2\n b_sum 3\n" + K,
        # ... by its TYPE line, after one opened by HELP and TYPE
        "# HELP a A.\n# TYPE a gauge\na 1\n# TYPE b histogram\nb_count 2\n b_sum 3\n" + K,
        # a further family tried and refused at its end (its HELP again): its groups are not the last family's
        "# HELP a A.\n# TYPE a gauge\na 1\n# HELP b B.\n# TYPE b counter\nb_total 2\n# HELP b Again.\n b_total 3\n" + K,
        # the run's last family is a histogram whose name a wanted one ends with; a wanted name that goes on
        "# HELP xk X.\n# TYPE xk histogram\nxk_sum 1\n xk_count 2\n# HELP abc C.\n# TYPE abc gauge\nabc 3\n" + K,
    ],
    ids=["help-after-typed", "typed-after-type-led", "type-led-last", "refused-try", "names-that-go-on"],
)
def test_a_line_after_a_run_is_its_last_familys(text: str) -> None:
    # the line with a blank before its name ends the run; it is the last family's where the type its own lines
    # gave it admits it (passed over, unwanted), else a family of its own (b_sum, wanted)
    assert_agrees(text)
    assert_agrees(text, WANTED)
    assert canonical(parse(text, wanted=WANTED)) == canonical(parse(text, wanted=lambda name: name in WANTED))


@pytest.mark.parametrize(
    ("after", "line_no"),
    [
        (" #  TYPE b bogus\n", 5),  # an unusual TYPE line of the family passed over: its type checked at its close
        ("#\tTYPE b bogus\n", 5),
        (" # TYPE b summary\nb_count 1\n# HELP _total x\n# TYPE _total counter\n_total 1\n", 8),
    ],
)
def test_an_error_in_the_last_family_passed_over_is_still_said(after: str, line_no: int) -> None:
    text = "# HELP a A.\n# TYPE a gauge\na 1\n# TYPE b gauge\n" + after + K
    with pytest.raises(ParseError) as whole:
        parse(text)
    with pytest.raises(ParseError) as selective:
        parse(text, wanted=WANTED)
    assert str(selective.value) == str(whole.value)
    assert selective.value.line_no == line_no


def test_a_family_passed_over_is_not_closed_before_a_wanted_one(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "# HELP a A.\n# TYPE a gauge\na 1\n# HELP b_total B.\n# TYPE b_total counter\nb_total 2\n" + K
    expected = parse(text, wanted=WANTED)
    closed: list[str] = []
    close = _text._TextParser._close

    def noted(parser: _text._TextParser) -> None:
        closed.append(parser.name)
        close(parser)

    monkeypatch.setattr(_text._TextParser, "_close", noted)
    assert parse(text, wanted=WANTED) == expected
    assert "b_total" not in closed  # the run's last family: its close would find nothing to check, nothing to emit


def test_a_name_that_ends_where_another_goes_on_costs_no_repeat() -> None:
    # ("?" after a group is a repeat to `re`; an empty branch is not, and matches the same)
    assert "?" not in _text._trie(["ab", "ab_bucket", "ab_count", "abc", "k"]).replace("(?:", "")


NAMES = st.sampled_from(["a", "ab", "abc", "ab_total", "k", "k_bucket", "kx", "b_sum"])
FAMILY = st.tuples(
    NAMES,
    st.sampled_from(["", "gauge", "counter", "histogram", "summary", "untyped"]),
    st.booleans(),  # a HELP line
    st.lists(st.sampled_from(["", "_total", "_bucket", "_count", "_sum", "_created", "x"]), max_size=3),
    st.sampled_from(["", "\n", " ", "# c\n"]),  # what follows its lines
)


def _family(name: str, typ: str, helped: bool, suffixes: list[str], after: str, at: int) -> str:
    head = (f"# HELP {name} H.\n" if helped or not typ else "") + (f"# TYPE {name} {typ}\n" if typ else "")
    lines = "".join(
        f'{name}{suffix}{{le="{i}",i="{at}"}} {i}\n' if suffix == "_bucket" else f'{name}{suffix}{{i="{at}{i}"}} {i}\n'
        for i, suffix in enumerate(suffixes)
    )
    return head + lines + (after if after != " " else f" {name} 9\n")


def _read(text: str, wanted: frozenset[str] | Callable[[str], bool]) -> object:
    """What a page reads as: its families, or where and why it is refused."""
    try:
        return canonical(parse(text, wanted=wanted))
    except ParseError as e:
        return e.line_no, e.message


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(FAMILY, max_size=8), st.sets(NAMES, max_size=3))
def test_any_run_of_families_reads_as_a_predicate_reads_it(
    families: list[tuple[str, str, bool, list[str], str]], wanted: set[str]
) -> None:
    # a predicate goes family by family (one family's pattern at a time), the selection a run at a time
    text = "".join(_family(*family, at=at) for at, family in enumerate(families))
    selection = frozenset(wanted)
    assert _read(text, selection) == _read(text, lambda name: name in selection)
