"""The targets file's reads that kept the previous targets, on `/metrics` as `kvpilot run` builds it (session 29 left
them in the log and an object's counter only): ``kvpilot_targets_file_reads_kept_total`` and
``kvpilot_targets_file_unread``, which ``KvpilotTargetsFileUnread`` pages on."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from collector.clock import VirtualClock
from kvpilot.runtime.sources import build
from kvpilot.runtime.wiring import build_service
from tests.unit.kvpilot.fleet_double import START, settings_for

TARGET = "- url: http://10.0.0.1:8000/metrics\n  namespace: llm\n  deployment: chat\n"


def _own_series(service: object) -> dict[str, float]:
    from prometheus_client import generate_latest

    page = generate_latest(service.registry).decode()  # type: ignore[attr-defined]
    return {
        s.name: s.value
        for family in text_string_to_metric_families(page)
        for s in family.samples
        if s.name.startswith("kvpilot_targets_file")
    }


async def test_a_targets_file_that_does_not_read_is_on_metrics_until_it_does(tmp_path: Path) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text(TARGET)
    settings = settings_for(
        f"sqlite:///{tmp_path / 'k.db'}", collector={"discovery": {"kind": "static", "static_file": str(path)}}
    )
    with build(settings) as sources:
        service, _ = build_service(settings, sources, clock=VirtualClock(START))
        try:
            assert _own_series(service) == {
                "kvpilot_targets_file_reads_kept_total": 0.0,
                "kvpilot_targets_file_unread": 0.0,
            }
            path.write_text("- url: http://10.0.0.1:8000/metrics\n  namespace: [\n")  # cut where it does not parse
            assert len(await sources.discovery.targets()) == 1  # the previous target kept
            assert _own_series(service) == {
                "kvpilot_targets_file_reads_kept_total": 1.0,
                "kvpilot_targets_file_unread": 1.0,
            }
            path.write_text(TARGET + TARGET.replace("10.0.0.1", "10.0.0.2"))
            await sources.discovery.targets()
            assert _own_series(service) == {
                "kvpilot_targets_file_reads_kept_total": 1.0,
                "kvpilot_targets_file_unread": 0.0,
            }
        finally:
            service.engine.dispose()
