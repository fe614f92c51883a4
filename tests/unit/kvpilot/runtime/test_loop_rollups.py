"""The loop's per-minute roll-ups (issue 17): each flush reads the minute's rows of every deployment in one SELECT
instead of one per deployment, and folds each tick into them exactly as before, wherever the writer thread's flush
begins (while the loop is still queueing a tick's writes, too)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import event

from collector.clock import VirtualClock
from collector.samples import TargetInfo
from collector.scrape import CollectResult
from store import repo
from store.buffer import BufferedWriter
from store.db import transaction
from tests.helpers.poll import until
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, make_service, run_ticks

DEPLOYMENTS = 12


class ManyDeployments(ScriptedFleet):
    """The scripted fleet's replica, once in each of DEPLOYMENTS deployments (llm/chat-0 ...)."""

    async def collect_once(self, targets: Sequence[TargetInfo]) -> CollectResult:
        result = await super().collect_once(targets)
        engine = result.results[0]
        one = engine.replicas[0]
        samples = tuple(
            dataclasses.replace(one, deployment=f"chat-{i}", replica=f"chat-{i}-0") for i in range(DEPLOYMENTS)
        )
        return dataclasses.replace(result, results=(dataclasses.replace(engine, replicas=samples),))


async def _run(tmp_path: Path, *, flush_between_submissions: bool = False) -> None:
    clock = VirtualClock(START - START % 60)  # ticks 0-11 in one minute, 12-14 in the next
    fleet = ManyDeployments(clock)
    service, restored, timer = make_service(f"sqlite:///{tmp_path / 'k.db'}", clock, fleet)
    selects: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM rollups" in statement:
            selects.append(statement)

    if flush_between_submissions:  # the writer thread's flush, run at each point where the loop queues writes
        writer = service.writer
        for name in ("submit", "submit_all"):
            queue = getattr(writer, name, None)
            if queue is not None:
                setattr(writer, name, _then_flush(queue, writer))
    event.listen(service.engine, "before_cursor_execute", count)
    await service.start(restored)
    await run_ticks(service, timer, 15)
    await until(lambda: service.writer.pending == 0, what="writes flushed")
    service.stop.set()
    await service.wait()
    ticks = service.loop.tick_count
    assert ticks >= 15
    # before c378d1d: one SELECT per deployment per tick (12 x 15); now one per tick, the rows a minute opens known
    # absent from it; and the first retention pass's newest stored minute (store.repo.retention.newest_stored).
    # Before: a flush that began while the loop was queueing a tick's writes read the rest of that tick's rows one by
    # one (48 and 53-98 reads here), and each minute's first tick read its 12 absent rows one by one (+24)
    assert len(selects) <= ticks + 1, len(selects)
    with transaction(service.sessions) as s:
        points = repo.load_rollups(session=s)
    by_deployment: dict[str, list[int]] = {}
    for p in points:
        by_deployment.setdefault(p.deployment, []).append(p.samples)
        assert p.values["kv_usage_mean"] == 0.4  # every tick's 0.4, folded as a running mean
    assert sorted(by_deployment) == sorted(f"llm/chat-{i}" for i in range(DEPLOYMENTS))
    for samples in by_deployment.values():
        assert samples[0] == 12  # the first minute's twelve ticks
        assert sum(samples) == ticks  # each tick counted once, in its own minute


def _then_flush(queue: Callable[..., None], writer: BufferedWriter) -> Callable[..., None]:
    def queued_then_flushed(*args: Any) -> None:
        queue(*args)
        writer.flush()

    return queued_then_flushed


async def test_a_flush_reads_the_minutes_rollups_once_and_folds_every_tick(tmp_path: Path) -> None:
    await _run(tmp_path)


async def test_a_flush_that_runs_while_the_loop_queues_a_tick_reads_no_row_twice(tmp_path: Path) -> None:
    # the flake of session 28 (48 reads where 40 were bounded, in one full make test of two), forced
    await _run(tmp_path, flush_between_submissions=True)
