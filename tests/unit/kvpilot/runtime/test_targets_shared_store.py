"""Two kvpilots on one store (HA replicas, a second `kvpilot run`) scrape an API-added target under the labels the
store holds: the one whose POST won, and after a target is removed and added again with other labels, the new ones
(before: each instance kept the labels it first saw until a restart)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from collector.samples import TargetInfo
from kvpilot.runtime.targets import StaticTargets
from store.db import make_engine, session_factory
from tests.helpers.sqlite_store import migrated

URL = "http://10.0.0.9:8000/metrics"
CHAT = TargetInfo(url=URL, namespace="llm", deployment="chat")


@pytest.fixture
def factory(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    path = tmp_path / "kvpilot.db"
    migrated(path)
    engine = make_engine(f"sqlite:///{path}")
    yield session_factory(engine)
    engine.dispose()


def _labels(targets: StaticTargets) -> list[tuple[str, str]]:
    return [(t.url, t.deployment) for t in targets.static_targets()]


def test_the_same_url_added_through_both_is_scraped_under_the_stored_labels(factory: sessionmaker[Session]) -> None:
    one, two = StaticTargets(sessions=factory), StaticTargets(sessions=factory)
    assert one.add(CHAT)
    assert not two.add(replace(CHAT, deployment="code"))  # stored already: the first POST's row
    assert _labels(two) == [(URL, "chat")]


def test_a_target_added_again_with_other_labels_is_so_in_the_other_instance(factory: sessionmaker[Session]) -> None:
    one, two = StaticTargets(sessions=factory), StaticTargets(sessions=factory)
    one.add(CHAT)
    two.refresh()
    assert _labels(two) == [(URL, "chat")]
    assert one.remove(URL)
    assert one.add(replace(CHAT, deployment="code"))
    two.refresh()
    assert _labels(two) == [(URL, "code")]


def test_the_configurations_target_keeps_its_labels(factory: sessionmaker[Session]) -> None:
    one = StaticTargets(sessions=factory)
    pinned = StaticTargets([replace(CHAT, deployment="from-config")], sessions=factory)
    one.add(CHAT)
    pinned.refresh()
    assert _labels(pinned) == [(URL, "from-config")]
