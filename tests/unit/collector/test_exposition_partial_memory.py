"""The scrape loop's memory of a source's bad names (``LayoutCache``, 70aa136): a page the cache cannot read off a
layout is parsed with the names set aside on the source's last page (``expect_bad``), so it is read once rather than
read, failed and read again. Without the hand-over every such page read twice, and no other test saw it."""

from __future__ import annotations

import re
from typing import Any

from collector.exposition import DEFAULT_MAX_SAMPLES, LayoutCache, parse


def _page(scrape: int, bad: set[int]) -> str:
    out = []
    for f in range(12):
        out.append(f"# HELP fam{f} a gauge.\n# TYPE fam{f} gauge\n")
        out.extend(f'fam{f}{{pod="p{i}"}} {i + scrape}.5\n' for i in range(50))
        out.append(f'fam{f}{{pod="last"}} {"ERROR - FAILED TO CONVERT TO STRING" if f in bad else "1"}\n')
    return "".join(out)


def test_a_page_off_its_layout_is_parsed_with_the_names_its_source_set_aside_last_time() -> None:
    # every value moves each scrape, the lines of the families left out too, so no page fits the layout (which pins
    # those lines word for word) and each takes the parser; from the second on, with the names of the one before
    asked: list[tuple[str, tuple[str, ...]]] = []

    def recording(text: str, **kw: Any) -> Any:
        asked.append((text, tuple(kw.get("expect_bad", ()))))
        return parse(text, drop_bad_lines=True, **kw)

    cache = LayoutCache(recording)
    bad = {3, 7}
    for scrape in range(3):
        text = _page(scrape, {*bad, 9} if scrape == 2 else bad)  # a third bad name on the last scrape
        page = cache.parse("dcgm", text, wanted=None, max_samples=DEFAULT_MAX_SAMPLES)
        direct = parse(text, drop_bad_lines=True)
        assert (dict(page), page.names) == (dict(direct), direct.names)  # type: ignore[attr-defined]
    # the pages themselves, not the probes the layout is learnt from (their values are line numbers)
    pages = [expect for text, expect in asked if re.search(r'^fam0{pod="p0"} [0-9]+\.5$', text, re.M)]
    assert pages == [(), ("fam3", "fam7"), ("fam3", "fam7")]
