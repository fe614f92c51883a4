"""The loop's writes of the deployments seen (``kvpilot.runtime.persist.TickWrites``, issue 17): a deployment's row
is written when it is new or its engine or model changes, and otherwise its ``last_seen`` once a minute, not every
tick; what a restart reads is unchanged."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from kvpilot.runtime.persist import TickWrites
from store import repo
from store.buffer import BufferedWriter
from store.db import transaction


def _view(engine: str | None, model: str | None) -> Any:
    """What ``TickWrites`` reads of a ``DeploymentView``: its first replica's engine and model, its signals."""
    sample = SimpleNamespace(engine=engine, model=model)
    return SimpleNamespace(replicas=[SimpleNamespace(sample=sample)], values=lambda: {})


def _tick(writes: TickWrites, now: float, fleet: dict[str, tuple[str | None, str | None]]) -> None:
    views = {key: _view(*what) for key, what in fleet.items()}
    writes.persist(now, views, [], [], detected=False, capacity=None)
    assert writes.writer.flush()


def _rows(factory: sessionmaker[Session]) -> dict[str, tuple[float, float, str | None, str | None]]:
    with transaction(factory) as s:
        return {r.key: (r.first_seen, r.last_seen, r.engine, r.model) for r in repo.all_deployments(session=s)}


def _writes_of_deployments(factory: sessionmaker[Session]) -> list[str]:
    statements: list[str] = []
    engine = factory.kw["bind"]

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "deployments" in statement and not statement.lstrip().upper().startswith("SELECT"):
            statements.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    return statements


def _writes(factory: sessionmaker[Session], **kw: float) -> TickWrites:
    return TickWrites(
        BufferedWriter(factory, max_pending=1000), retention_s=1e9, prune_every_s=1e9, decision_heartbeat_s=60, **kw
    )


def test_an_unchanged_deployment_is_rewritten_once_a_minute_not_every_tick(factory: sessionmaker[Session]) -> None:
    writes = _writes(factory)
    statements = _writes_of_deployments(factory)
    fleet = {"ns/a": ("vllm", "llama"), "ns/b": ("sglang", "qwen")}
    _tick(writes, 1000.0, fleet)
    assert _rows(factory) == {"ns/a": (1000.0, 1000.0, "vllm", "llama"), "ns/b": (1000.0, 1000.0, "sglang", "qwen")}
    inserted = len(statements)
    for t in range(1005, 1060, 5):  # eleven more ticks in the minute: nothing to write
        _tick(writes, float(t), fleet)
    assert len(statements) == inserted  # before: an UPDATE of both rows every tick
    assert _rows(factory)["ns/a"][1] == 1000.0
    _tick(writes, 1060.0, fleet)  # a minute on: last_seen written again
    assert _rows(factory) == {"ns/a": (1000.0, 1060.0, "vllm", "llama"), "ns/b": (1000.0, 1060.0, "sglang", "qwen")}


def test_a_new_deployment_or_a_new_model_is_written_at_once(factory: sessionmaker[Session]) -> None:
    writes = _writes(factory)
    _tick(writes, 1000.0, {"ns/a": ("vllm", "llama")})
    _tick(writes, 1005.0, {"ns/a": ("vllm", "llama"), "ns/b": ("vllm", "qwen")})  # new: inserted
    _tick(writes, 1010.0, {"ns/a": ("vllm", "llama-2"), "ns/b": ("vllm", "qwen")})  # a's model changed
    _tick(writes, 1015.0, {"ns/a": (None, None), "ns/b": ("vllm", "qwen")})  # none read: the store keeps what it has
    assert _rows(factory) == {"ns/a": (1000.0, 1010.0, "vllm", "llama-2"), "ns/b": (1005.0, 1005.0, "vllm", "qwen")}


def test_a_restarted_process_writes_every_deployment_on_its_first_tick(factory: sessionmaker[Session]) -> None:
    fleet = {"ns/a": ("vllm", "llama")}
    _tick(_writes(factory), 1000.0, fleet)
    _tick(_writes(factory), 1010.0, fleet)  # a new process: nothing remembered, so written
    assert _rows(factory) == {"ns/a": (1000.0, 1010.0, "vllm", "llama")}


def test_the_interval_is_a_setting(factory: sessionmaker[Session]) -> None:
    writes = _writes(factory, seen_every_s=10.0)
    fleet = {"ns/a": ("vllm", "llama")}
    for t in (1000.0, 1005.0, 1010.0, 1015.0):
        _tick(writes, t, fleet)
    assert _rows(factory)["ns/a"][:2] == (1000.0, 1010.0)
