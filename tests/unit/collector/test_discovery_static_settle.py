"""A static targets file read while it is written (``collector.discovery.static``'s settle rule): a read of a file
cut anywhere never drops or changes a target, and a changed list is applied once the file has stayed as it is for
``settle_s``, at a later read. Before (session 29), a file cut at a line end parsed and the targets after the cut were
dropped at that read; one cut inside a URL changed a target."""

from __future__ import annotations

import itertools
import json
import math
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.clock import VirtualClock
from collector.discovery.static import StaticFileDiscovery
from collector.samples import TargetInfo

TICK_S = 5.0  # a read each control-loop tick
SETTLE_S = 2.0


def _targets(n: int, start: int = 0) -> list[dict[str, str]]:
    return [
        {"url": f"http://10.0.0.{i}:8000/metrics", "namespace": "prod", "deployment": f"d{i % 3}", "pod": f"p-{i}"}
        for i in range(start, start + n)
    ]


# the same targets as the forms a generator writes: YAML block style, with defaults, JSON
FORMS = {
    "yaml": lambda ts: yaml.safe_dump(ts, sort_keys=False),
    "yaml defaults": lambda ts: yaml.safe_dump(
        {"defaults": {"namespace": "prod"}, "targets": [{k: v for k, v in t.items() if k != "namespace"} for t in ts]},
        sort_keys=False,
    ),
    "json": lambda ts: json.dumps({"targets": ts}, indent=1) + "\n",
}


def _write(path: Path, text: str, version: int) -> None:
    """``text`` as the file, with a stamp of its own whatever the file system's clock resolution."""
    path.write_text(text)
    os.utime(path, ns=(version * 1_000_000_000, version * 1_000_000_000))


