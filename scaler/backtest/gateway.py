"""The simulated router's request counter as a Prometheus job scrapes it: what kvpilot's planner reads with
`kvpilot backtest --arrivals gateway` and `kvpilot demo --arrivals gateway`, through the very reader `kvpilot run`
uses for a gateway's counter (``collector.arrivals``: ``collector.counter_rates.CounterRates``).

A gateway's counter reaches `kvpilot run` through Prometheus: it moves once per scrape of the gateway, not once per
tick, and an instant query answers the last sample scraped. The simulator has one router in front of its replicas,
so one series. Its default scrape interval is the one the Gateway API Inference Extension's ``inferencepool`` chart
gives its endpoint picker's ServiceMonitor (``inferenceExtension.monitoring.interval: "10s"``,
kubernetes-sigs/gateway-api-inference-extension ``config/charts/inferencepool/values.yaml``, as of PR 1425);
``--scrape-interval`` sets another (30 s is common under kube-prometheus-stack's ServiceMonitors).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

DEFAULT_SCRAPE_INTERVAL_S = 10.0
COUNTER = "router_requests_total"  # the series' name in the answers the demo's simulated Prometheus gives


class ScrapedCounter:
    """One router's request counter as Prometheus scrapes it every ``interval_s`` from the replay's start.

    ``observe`` is told the router's count (since the replay began) at each tick of the replay; a scrape falls on the
    first tick at or after each multiple of the interval (exactly on it where the interval is a multiple of the tick).
    ``value`` is what an instant query answers then: the last scrape's sample (None before the first).
    ``restarts_at_s``: when the router restarts, at the first tick at or after each: its counter starts again from
    zero there, as a restarted process's does, and the next scrape reads the requests since."""

    def __init__(self, interval_s: float = DEFAULT_SCRAPE_INTERVAL_S, *, restarts_at_s: Sequence[float] = ()) -> None:
        if not 0 < interval_s < math.inf:
            raise ValueError(f"the gateway's scrape interval must be > 0 s and finite, got {interval_s}")
        self.interval_s = interval_s
        self._restarts = sorted(restarts_at_s)
        self._counted_before = 0.0  # the router's count at its last restart
        self._next_scrape_s = 0.0
        self._last_t = -math.inf
        self.value: float | None = None

    def observe(self, t: float, total: float) -> None:
        if t <= self._last_t:
            return  # the same tick told twice
        self._last_t = t
        while self._restarts and self._restarts[0] <= t + 1e-9:
            self._restarts.pop(0)
            self._counted_before = total
        if t + 1e-9 >= self._next_scrape_s:
            self.value = total - self._counted_before
            scrapes = t / self.interval_s
            # an interval far below the tick (1e-310 s: t / interval is inf, which floor() refuses) scrapes every tick
            self._next_scrape_s = (math.floor(scrapes + 1e-9) + 1) * self.interval_s if scrapes < 2**53 else t
