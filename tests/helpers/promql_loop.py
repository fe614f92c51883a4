"""`kvpilot run`'s service against one PromQL server for a few ticks, and the loop's "collection failed" log records:
the shape of the tests that hold what an unreadable Prometheus answer becomes in the operator's log."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kvpilot.runtime.sources import build
from kvpilot.runtime.wiring import build_service
from kvpilot.settings import load_settings
from tests.helpers.poll import until


async def collection_failures(
    url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, *, interval_s: float, timeout_s: float, wait_s: float
) -> list[logging.LogRecord]:
    """The loop's "collection failed" records over two ticks of the service reading PromQL from ``url``."""
    settings = load_settings(
        store={"database_url": f"sqlite:///{tmp_path / 'k.db'}"},
        collector={
            "interval_s": interval_s,
            "timeout_s": timeout_s,
            "discovery": {"kind": "promql", "promql_url": url},
        },
    )
    caplog.set_level(logging.ERROR, logger="kvpilot.runtime.loop")
    with build(settings) as sources:
        service, restored = build_service(settings, sources)
        await service.start(restored)
        try:
            await until(lambda: service.loop.tick_count >= 2, what="two ticks", timeout_s=wait_s)
        finally:
            service.stop.set()
            await service.wait()
    return [r for r in caplog.records if r.getMessage().startswith("collection failed")]