def _urls(targets: list[TargetInfo]) -> list[str]:
    return [t.url for t in targets]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    form=st.sampled_from(sorted(FORMS)),
    before=st.integers(2, 8),
    after=st.integers(0, 8),
    data=st.data(),
)
def test_a_file_read_while_it_is_written_never_drops_a_target(
    tmp_path_factory, form: str, before: int, after: int, data: st.DataObject
) -> None:
    """The generator rewrites the file in place (``gen > targets.yaml``, no rename) from ``before`` targets to
    ``after`` (some dropped, some new), and kvpilot reads it once a tick at any number of points of the write."""
    path = tmp_path_factory.mktemp("settle") / "targets.yaml"
    clock = VirtualClock(0.0)
    _write(path, FORMS[form](_targets(before)), 1)
    # a write caught at up to six reads (30 s): no longest wait here, which would apply the newest list read whole
    # once changes have waited it (test_a_file_that_changes_at_every_read_is_applied_within_the_longest_wait)
    disc = StaticFileDiscovery(path, settle_s=SETTLE_S, max_wait_s=math.inf, monotonic=clock.monotonic)
    old = disc.current()
    new_text = FORMS[form](_targets(after, start=before // 2))
    cuts = data.draw(st.lists(st.integers(1, len(new_text) - 1), min_size=1, max_size=6, unique=True).map(sorted))
    for version, cut in enumerate(cuts, start=2):
        _write(path, new_text[:cut], version)
        assert disc.current() == old, (form, cut, new_text[:cut])  # cut anywhere: every target kept as it was
        clock.advance(TICK_S)
    _write(path, new_text, len(cuts) + 2)
    new = [TargetInfo(**t) for t in _targets(after, start=before // 2)]
    assert disc.current() == old  # the whole new list: applied once the file stays as it is
    clock.advance(SETTLE_S)
    assert disc.current() == new


def test_a_removal_is_applied_once_the_file_stays_unchanged_for_the_settle_time(tmp_path: Path) -> None:
    path = tmp_path / "targets.yaml"
    clock = VirtualClock(0.0)
    _write(path, FORMS["yaml"](_targets(3)), 1)
    disc = StaticFileDiscovery(path, settle_s=SETTLE_S, monotonic=clock.monotonic)
    _write(path, FORMS["yaml"](_targets(2)), 2)  # one target removed for real
    assert len(disc.current()) == 3
    clock.advance(SETTLE_S / 2)
    assert len(disc.current()) == 3  # not yet: the file could still be written
    clock.advance(SETTLE_S / 2)
    assert _urls(disc.current()) == [t["url"] for t in _targets(2)]
    assert disc.last_error is None
    assert disc.kept_total == 0
    _write(path, FORMS["yaml"](_targets(4)), 3)  # targets added wait too: a cut inside the last one makes a wrong one
    assert len(disc.current()) == 2
    clock.advance(SETTLE_S)
    assert len(disc.current()) == 4


def test_the_same_list_written_again_whole_keeps_its_wait(tmp_path: Path) -> None:
    """A generator that rewrites the file every few seconds: each read finds a new stamp, the same size and list."""
    path = tmp_path / "targets.yaml"
    clock = VirtualClock(0.0)
    _write(path, FORMS["yaml"](_targets(1)), 1)
    disc = StaticFileDiscovery(path, settle_s=SETTLE_S, monotonic=clock.monotonic)
    for version in range(2, 5):
        _write(path, FORMS["yaml"](_targets(2)), version)
        assert len(disc.current()) == (2 if version == 4 else 1), version
        clock.advance(SETTLE_S / 2)


def test_a_change_meanwhile_starts_the_settle_time_again(tmp_path: Path) -> None:
    path = tmp_path / "targets.yaml"
    clock = VirtualClock(0.0)
    _write(path, FORMS["yaml"](_targets(4)), 1)
    disc = StaticFileDiscovery(path, settle_s=SETTLE_S, monotonic=clock.monotonic)
    _write(path, FORMS["yaml"](_targets(2)), 2)
    assert len(disc.current()) == 4
    clock.advance(SETTLE_S)
    _write(path, FORMS["yaml"](_targets(3)), 3)  # written again before the next read: a new list, a new wait
    assert len(disc.current()) == 4
    clock.advance(SETTLE_S)
    assert len(disc.current()) == 3


def test_a_file_that_does_not_parse_keeps_the_targets_counted_and_said(tmp_path: Path) -> None:
    path = tmp_path / "targets.yaml"
    _write(path, FORMS["json"](_targets(3)), 1)
    disc = StaticFileDiscovery(path, settle_s=SETTLE_S, monotonic=VirtualClock(0.0).monotonic)
    text = FORMS["json"](_targets(3))
    _write(path, text[: len(text) // 2], 2)
    assert len(disc.current()) == 3
    assert len(disc.current()) == 3  # the same cut file is not read again
    assert disc.kept_total == 1
    assert disc.last_error is not None
    assert "invalid YAML" in disc.last_error


def test_a_file_that_changes_at_every_read_is_applied_within_the_longest_wait(tmp_path: Path) -> None:
    """A generator rewriting the file (by rename, whole) at each pod change, faster than the tick: the file never holds
    still between two reads. Its newest list is applied once changes have waited ``max_wait_s``, and again each time
    they have waited that long - before (c991605), a list growing by a target a tick was never applied (29 ticks: the
    3 targets of the start against 32 in the file; session 29 helper F's review)."""
    path = tmp_path / "targets.yaml"
    clock = VirtualClock(0.0)
    _write(path, FORMS["yaml"](_targets(3)), 1)
    disc = StaticFileDiscovery(path, settle_s=SETTLE_S, max_wait_s=30.0, monotonic=clock.monotonic)
    seen = []
    for version in range(2, 31):
        clock.advance(TICK_S)
        _write(path, FORMS["yaml"](_targets(version + 2)), version)  # one more target each tick
        seen.append(len(disc.current()))
    # the first change is read at 5 s; from 35 s (30 s of waiting) the newest list read is applied, and so on
    assert seen[:6] == [3] * 6
    assert seen[6] == 10  # at 35 s: the list read then, whole
    assert seen[-1] >= 31 - 6  # never more than the longest wait behind
    assert max(b - a for a, b in itertools.pairwise(seen)) <= 7
    assert disc.last_error is None


def test_the_longest_wait_is_no_shorter_than_the_settle_time(tmp_path: Path) -> None:
    path = tmp_path / "targets.yaml"
    _write(path, FORMS["yaml"](_targets(1)), 1)
    with pytest.raises(ValueError, match="max_wait_s"):
        StaticFileDiscovery(path, settle_s=5.0, max_wait_s=1.0)
