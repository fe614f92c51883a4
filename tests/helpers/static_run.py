"""`kvpilot run` with one static scrape target from a settings file, and that target's record in `GET /v1/targets`
once it shows what a test waits for: the shape of the tests that scrape a real loopback page end to end."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.helpers.poll import wait_for
from tests.unit.kvpilot.runtime.test_service_run import _ready, kvpilot_run


@contextmanager
def run_with_target(tmp_path: Path, target: dict[str, str]) -> Iterator[str]:
    """A ready `kvpilot run` scraping ``target`` (a `static_targets` item); yields its API's base URL."""
    config = tmp_path / "kvpilot.yaml"
    config.write_text(json.dumps({"collector": {"discovery": {"kind": "static", "static_targets": [target]}}}))
    with kvpilot_run(tmp_path, "--config", str(config)) as (proc, url):
        _ready(url, proc)
        yield url


def target_once(url: str, target_url: str, shows: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
    """``target_url``'s item in ``url``'s `GET /v1/targets`, once ``shows`` holds of it (within 30 s)."""

    def listed() -> dict[str, Any] | None:
        items = httpx.get(f"{url}/v1/targets").json()["items"]
        item = next((t for t in items if t["url"] == target_url), None)
        return item if item is not None and shows(item) else None

    wait_for(listed, timeout_s=30, every_s=0.2, what=what)
    item = listed()
    assert item is not None
    return item
