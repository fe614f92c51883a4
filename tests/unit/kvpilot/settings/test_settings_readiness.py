"""collector.stale_after_s against the tick: the settings accept exactly the intervals at which a replica scraped
first in a tick is still ready when FleetState judges it, after the tick's last scrape."""

from __future__ import annotations

import pytest

from collector.samples import ReplicaSample
from collector.scrape import ScrapeConfig
from collector.state import FleetState
from kvpilot.settings import SettingsError, load_settings


def _ready_at_the_tick_end(interval_s: float, timeout_s: float, stale_after_s: float) -> bool:
    # The loop's order: a sample is stamped when its scrape starts (offset 0 at worst), the last scrape starts at the
    # end of the spread and may take the whole timeout, then FleetState.observe judges readiness at that time.
    spread = ScrapeConfig.for_interval(interval_s, timeout_s).spread_s
    t0 = 1_000.0
    sample = ReplicaSample("ns", "chat", "chat-0", "node-0", "vllm", None, t0, requests_waiting=0.0)
    state = FleetState(stale_after_s=stale_after_s)
    state.observe([sample], [], now=t0 + spread + timeout_s)
    (view,) = state.replicas()
    return view.ready


@pytest.mark.parametrize(
    ("interval_s", "timeout_s", "stale_after_s"),
    [
        (5, 2, 30),  # the defaults
        (55, 2, 30),  # spread 27.5 s: the default limit still covers it
        (60, 2, 30),  # spread 30 s + a 2 s scrape: the first replicas scraped are 32 s old at the tick's end
        (120, 2, 30),  # spread 60 s: half the replicas read as not ready every tick
        (120, 2, 120),  # a limit of one interval always covers the spread and the timeout
        (3600, 60, 3600),
        (1, 0.5, 1),
    ],
)
def test_settings_accept_exactly_the_ticks_whose_replicas_stay_ready(
    interval_s: float, timeout_s: float, stale_after_s: float
) -> None:
    collector = {"interval_s": interval_s, "timeout_s": timeout_s, "stale_after_s": stale_after_s}
    if _ready_at_the_tick_end(interval_s, timeout_s, stale_after_s):
        assert load_settings(collector=collector).collector.stale_after_s == stale_after_s
    else:
        with pytest.raises(SettingsError, match=r"collector\.stale_after_s"):
            load_settings(collector=collector)


def test_promql_reads_are_not_spread_so_not_checked() -> None:
    # The PromQL kind reads Prometheus' latest samples in one query; their age is Prometheus' scrape interval's.
    discovery = {"kind": "promql", "promql_url": "http://prometheus:9090"}
    assert load_settings(collector={"interval_s": 120, "discovery": discovery}).collector.stale_after_s == 30
