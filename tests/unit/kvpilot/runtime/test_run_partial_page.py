"""`kvpilot run` scraping a real page with one garbled sample line, over HTTP: the target stays up, and operators
see the page was read in part where they look: `partial_pages_total` and `last_error` in `/v1/targets`, and
`kvpilot_scrape_partial_pages_total{target}` on kvpilot's own `/metrics`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers.poll import wait_for
from tests.helpers.static_run import run_with_target, target_once
from tests.services.pages import serve_pages

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "metrics"
GOOD = b'vllm:gpu_cache_usage_perc{model_name="facebook/opt-125m"} 0.0\n'
# one sample line whose value is not a number: its family is left out, the rest of the page read
GARBLED = b'vllm:gpu_cache_usage_perc{model_name="facebook/opt-125m"} not-a-number\n'


@pytest.fixture
def garbled_page_url() -> Iterator[str]:
    page = (FIXTURES / "vllm__DataDog__integrations-core__vllm_metrics.txt").read_bytes()
    assert page.count(GOOD) == 1
    with serve_pages({"/metrics": page.replace(GOOD, GARBLED)}) as (host, port):
        yield f"http://{host}:{port}/metrics"


def test_a_page_read_in_part_shows_in_targets_and_metrics(tmp_path: Path, garbled_page_url: str) -> None:
    target = {"url": garbled_page_url, "kind": "engine", "namespace": "ns", "deployment": "chat", "pod": "chat-0"}
    with run_with_target(tmp_path, target) as url:
        item = target_once(
            url, garbled_page_url, lambda t: t["partial_pages_total"] >= 2, "two pages read in part in /v1/targets"
        )
        assert item["up"] is True  # read in part, not down
        assert item["consecutive_failures"] == 0
        assert "vllm:gpu_cache_usage_perc" in (item["last_error"] or "")

        def exported() -> float | None:
            text = httpx.get(f"{url}/metrics").text
            m = re.search(
                rf'^kvpilot_scrape_partial_pages_total{{target="{re.escape(garbled_page_url)}"}} (\S+)$', text, re.M
            )
            return float(m.group(1)) if m and float(m.group(1)) >= 2 else None

        wait_for(exported, timeout_s=30, every_s=0.2, what="kvpilot_scrape_partial_pages_total on /metrics")
        text = httpx.get(f"{url}/metrics").text
        assert f'kvpilot_scrape_up{{target="{garbled_page_url}"}} 1.0' in text
        assert "# TYPE kvpilot_scrape_partial_pages_total counter" in text
