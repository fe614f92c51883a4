"""Static targets in the settings carry a metric-name prefix through to the scrape target."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kvpilot.runtime.sources import _target as static_target_info
from kvpilot.settings import StaticTarget


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("ray_", "ray_"),  # Ray Serve LLM's prefix before vLLM's names
        ("", ""),  # no prefix, and no search for one
        (None, None),  # found on the page
    ],
)
def test_prefix_reaches_the_target(prefix: str | None, expected: str | None) -> None:
    target = static_target_info(StaticTarget(url="http://ray-head:8080/metrics", engine="vllm", prefix=prefix))
    assert target.prefix == expected


def test_a_prefix_that_is_no_metric_name_is_refused() -> None:
    with pytest.raises(ValidationError, match="prefix"):
        StaticTarget(url="http://ray-head:8080/metrics", prefix="ray vllm")
