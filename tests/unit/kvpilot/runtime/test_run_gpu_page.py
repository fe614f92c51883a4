"""`kvpilot run` scraping a GPU target (``kind: gpu``) over HTTP whose page holds none of the GPU exporters' families
(dcgm-exporter with its field names in lower case, issue #272): the target is down where operators look, with what
`kvpilot parse --engine dcgm` says of the page: `up` false and `last_error` in `/v1/targets`,
`kvpilot_scrape_up{target} 0` on kvpilot's own `/metrics`, and one log line, not one per scrape. It used to be up with
no GPUs and no word."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers.static_run import run_with_target, target_once
from tests.services.pages import serve_pages

pytestmark = pytest.mark.e2e

LOWER_CASE = (
    Path(__file__).resolve().parents[3]
    / "fixtures"
    / "metrics"
    / "dcgm-lowercase-names-mig__NVIDIA__dcgm-exporter__issue_272__excerpt.txt"
)


@pytest.fixture
def lower_case_page_url() -> Iterator[str]:
    with serve_pages({"/metrics": LOWER_CASE}) as (host, port):
        yield f"http://{host}:{port}/metrics"


def test_a_gpu_page_without_gpu_families_is_down_with_what_it_holds(tmp_path: Path, lower_case_page_url: str) -> None:
    target = {"url": lower_case_page_url, "kind": "gpu", "node": "gpu-node-1", "pod": "dcgm-exporter-abc"}
    with run_with_target(tmp_path, target) as url:
        item = target_once(
            url, lower_case_page_url, lambda t: t["consecutive_failures"] >= 3, "three failed scrapes in /v1/targets"
        )
        assert item["up"] is False
        error = item["last_error"] or ""
        assert error.startswith("unreadable page: page has none of the GPU exporters' families: ")
        assert "dcgm_" in error  # the page's own description: DCGM's field names in lower case
        text = httpx.get(f"{url}/metrics").text
        assert re.search(rf'^kvpilot_scrape_up{{target="{re.escape(lower_case_page_url)}"}} 0(\.0)?$', text, re.M)
    log = "".join(p.read_text(errors="replace") for p in tmp_path.glob("run-*.log"))
    assert log.count(f"target {lower_case_page_url} is down") == 1, log[-2000:]
