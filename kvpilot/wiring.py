"""Builds a ``Service`` from ``Settings``: the one place that knows which concrete part fills each stage.

Every part can be passed in instead (tests pass a VirtualClock, hand-made collectors, a short interval), so the
wiring that runs in production is the wiring the tests run.
"""

from __future__ import annotations

import logging
from typing import Any

import migrations
from api.exposition import OwnMetrics
from collector.clock import Clock, WallClock
from collector.scrape import Collector, ScrapeConfig
from collector.state import FleetState
from detectors.registry import Detection
from kvpilot.loop import Collect, ControlLoop, Decide, Detect, LoopConfig
from kvpilot.service import Restored, Service, restore
from kvpilot.settings import DeploymentScaling, Settings
from kvpilot.sources import Sources
from scaler.capacity import CapacityConfig
from scaler.planner import Planner, PlannerConfig
from scaler.policy import PolicyConfig
from scaler.publish import DecisionBoard
from store.buffer import BufferedWriter
from store.db import make_engine, session_factory

log = logging.getLogger(__name__)


def planner_config(settings: Settings, scaling: DeploymentScaling) -> PlannerConfig:
    return PlannerConfig(
        cold_start_s=settings.scaler.cold_start_s,
        scaling_delay_s=max(0.0, settings.horizon_s - settings.scaler.cold_start_s),
        capacity=CapacityConfig(requests_per_s=scaling.capacity_rps),
        policy=PolicyConfig(min_replicas=scaling.min_replicas, max_replicas=scaling.max_replicas),
    )


def build_planner(settings: Settings) -> Planner:
    overrides = {k: planner_config(settings, v) for k, v in settings.scaler.deployments.items()}
    return Planner(planner_config(settings, settings.scaler.default), overrides=overrides)


def build_service(
    settings: Settings,
    sources: Sources,
    *,
    clock: Clock | None = None,
    collector: Collect | None = None,
    detection: Detect | None = None,
    planner: Decide | None = None,
    board: Any = None,
    sleep: Any = None,
) -> tuple[Service, Restored]:
    """A ready-to-start service and what it restored from the store (schema upgraded first if configured)."""
    clock = clock or WallClock()
    url = settings.database_url
    if settings.store.auto_migrate:
        migrations.upgrade(url)
    engine = make_engine(url)
    sessions = session_factory(engine)
    c = settings.collector
    restored = restore(sessions, now=clock.now(), history_s=c.history_s)
    thresholds = settings.detectors.thresholds(tick_s=c.interval_s)
    if detection is None:
        detection = Detection(thresholds, only=settings.detectors.only, restore=restored.findings)
    if collector is None:
        scrape = ScrapeConfig(timeout_s=c.timeout_s, max_bytes=c.max_body_bytes, max_concurrency=c.concurrency)
        collector = Collector(scrape, clock=clock)
    writer = BufferedWriter(sessions, max_pending=settings.store.buffer_max_writes)
    holder: dict[str, Service] = {}
    metrics = OwnMetrics(lambda: holder["s"].snapshot(), lambda: holder["s"].health())
    loop = ControlLoop(
        clock=clock,
        state=FleetState(rate_window_s=c.rate_window_s, history_s=c.history_s, stale_after_s=c.stale_after_s),
        discovery=sources.discovery,
        collector=collector,
        detection=detection,
        planner=planner or build_planner(settings),
        board=board if board is not None else DecisionBoard(),
        writer=writer,
        metrics=metrics,
        config=LoopConfig(
            interval_s=c.interval_s, retention_s=settings.store.retention_days * 86400.0, kv=thresholds.kv
        ),
    )
    extra = {"sleep": sleep} if sleep is not None else {}
    service = Service(
        clock=clock,
        loop=loop,
        engine=engine,
        sessions=sessions,
        writer=writer,
        metrics=metrics,
        targets=sources.static,
        interval_s=c.interval_s,
        max_body_bytes=settings.api.max_body_bytes,
        drain_dry_run=settings.drains.dry_run,
        drain_max_concurrent=settings.drains.max_concurrent,
        **extra,
    )
    holder["s"] = service
    return service, restored
