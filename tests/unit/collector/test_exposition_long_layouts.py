"""The label-name layouts kept per process (f9f162e, ``collector.exposition._text._LAYOUTS``) are an engine's short
ones: a hostile page's label names, which may run to the page cap, are validated where they occur and not kept. Kept,
ever new long names held up to 1,024 layouts, three copies each: 40 pages of one 200 KB name held 24 MB for good
(session 29 helper F, review of f9f162e)."""

from __future__ import annotations

import tracemalloc

import pytest

from collector.exposition import ParseError, parse

WANTED = frozenset({"g"})


def _page(body: str) -> str:
    return f"# HELP g x\n# TYPE g gauge\ng{{{body}}} 1\n"


def test_pages_of_ever_new_long_label_names_leave_nothing_behind() -> None:
    tracemalloc.start()  # the whole process's allocations: a compiled parser (make compile) has no Python frames
    try:
        before = tracemalloc.take_snapshot()
        for i in range(40):
            name = f"n{i}_" + "x" * 200_000
            (sample,) = parse(_page(f'a="1",{name}="2"'), wanted=WANTED)["g"].samples
            assert sample.labels == {"a": "1", name: "2"}  # read as ever
            del sample, name
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    held = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert held < 1_000_000  # was 24 MB
    # a long layout not kept is still validated, each time it occurs
    long = "x" * 5000
    for _ in range(2):
        with pytest.raises(ParseError, match="duplicate label name"):
            parse(_page(f'{long}="1",{long}="2"'), wanted=WANTED)
        with pytest.raises(ParseError, match="invalid label set"):
            parse(_page(f'a="1",__{long}="2"'), wanted=WANTED)
