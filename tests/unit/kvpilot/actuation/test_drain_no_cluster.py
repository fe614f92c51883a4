"""A fleet kvpilot reaches without a Kubernetes API (static targets, a PromQL source, neither HA nor sharding) cannot be
drained: `kvpilot run` says so at start when drains.dry_run is false, a dry run says it was not checked against a
cluster, and a real drain fails naming the settings that would give it one. Until session 31 a dry run "completed"
with "would cordon, taint and evict", and the real one failed with "no Kubernetes API configured", with a kubeconfig
set and nothing in the log, while nothing in the docs said drains go through the cluster only with those settings."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from collector.clock import VirtualClock
from kvpilot.runtime.sources import Sources
from kvpilot.runtime.targets import StaticTargets
from kvpilot.runtime.wiring import ON_CLUSTER, build_actuation, drains_on_cluster
from kvpilot.settings import load_settings
from store import repo
from store.db import make_engine, session_factory, transaction
from tests.helpers.drains import admin_approved
from tests.helpers.sqlite_store import migrated

WOULD = "would cordon, taint and evict; not checked against a cluster, and a real drain fails: "
WHY = (
    "kvpilot drains through the Kubernetes API only with collector.discovery.kind kubernetes, ha.enabled or "
    "sharding.shards above 1 (here: discovery static, neither HA nor sharding)"
)


@pytest.mark.parametrize(
    ("dry_run", "state", "step"),
    [
        # a dry run says what it would do, and that a real one fails
        (True, "done", f"cordon n1: dry_run {WOULD}{WHY}"),
        # a real drain fails, saying why and what to set
        (False, "failed", f"cordon n1: error no Kubernetes API: {WHY}"),
    ],
)
async def test_a_drain_on_a_static_fleet_says_it_has_no_cluster(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, dry_run: bool, state: str, step: str
) -> None:
    sessions = session_factory(make_engine(migrated(tmp_path / "k.db")))
    settings = load_settings(
        collector={"discovery": {"kind": "static", "static_targets": [{"url": "http://10.0.0.1:8000/metrics"}]}},
        drains={"dry_run": dry_run},
    )
    caplog.set_level(logging.WARNING, logger="kvpilot.runtime.wiring")
    act = build_actuation(settings, Sources(None, StaticTargets([])), sessions, VirtualClock(1000.0))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # said at start only where the operator asked for real drains
    assert warnings == ([] if dry_run else [f"drains.dry_run is false, but every drain will fail: {WHY}"])

    action_id = admin_approved(sessions, "n1", 1000.0, dry_run=dry_run)
    await asyncio.wait_for(act.execute_approved(asyncio.Event()), 10)
    with transaction(sessions) as s:
        row = repo.get_drain(session=s, action_id=action_id)
        trail = [e.message for e in repo.list_drain_events(session=s, action_id=action_id)]
    assert row.state == state
    assert step in trail, trail


@pytest.mark.parametrize(
    ("words", "settings"),
    [
        ("collector.discovery.kind kubernetes", {"collector": {"discovery": {"kind": "kubernetes"}}}),
        ("ha.enabled", {"ha": {"enabled": True}}),
        ("sharding.shards above 1", {"sharding": {"shards": 2}}),
    ],
)
def test_the_words_are_the_rule_each_setting_they_name_gives_the_cluster(words: str, settings: dict[str, Any]) -> None:
    # the rule and its words are one table (wiring.ON_CLUSTER): until session 32 the words were a constant of their
    # own beside build_actuation's test, which a change to either would have let drift apart
    static = {"collector": {"discovery": {"kind": "static"}}}
    on_cluster, why = drains_on_cluster(load_settings(**static))
    assert not on_cluster
    assert words in why
    assert [w for w, _ in ON_CLUSTER if w in why] == [w for w, _ in ON_CLUSTER]
    assert drains_on_cluster(load_settings(**{**static, **settings})) == (True, why.split(" (here:")[0])
