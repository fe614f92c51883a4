"""`collector`: how often and how the targets are scraped (discovery: `kvpilot.settings.discovery`)."""

from __future__ import annotations

from pydantic import Field, model_validator

from collector.scrape import DEFAULT_MAX_BYTES
from kvpilot.settings._section import _Section
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
        description="Largest metrics page read from a target: the one page cap (`scrape`, `parse` too).",
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

    @model_validator(mode="after")
    def _timeout_fits_tick(self) -> CollectorSettings:
        """`timeout_s` < `interval_s`"""
        if self.timeout_s >= self.interval_s:
            raise ValueError(
                f"collector.timeout_s ({self.timeout_s}) must be shorter than collector.interval_s ({self.interval_s})"
            )
        return self
