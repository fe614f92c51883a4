"""``--scrape-interval`` far below a tick (any finite number > 0 passes the flag's check): every tick is a scrape.
1e-310 s made t / interval infinite and ``math.floor`` raised OverflowError out of ``kvpilot backtest`` and
``kvpilot demo`` at the replay's first tick after 0 (session 29 helper F, review of 4223f6f)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app
from scaler.backtest.gateway import ScrapedCounter

TRACE = "synthetic:duration_s=300,rate=4,amplitude=0.5,period_s=120,bursts=1,burst_s=30"  # test_backtest_gateway's


@pytest.mark.parametrize("interval_s", [1e-310, 5e-324])
def test_an_interval_far_below_the_tick_scrapes_every_tick(interval_s: float) -> None:
    counter = ScrapedCounter(interval_s)
    for i, t in enumerate((0.0, 5.0, 10.0, 1e6, 1e6 + 5)):
        counter.observe(t, 10.0 * i)
        assert counter.value == 10.0 * i


def test_the_backtest_runs_with_such_an_interval() -> None:
    argv = ["backtest", "--trace", TRACE, "--policies", "kvpilot", "--no-frontier", "--json", "--arrivals", "gateway"]
    result = CliRunner().invoke(app, [*argv, "--scrape-interval", "1e-310"])
    assert result.exit_code == 0, result.output
