"""bench/parse.py compares the samples both parsers' selective reads keep, page by page, before it times anything; a
page holding an untyped part of a wanted family is left out of that comparison (ours puts such parts together only
where they make a family, prometheus_client keeps each), whether or not the page has TYPE lines elsewhere: the
vLLM two-node excerpt pinned in 3eb9a2d (a typed gauge, then untyped lines and a lone TTFT ``_sum``) stopped the
bench's timed modes at its check."""

from __future__ import annotations

import re

import pytest

from bench import parse as bench

TYPED = (
    '# HELP vllm:num_requests_running r\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{a="1"} 1\n'
)
LONE_SUM = 'vllm:time_to_first_token_seconds_sum{engine="0"} 2.5\n'  # a part of a wanted histogram, alone


def test_a_typed_page_with_an_untyped_part_is_left_out_and_a_typed_page_read_differently_still_stops_the_bench(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # typed only (compared, both keep 1), typed then an untyped part, no TYPE line at all: the check passes
    bench.check_kept([("typed.txt", TYPED), ("typed-then-part.txt", TYPED + LONE_SUM), ("untyped.txt", LONE_SUM)])
    # a typed page that ours read differently is still reported
    monkeypatch.setattr(bench, "ours_selective", lambda pages: 0)
    with pytest.raises(SystemExit, match=re.escape("typed.txt: ours kept 0 samples, prometheus_client 1")):
        bench.check_kept([("typed.txt", TYPED)])
