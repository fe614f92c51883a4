"""The PromQL source's re-reads (metric metadata, and whether kvpilot's recording rules answer, every
``metadata_ttl_s``) are due on the monotonic clock. On wall time a step back of an hour (NTP) put them off for the
hour: recording rules installed meanwhile went unused, the same expressions run ad hoc every tick."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from collector.discovery.promql import PromQLSource
from tests.helpers.clocks import SteppingClock
from tests.services.promapi import T0, FakeFleet, serve


@pytest.fixture(scope="module")
def fleet() -> Iterator[tuple[FakeFleet, str]]:
    f = FakeFleet(20, per_deployment=10, sick_every=50, down_every=100)
    server = serve(f)
    yield f, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


async def test_the_rules_are_asked_again_after_the_ttl_whatever_the_wall_clock_did(
    fleet: tuple[FakeFleet, str],
) -> None:
    f, url = fleet
    f.rules = False
    clock = SteppingClock(T0 + 7200.0)
    source = PromQLSource(url, mode="aggregates", clock=clock, reader="thread")
    try:
        await source.collect_once()
        assert source.rules_in_use is False
        f.rules = True  # the operator installs the recording rules
        clock.step(-3600.0)
        clock.advance(source.metadata_ttl_s + 5.0)
        await source.collect_once()
    finally:
        f.rules = True
        await source.aclose()
    assert source.rules_in_use is True  # before: not asked again for the hour
