"""The one configuration kvpilot's alerts and dashboards are built from, in the kubernetes-mixin fashion.

kubernetes-mixin keeps selectors, thresholds and dashboard settings in one ``_config`` object (config.libsonnet) that
every alert and dashboard interpolates. Here that object is ``CONFIG``: ``alerts/rules.py`` and
``dashboards/definitions.py`` (and the builder's tags and refresh) read it, so an operator who scrapes kvpilot under
another job, or relabels ``deployment``, changes one place. Series names are never written out: ``select`` takes a
``Series`` from the catalogue ``api/series.py`` (re-exported here as ``series``), so a renamed series breaks the
build instead of a panel. Detector thresholds (the alerts' ``for`` and the numbers their text quotes) come from
``detectors.thresholds``, so an alert and the finding it pages on agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from api import series
from api.series import Series
from detectors.thresholds import DEFAULT, Thresholds

__all__ = ["CONFIG", "MixinConfig", "series"]

Steps = tuple[tuple[float, str], ...]  # (value, colour) steps above a panel's base green


@dataclass(frozen=True, slots=True)
class MixinConfig:
    # The Prometheus job that scrapes kvpilot's own /metrics; every query of a kvpilot series selects it.
    job: str = "kvpilot"
    # The labels that tell kvpilot's own pods apart on its series. HA replicas each run the whole loop and export the
    # same series (deploy/base with `replicas: 2` on PostgreSQL), shards disjoint ones: a dashboard reads one copy
    # (``one_copy``) so that neither doubles a sum nor draws a line twice.
    instance_labels: tuple[str, ...] = ("instance", "pod")
    # Dashboard template variables, as the queries match them.
    deployment_selector: str = 'deployment=~"$deployment"'
    node_selector: str = 'node=~"$node"'
    rate_window: str = "5m"
    # Detector thresholds: the alerts' `for` and the figures their descriptions quote.
    thresholds: Thresholds = DEFAULT
    runbook_base: str = "https://github.com/kvpilot/kvpilot/blob/main/docs/runbooks"
    # Dashboard-wide settings (grafana's tags and auto-refresh) and panel colour steps.
    dashboard_tags: tuple[str, ...] = ("kvpilot",)
    dashboard_refresh: str = "30s"
    queue_steps: Steps = ((5, "orange"), (20, "red"))  # requests waiting per deployment
    kv_usage_steps: Steps = ((0.8, "orange"), (0.95, "red"))  # share of the KV pool in use
    mase_steps: Steps = ((1, "orange"),)  # forecast error: above 1 the last value forecasts better

    @property
    def job_selector(self) -> str:
        return f'job="{self.job}"'

    def select(self, s: Series, *matchers: str, suffix: str = "") -> str:
        """``name{job="…",matchers…}`` for one of kvpilot's series (``suffix``: ``_bucket`` of a histogram)."""
        if suffix and s.type != "histogram":
            raise ValueError(f"{s.name} is a {s.type}: only a histogram has {suffix}")
        return f"{s.name}{suffix}{{{','.join((self.job_selector, *matchers))}}}"

    def one_copy(self, expr: str, aggregation: str = "max") -> str:
        """``expr`` (an instant vector of kvpilot's series) with the copies kvpilot's pods export of one series made
        one: ``max without (instance, pod)`` (or ``min``). Disjoint series (shards) pass through; an HA pair's
        identical ones count once."""
        return f"{aggregation} without ({', '.join(self.instance_labels)}) ({expr})"

    def read(self, s: Series, *matchers: str) -> str:
        """One copy of ``name{job="…",matchers…}`` (``one_copy`` of ``select``)."""
        return self.one_copy(self.select(s, *matchers))


CONFIG = MixinConfig()
