"""Sample lines that no family admits and whose names a selective read does not want (an untyped page's, a
``_created`` line after its counter) are passed over a run at a time by one pattern that knows the wanted names
(session 30, D), as runs of whole unwanted families are: each as the line loop reads such a line, its metric name (the
longest name its text starts with) looked up, the rest unread. Anything else ends the run and is read as before."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.exposition import ParseError, _text, parse

WANTED = frozenset({"vllm:num_requests_waiting", "vllm:e2e_count"})


@pytest.mark.parametrize(
    ("lines", "passed"),
    [
        (["a 1\n", 'b{x="1"} 2\n', "vllm:num_requests_waiting 3\n"], 2),  # up to the wanted name
        (["a 1\n", "vllm:num_requests_waitingX 3\n", "c 1\n"], 3),  # a longer name is another name
        (["a 1\n", "vllm:num_requests_waiting-x 3\n"], 1),  # the name ends at "-": the wanted one
        (["a 1\n", "vllm:e2e_count{} 3\n"], 1),  # a wanted part of a histogram
        (["a 1\n", "vllm:e2e_sum 3\n", "vllm:e2e_count\n"], 2),  # not wanted; the last, a wanted name alone
        (["a 1\n", "\n", "  \t\n", "b 2\n", "# HELP c x\n"], 4),  # blank lines within; a comment ends it
        (["a 1\n", " b 2\n"], 1),  # a blank before the name: the line loop's
        (["a 1\n", '{"b"} 2\n'], 1),  # a name inside the braces: the line loop's
        (["a 1\n", "b 2"], 1),  # the last line without its newline: the line loop's
        (["a ! garbage\n", "b{{{ 2\n"], 2),  # the rest of an unwanted line is not read, as in the line loop
    ],
)
def test_the_run_of_unwanted_lines_ends_where_the_line_loop_must_read(lines: list[str], passed: int) -> None:
    text = "".join(lines)
    run = _text._unwanted_run(WANTED)[1]
    assert run is not None
    found = run.match(text)
    assert found is not None
    assert found.end() == len("".join(lines[:passed]))


def test_an_untyped_page_reads_the_same_as_line_by_line() -> None:
    text = (
        'dynamo_requests_total{model="m"} 3\n'
        "dynamo_uptime_seconds 223.25\n"
        'vllm:num_requests_waiting{model="m"} 4\n'
        'vllm:num_requests_waiting_created{model="m"} 1.7e9\n'
        "vllm:num_requests_waitingX 5\n"
        "\n"
        'vllm:e2e_count{model="m"} 6\n'
        'vllm:e2e_sum{model="m"} 7.5\n'
    )
    selected = parse(text, wanted=WANTED)
    assert [(s.name, s.labels, s.value) for f in selected.values() for s in f.samples] == [
        ("vllm:num_requests_waiting", {"model": "m"}, 4.0),
        ("vllm:e2e_count", {"model": "m"}, 6.0),
    ]
    # a predicate has no pattern: it goes line by line
    assert selected == parse(text, wanted=lambda name: name in WANTED)


def test_a_bad_line_after_a_run_is_reported_at_its_own_line() -> None:
    text = "a 1\nb 2\nc 3\n\nd 4\nvllm:num_requests_waiting{model=} 1\n"
    with pytest.raises(ParseError) as caught:
        parse(text, wanted=WANTED)
    assert caught.value.line_no == 6
    assert caught.value.line == "vllm:num_requests_waiting{model=} 1"


_names = st.sampled_from(["a", "b:c", "vllm:num_requests_waiting", "vllm:num_requests_waitingX", "vllm:e2e_count"])
_line = st.one_of(
    st.builds(lambda n, v: f"{n} {v}", _names, st.sampled_from(["1", "2.5", "x"])),
    st.builds(lambda n, m: f'{n}{{model="{m}"}} 1', _names, st.sampled_from(["m", "n"])),
    st.sampled_from(["", "  ", "# HELP a x", "# TYPE a gauge", " a 1", "vllm:e2e_count-x 1", '{"a"} 1', "9 1"]),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(_line, max_size=12), st.booleans())
def test_any_page_reads_as_line_by_line(lines: list[str], newline: bool) -> None:
    text = "\n".join(lines) + ("\n" if newline else "")

    def read(wanted: object) -> object:
        try:
            return parse(text, wanted=wanted)  # type: ignore[arg-type]
        except ParseError as e:
            return (e.line_no, e.message)

    assert read(WANTED) == read(lambda name: name in WANTED)


def test_a_family_run_numbers_its_groups_as_one_family_does() -> None:
    # the last family of a run is read off the run's match by group number (_P, _T, _Q, _U), taken from the
    # one-family pattern: the wanted names' trie in front of each family must capture nothing
    run = _text._unwanted_run(frozenset({"vllm:num_requests_waiting", "a(b)", "x_total"}))[0]
    assert run is not None
    assert run.groupindex == _text._ONE_FAMILY_RE.groupindex
    assert tuple(run.groupindex[g] for g in "ptqu") == (_text._P, _text._T, _text._Q, _text._U)
    text = '# HELP a x\n# TYPE a gauge\na 1\n# TYPE b counter\nb{x="1"} 2\n# HELP vllm:num_requests_waiting x\n'
    found = run.match(text)
    assert found is not None
    assert found.end() == text.index("# HELP vllm:")
    assert (found[_text._Q], found[_text._U]) == ("b", "counter")


@pytest.mark.parametrize("names", [frozenset({"a", "b_total"}), frozenset({"a", "b_total", 7})])
def test_a_family_is_wanted_by_its_name_or_by_it_without_a_counters_total(names: frozenset[object]) -> None:
    # one lookup in a set of the names and the names plus "_total" (a selection holding other than names has no
    # patterns, but the same lookup), as a predicate's two
    candidates = ["a", "a_total", "b_total", "b_total_total", "b", "c", "c_total", "_total", "a_totalx"]
    expected = ["a", "a_total", "b_total", "b_total_total"]
    assert [n for n in candidates if _text._unwanted_run(names)[2](n)] == expected
    assert [n for n in candidates if _text._wanted_family(names.__contains__)(n)] == expected
