"""A PromQL answer the reader could not read is logged in one line a tick (Prometheus answering garbage), but the
first time its error comes from a given line of code the traceback is kept: a bug of kvpilot's own reader raises the
same errors, and without it would read as Prometheus's fault, every tick, with nothing to find it by (review G)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from collector.clock import VirtualClock
from collector.promql.decode import PromQLError
from collector.samples import TargetInfo
from collector.scrape import CollectResult
from kvpilot.runtime.loop import FirstSeen
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, make_service, run_ticks


def _unreadable(i: int) -> PromQLError:
    try:
        {}["metric"] if i % 2 else None.get("x")  # type: ignore[union-attr]  # two errors a reader can raise
    except (KeyError, AttributeError) as e:
        try:
            raise PromQLError(f"http://prom:9090 query answers: not laid out as the Prometheus API's ({e!r})") from e
        except PromQLError as wrapped:
            return wrapped
    raise AssertionError


@dataclass
class Unreadable(ScriptedFleet):
    calls: int = 0

    async def collect_once(self, targets: Sequence[TargetInfo]) -> CollectResult:
        self.calls += 1
        raise _unreadable(self.calls)


async def test_each_unreadable_cause_keeps_its_traceback_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = VirtualClock(START)
    service, restored, timer = make_service(f"sqlite:///{tmp_path / 'k.db'}", clock, Unreadable(clock))
    caplog.set_level(logging.ERROR, logger="kvpilot.runtime.loop")
    await service.start(restored)
    await run_ticks(service, timer, 5)
    service.stop.set()
    await service.wait()
    failed = [r for r in caplog.records if r.getMessage().startswith("collection failed")]
    assert len(failed) >= 5
    assert [r.exc_info is not None for r in failed[:4]] == [True, True, False, False]  # one per line of code


def test_first_seen_is_bounded() -> None:
    seen = FirstSeen(limit=1)
    assert seen.first(_unreadable(1))
    assert not seen.first(_unreadable(1))
    assert not seen.first(_unreadable(2))  # full: nothing more is remembered, nor logged with its traceback


def _remote(line: int) -> TypeError:
    from concurrent.futures.process import _RemoteTraceback  # how a reader process's error arrives

    text = f'\n"""\nTraceback (most recent call last):\n  File "/k/collector/promql/series.py", line {line}, in r\n"""'
    try:
        raise TypeError("'NoneType' object is not subscriptable") from _RemoteTraceback(text)
    except TypeError as e:
        return e  # re-raised here, one line for every remote error: the remote line tells them apart


def test_errors_from_a_reader_process_are_told_apart_by_their_remote_line() -> None:
    seen = FirstSeen()
    assert seen.first(_remote(160))
    assert not seen.first(_remote(160))
    assert seen.first(_remote(212))
