"""`collector`: how often and how the targets are scraped (discovery: `kvpilot.settings.discovery`)."""

from __future__ import annotations

from pydantic import Field, model_validator

from collector.scrape import DEFAULT_MAX_BYTES, ScrapeConfig
from kvpilot.settings._section import _Section
from kvpilot.settings.arrivals import ArrivalsSettings
from kvpilot.settings.discovery import DiscoverySettings


class CollectorSettings(_Section):
    """How often and how the targets are scraped."""

    interval_s: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="Control-loop tick: every target is scraped, and findings and decisions are computed, once per "
        "interval.",
    )
    timeout_s: float = Field(
        default=2.0,
        gt=0,
        le=60,
        description="Per-scrape timeout; a target slower than this counts as a failed scrape.",
    )
    concurrency: int = Field(default=64, ge=1, le=10_000, description="Most scrapes in flight at once.")
    max_body_bytes: int = Field(
        default=DEFAULT_MAX_BYTES,
        ge=1024,
        description="Largest metrics page read from a target: the one page cap (`scrape`, `parse`, `detect`: "
        "`--max-body-bytes`).",
    )
    rate_window_s: float = Field(
        default=60.0,
        gt=0,
        description="Window over which counters become rates (arrivals, tokens, prefix-cache hit ratio).",
    )
    history_s: float = Field(
        default=3600.0,
        gt=0,
        description="History kept in memory per replica (and restored from the store's roll-ups at start).",
    )
    stale_after_s: float = Field(
        default=30.0,
        gt=0,
        description="A replica not scraped successfully for this long no longer counts as ready.",
    )
    discovery: DiscoverySettings = Field(default=DiscoverySettings(), description="Target discovery.")
    arrivals: ArrivalsSettings = Field(
        default=ArrivalsSettings(), description="Where requests/s per deployment come from: the engines or a gateway."
    )

    @model_validator(mode="after")
    def _arrivals_have_a_prometheus(self) -> CollectorSettings:
        """`arrivals.source: promql` has a Prometheus to ask: `arrivals.promql_url`, else `discovery.promql_url`"""
        if self.arrivals.source == "promql" and not (self.arrivals.promql_url or self.discovery.promql_url):
            raise ValueError(
                "collector.arrivals.source is 'promql' but neither collector.arrivals.promql_url nor "
                "collector.discovery.promql_url is set: name the Prometheus that scrapes the gateway"
            )
        return self

    @model_validator(mode="after")
    def _history_holds_a_rate_window(self) -> CollectorSettings:
        """`history_s` >= `rate_window_s`"""
        # rates are read over every sample of the window, and no sample is kept past history_s: the state refused it
        # at `kvpilot run`'s start with a ValueError traceback, after `kvpilot config show` had taken it
        if self.history_s < self.rate_window_s:
            raise ValueError(
                f"collector.history_s ({self.history_s:g}) must be at least collector.rate_window_s "
                f"({self.rate_window_s:g}): counters become rates over every sample of that window"
            )
        return self

    @model_validator(mode="after")
    def _timeout_fits_tick(self) -> CollectorSettings:
        """`timeout_s` < `interval_s`"""
        if self.timeout_s >= self.interval_s:
            raise ValueError(
                f"collector.timeout_s ({self.timeout_s}) must be shorter than collector.interval_s ({self.interval_s})"
            )
        return self

    @model_validator(mode="after")
    def _readiness_outlasts_tick(self) -> CollectorSettings:
        """`stale_after_s` > a tick's scrape spread + `timeout_s` (scraping discovery kinds)"""
        # A sample is stamped when its scrape starts and the replica's readiness is judged when the tick's last
        # scrape has ended; the scrapes spread over up to half the interval (ScrapeConfig.for_interval). A shorter
        # limit counts replicas scraped early in every tick as not ready: half of them at interval_s 120 with the
        # default 30 s. The PromQL kind does not spread its reads: its samples are as old as Prometheus' scrapes.
        if self.discovery.kind == "promql":
            return self
        spread = ScrapeConfig.for_interval(self.interval_s, self.timeout_s).spread_s
        if self.stale_after_s <= spread + self.timeout_s:
            raise ValueError(
                f"collector.stale_after_s ({self.stale_after_s:g}) must be longer than a tick's scrape spread plus "
                f"collector.timeout_s ({spread:g} + {self.timeout_s:g} s at interval_s {self.interval_s:g}; interval_s "
                "itself always is): replicas scraped early in a tick would count as not ready at its end"
            )
        return self
