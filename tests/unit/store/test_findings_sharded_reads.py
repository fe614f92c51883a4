"""A sharded writer's tick of findings loads whole only the rows it refreshes or closes: the store (one PostgreSQL for
every instance, or an instance's own that it shared out after holding every shard) holds the whole fleet's live
findings, and loading each of them every tick made every instance pay for the fleet's, not its shard's (issue 17)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from detectors.finding import Finding, Severity, Subject
from store import repo
from store.db import transaction
from store.models import FindingRow


def _down(deployment: str, n: int) -> Finding:
    return Finding(
        "target_down", Severity.WARNING, Subject(deployment=deployment, replica=f"r-{n}"), 10.0, f"r-{n} down"
    )


def _mine(deployment: str, *_: object) -> bool:
    return deployment.startswith("a/")


@contextmanager
def _loads() -> Iterator[list[str]]:
    """The ids of the finding rows the ORM loads whole meanwhile."""
    seen: list[str] = []

    def note(row: FindingRow, *_: object) -> None:
        seen.append(row.id)

    hook: tuple[type[FindingRow], str, Callable[..., None]] = (FindingRow, "load", note)
    event.listen(*hook)
    try:
        yield seen
    finally:
        event.remove(*hook)


def test_a_sharded_writer_loads_only_the_rows_it_refreshes_or_closes(factory: sessionmaker[Session]) -> None:
    others = [_down(f"b/d{n}", n) for n in range(40)]  # another shard's, live
    kept, gone, back = _down("a/x", 1), _down("a/x", 2), _down("a/y", 3)
    with transaction(factory) as s:
        repo.upsert_findings(session=s, active=[*others, kept, gone, back], now=20)
    with transaction(factory) as s:
        repo.upsert_findings(session=s, active=[*others, kept, gone], now=21)  # back closes
    with transaction(factory) as s:
        repo.acknowledge_finding(session=s, finding_id=kept.id, by="ops", note="seen", now=22)
    with transaction(factory) as s, _loads() as loaded:
        repo.upsert_findings(session=s, active=[kept, back], now=30, closes=_mine)  # gone closes, back reopens
    assert sorted(loaded) == sorted([kept.id, gone.id, back.id])  # none of the other shard's 40 rows
    with transaction(factory) as s:
        rows = {r.id: r for r in s.query(FindingRow)}
        assert (rows[kept.id].state, rows[kept.id].acknowledged_by, rows[kept.id].last_seen) == (
            "acknowledged",
            "ops",
            30,
        )
        assert (rows[gone.id].state, rows[gone.id].closed_at) == ("closed", 30)
        assert (rows[back.id].state, rows[back.id].last_seen, rows[back.id].closed_at) == ("open", 30, None)
        assert {(rows[f.id].state, rows[f.id].last_seen) for f in others} == {("open", 21)}  # untouched


def test_a_sharded_writer_with_nothing_active_closes_its_own_and_only_those(factory: sessionmaker[Session]) -> None:
    mine, theirs = _down("a/x", 1), _down("b/y", 2)
    with transaction(factory) as s:
        repo.upsert_findings(session=s, active=[mine, theirs], now=20)
    with transaction(factory) as s, _loads() as loaded:
        repo.upsert_findings(session=s, active=[], now=25, closes=_mine)
    assert loaded == [mine.id]
    with transaction(factory) as s:
        assert {f.id: repo.get_finding(session=s, finding_id=f.id).state for f in (mine, theirs)} == {
            mine.id: "closed",
            theirs.id: "open",
        }
