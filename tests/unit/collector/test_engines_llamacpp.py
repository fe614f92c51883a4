"""llama.cpp adapter: pages with and without the KV series removed in mid-2025."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.adapt import adapt_page
from collector.samples import TargetInfo

TARGET = TargetInfo(url="http://llama:8080/metrics", pod="llama-0")


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        # older server: KV usage present
        (
            "llamacpp-with-kv__handwritten.txt",
            {
                "kv_usage": 0.27,
                "requests_running": 2.0,
                "requests_waiting": 1.0,
                "prompt_tokens": 5913.0,
                "generation_tokens": 2048.0,
            },
        ),
        # current server: KV usage unknown (None), never 0
        (
            "llamacpp-without-kv__handwritten.txt",
            {
                "kv_usage": None,
                "requests_running": 4.0,
                "requests_waiting": 0.0,
                "prompt_tokens": 88120.0,
                "generation_tokens": 30522.0,
            },
        ),
    ],
)
def test_fixture_values(metrics_fixtures: Path, fixture: str, expected: dict[str, object]) -> None:
    page = adapt_page((metrics_fixtures / fixture).read_text(), TARGET, 5.0)
    assert page.engine == "llamacpp"
    assert len(page.replicas) == 1
    r = page.replicas[0]
    for name, value in expected.items():
        assert getattr(r, name) == value, name
    # llama.cpp exports none of these
    assert (r.model, r.kv_capacity_tokens, r.prefix_queries, r.preemptions, r.requests_finished, r.ttft) == (
        None,
        None,
        None,
        None,
        None,
        None,
    )
