"""The layout of a body's label names (the text between its values: "a=,b=" for `a="1",b="2"`) is validated once per
process, not once per page (session 29, E): a page's label sets are the same few dozen on every page of an engine.
What is kept is names and separators only, never values; a body whose values do not fit the kept layout is still
refused, and ever new names on hostile pages cannot grow the table past its bound."""

from __future__ import annotations

import pytest

from collector.exposition import ParseError, _text, parse

WANTED = frozenset({"g"})


def page(body: str) -> str:
    return f"# HELP g x\n# TYPE g gauge\ng{{{body}}} 1\n"


def test_a_layout_is_validated_once_per_process_and_refuses_what_does_not_fit_it() -> None:
    assert parse(page('model_name="m",engine="0"'), wanted=WANTED)["g"].samples[0].labels == {
        "model_name": "m",
        "engine": "0",
    }
    kept = _text._LAYOUTS["model_name=,engine="]
    # another page, other values, the same names: read by the kept layout, not validated again
    assert parse(page('model_name="n",engine="1"'), wanted=WANTED)["g"].samples[0].labels == {
        "model_name": "n",
        "engine": "1",
    }
    assert _text._LAYOUTS["model_name=,engine="] is kept
    # the names' text of each of these differs from the kept one's, or its values are not where the layout says
    for bad, message in [
        ('model_name="m",model_name="0"', "duplicate label name"),
        ('model_name="m",__engine="0"', "invalid label set"),
        ('model_name="m" engine="0"', "invalid label set"),
        ('model_name=,engine="m""0"', "invalid label set"),
    ]:
        with pytest.raises(ParseError, match=message):
            parse(page(bad), wanted=WANTED)


def test_ever_new_label_names_do_not_grow_the_table_past_its_bound() -> None:
    for i in range(_text._MAX_LAYOUTS + 50):
        labels = parse(page(f'a{i}="1",b="2"'), wanted=WANTED)["g"].samples[0].labels
        assert labels == {f"a{i}": "1", "b": "2"}
        assert len(_text._LAYOUTS) <= _text._MAX_LAYOUTS
