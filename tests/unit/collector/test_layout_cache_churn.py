"""LayoutCache keeps the layouts its sources hold, not one per layout ever learnt (session 26, E).

A page whose layout changes from scrape to scrape (here a comment that carries the time, as some exporters write)
is learnt again after every ``RETRY_AFTER`` pages. Each layout learnt went into the cache's table of layouts shared
between sources, which forgot nothing until it held ``max_sources`` (10,000) of them: on c126946 one such target
among stable ones left every layout it had learnt behind (a vLLM page's layout is ~0.2-0.3 MB, a 512 KiB page's ~40
MB), the layouts no source held any more included."""

from __future__ import annotations

import gc
from functools import partial

from collector.exposition import DEFAULT_MAX_SAMPLES, LayoutCache
from collector.exposition import parse as strict_parse
from collector.exposition._layout import RECENT_LAYOUTS, RETRY_AFTER, PageLayout

parse = partial(strict_parse, drop_bad_lines=True)
PAGE = '# TYPE kv gauge\nkv{pod="a"} 0.5\n# TYPE reqs gauge\nreqs 12\n'


def _alive() -> int:
    gc.collect()
    return sum(isinstance(o, PageLayout) for o in gc.get_objects())


def test_a_target_whose_layout_keeps_changing_leaves_no_layout_behind() -> None:
    cache = LayoutCache(parse)
    before = _alive()
    learns = 60
    pages = 3 + RETRY_AFTER * (learns - 3)  # three misses in a row, then one learn every RETRY_AFTER pages
    for k in range(pages):
        for s in range(5):  # five replicas of one deployment: one layout between them, read off it every page
            families = cache.parse(("stable", s), PAGE, wanted=None, max_samples=DEFAULT_MAX_SAMPLES)
            assert families["kv"].samples[0].value == 0.5
        families = cache.parse("churn", f"# at {k:08d}\n" + PAGE, wanted=None, max_samples=DEFAULT_MAX_SAMPLES)
        assert families["reqs"].samples[0].value == 12.0
    assert cache.learnt >= learns
    kept = _alive() - before
    # c126946: one per layout learnt (60 and more); now those held (2) and the recent ones, with the slack before a
    # prune
    assert kept <= 2 + RECENT_LAYOUTS + 16, f"{kept} layouts kept after {cache.learnt} learnt"
    # the stable sources still read their pages off their layout
    hits = cache.hits
    cache.parse(("stable", 0), PAGE, wanted=None, max_samples=DEFAULT_MAX_SAMPLES)
    assert cache.hits == hits + 1
