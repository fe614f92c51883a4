"""Findings keyed by their stable ``Finding.id``: each tick the detectors' active set is upserted and the rest
close. An operator's acknowledgement survives until the condition clears, and its record survives that too."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from detectors.finding import Finding, Severity, Subject
from store.errors import InvalidTransition, NotFound
from store.fields import fit
from store.models import FindingRow
from store.repo.conflict import insert_or_skip
from store.repo.decisions import finite
from store.repo.page import Page, paginate

log = logging.getLogger(__name__)

# ``closes(deployment, replica, node, gpu, quiet_s)``: whether a live finding missing from a writer's active set is
# that writer's to close; ``quiet_s`` is how long ago any writer last reported it (now - its ``last_seen``).
Closes = Callable[[str, str, str, str, float], bool]


@dataclass(frozen=True, slots=True)
class Reporter:
    """A sharded writer: its name (``ha.identity``) and how long another instance's view of a finding, as severe or
    more, holds against its own (``collector.stale_after_s``, the time a finding stays open unreported)."""

    name: str
    holds_s: float


# Evidence a sharded writer adds to the view it stores: whose it is and when that instance last reported it.
REPORTED_BY = "reported_by"
REPORTED_AT = "reported_at"
_RANK = {"info": 0, "warning": 1, "critical": 2}

OPEN = "open"
ACKNOWLEDGED = "acknowledged"
CLOSED = "closed"
STATES = (OPEN, ACKNOWLEDGED, CLOSED)
LIVE = (OPEN, ACKNOWLEDGED)


def _json_safe(evidence: Mapping[str, float | str | None]) -> dict[str, float | str | None]:
    """NaN and infinity are not JSON; they become None ("unknown"), which is what they mean here. Text is made
    storable (no NUL, no lone surrogate) and bounded."""
    out: dict[str, float | str | None] = {}
    for k, v in evidence.items():
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        elif isinstance(v, str):
            v = fit(v, 2000)
        out[fit(k, 128)] = v
    return out


def to_finding(row: FindingRow) -> Finding:
    """The finding a row stores; ``ValueError`` saying why for a row this version cannot read (another version or a
    hand wrote it): a severity it does not know, evidence that is not an object. Evidence values that are neither a
    finite number, text nor null are left out, as NaN is when written."""
    try:
        severity = Severity(row.severity)
    except ValueError:
        known = ", ".join(s.value for s in Severity)
        raise ValueError(f"severity {row.severity!r} is not one this kvpilot knows ({known})") from None
    evidence = {} if row.evidence is None else row.evidence
    if not isinstance(evidence, dict):
        raise ValueError(f"evidence is a JSON {type(evidence).__name__}, not an object")
    numbers = finite(evidence)
    return Finding(
        kind=row.kind,
        severity=severity,
        subject=Subject(deployment=row.deployment, replica=row.replica, node=row.node, gpu=row.gpu),
        since=row.since,
        summary=row.summary,
        evidence={k: numbers.get(k, v) for k, v in evidence.items() if k in numbers or v is None or isinstance(v, str)},
        action=row.action,
    )


def _refresh(row: FindingRow, f: Finding, now: float, reporter: Reporter | None = None) -> None:
    row.last_seen = now
    if reporter is not None and _holds(row, f, now, reporter):
        return
    row.severity = fit(f.severity.value, 16)
    row.summary = fit(f.summary, 10_000)
    evidence = _json_safe(f.evidence)
    if reporter is not None:
        evidence.update({REPORTED_BY: fit(reporter.name, 128), REPORTED_AT: now})
    row.evidence = evidence
    row.action = fit(f.action, 32)


def _holds(row: FindingRow, f: Finding, now: float, reporter: Reporter) -> bool:
    """Whether a live row keeps another instance's view (severity, summary, evidence, action) rather than take
    ``reporter``'s ``f``: it does while that instance reported it less than ``holds_s`` ago and it is as severe or
    more. Several instances read one node's GPUs and see them differently (only a replica's owner sees it hang:
    critical, drain; another sees the GPU's XID alone: warning, reset), and each wrote its own view over the
    other's every tick: the severity, action and summary an operator read flapped. An instance's own view always
    replaces its earlier one (a hang that clears lowers it at once)."""
    seen = row.evidence if isinstance(row.evidence, dict) else {}  # not an object: a row another version wrote
    by, at = seen.get(REPORTED_BY), seen.get(REPORTED_AT)
    if not isinstance(by, str) or by == reporter.name or not isinstance(at, int | float):
        return False
    return now - at < reporter.holds_s and _RANK.get(row.severity, -1) >= _RANK[f.severity.value]


def upsert_findings(
    *,
    session: Session,
    active: Sequence[Finding],
    now: float,
    closes: Closes | None = None,
    reporter: Reporter | None = None,
) -> None:
    """Make the store's live findings equal to ``active``: new ones open, known ones refresh, missing ones close.

    A finding that recurs after it closed opens a new episode (its acknowledgement belonged to the old one).
    ``closes(deployment, replica, node, gpu, quiet_s)``: whether a live finding about that subject missing from
    ``active``, last reported by any writer ``quiet_s`` ago, is this writer's to close (None: every one). A sharded
    instance sees only its deployments: it closed every other shard's findings each tick, and their instance opened
    them again the next, as new episodes without their acknowledgement. ``reporter`` (sharding; None: this writer's
    view replaces any other's, as unsharded): several instances report one finding, the most severe recent view
    is kept (``_holds``).
    """
    by_id = {f.id: f for f in active}
    if closes is None:
        # one SELECT a tick for both sets: the active ones' rows (closed ones reopen) and every live row (those not
        # active close)
        wanted = FindingRow.state.in_(LIVE) | FindingRow.id.in_(list(by_id)) if by_id else FindingRow.state.in_(LIVE)
        rows = {r.id: r for r in session.scalars(select(FindingRow).where(wanted))}
        stale = [r for fid, r in rows.items() if fid not in by_id and r.state in LIVE]
    else:
        rows, stale = _rows_closing(session, by_id, now, closes)
    missing = [f for fid, f in by_id.items() if fid not in rows]
    if missing:
        _open(session, missing, now)
        rows.update(
            (r.id, r) for r in session.scalars(select(FindingRow).where(FindingRow.id.in_([f.id for f in missing])))
        )
    for fid, f in by_id.items():
        row = rows[fid]
        if row.state == CLOSED:
            row.state = OPEN
            row.since = f.since
            row.closed_at = None
            row.acknowledged_at = row.acknowledged_by = row.acknowledge_note = None
            row.evidence = {}  # the last episode's view holds nothing against this one's
        _refresh(row, f, now, reporter)
    for row in stale:
        row.state = CLOSED
        row.closed_at = now


def _rows_closing(
    session: Session, by_id: Mapping[str, Finding], now: float, closes: Closes
) -> tuple[dict[str, FindingRow], list[FindingRow]]:
    """A sharded writer's rows: the active findings' (closed ones reopen) and the live ones missing from them that
    ``closes`` gives it, with those (``stale``). Every instance of a sharded fleet writes one store, which holds every
    shard's live findings (and a store an instance kept alone holds those of shards it held before); their subjects
    are read as plain columns and only the rows this writer refreshes or closes are loaded whole. Loading every live
    row of the fleet each tick made each instance pay for the whole fleet's findings, not its shard's (issue 17)."""
    r = FindingRow
    light = select(r.id, r.deployment, r.replica, r.node, r.gpu, r.last_seen).where(r.state.in_(LIVE))
    closing = [
        fid
        for fid, deployment, replica, node, gpu, last_seen in session.execute(light)
        if fid not in by_id and closes(deployment, replica, node, gpu, now - last_seen)
    ]
    wanted = [*by_id, *closing]
    rows = {r.id: r for r in session.scalars(select(FindingRow).where(FindingRow.id.in_(wanted)))} if wanted else {}
    # a row another writer closed between the two reads is left closed
    stale = [rows[fid] for fid in closing if fid in rows and rows[fid].state in LIVE]
    return rows, stale


def _open(session: Session, found: Sequence[Finding], now: float) -> None:
    """Rows for findings no row holds yet, open; one another writer inserted meanwhile is left as it is
    (``store.repo.conflict``; the caller reads it back and refreshes it, ``_holds`` deciding whose view stays)."""
    values = [
        {  # subjects come from scraped labels: fitted, never refused by the store
            "id": f.id,
            "kind": fit(f.kind, 64),
            "deployment": fit(f.subject.deployment, 253),
            "replica": fit(f.subject.replica, 253),
            "node": fit(f.subject.node, 253),
            "gpu": fit(f.subject.gpu, 64),
            "since": f.since,
            "state": OPEN,
            "severity": fit(f.severity.value, 16),
            "summary": "",  # _refresh writes the view
            "evidence": {},
            "last_seen": now,
        }
        for f in found
    ]
    session.execute(insert_or_skip(session, FindingRow, [FindingRow.id]), values)


def open_findings(*, session: Session) -> list[Finding]:
    """Live findings (open or acknowledged): what a restarted kvpilot resumes its hysteresis from. A row this version
    cannot read (``to_finding``) is skipped with an error naming it: one row never stops a start or a takeover."""
    out: list[Finding] = []
    for row in session.scalars(select(FindingRow).where(FindingRow.state.in_(LIVE)).order_by(FindingRow.since)):
        try:
            out.append(to_finding(row))
        except ValueError as e:
            log.error(
                "stored finding %s skipped: %s; it is not resumed (detectors open it again if it holds)", row.id, e
            )
    return out


def get_finding(*, session: Session, finding_id: str) -> FindingRow:
    row = session.get(FindingRow, finding_id)
    if row is None:
        raise NotFound("finding", finding_id)
    return row


def acknowledge_finding(*, session: Session, finding_id: str, by: str, note: str, now: float) -> FindingRow:
    """The finding's episode read acknowledged, unless it closed (``InvalidTransition``). The write is conditional on
    the episode read still being live: on PostgreSQL (read committed) the loop may close it between this read and
    the write, and the row as read, written back, acknowledged a finding that had ended (shown live until the next
    tick closed it again), or an episode that opened since (its ``since``) that the operator never saw."""
    row = get_finding(session=session, finding_id=finding_id)
    if row.state == CLOSED:
        raise InvalidTransition("finding", finding_id, row.state, ACKNOWLEDGED)
    done = session.execute(
        update(FindingRow)
        .where(FindingRow.id == finding_id, FindingRow.state != CLOSED, FindingRow.since == row.since)
        .values(state=ACKNOWLEDGED, acknowledged_at=now, acknowledged_by=by, acknowledge_note=note),
        execution_options={"synchronize_session": False},
    )
    session.refresh(row)
    if getattr(done, "rowcount", 1) != 1:
        raise InvalidTransition("finding", finding_id, row.state, ACKNOWLEDGED)
    return row


def list_findings(
    *,
    session: Session,
    state: str | None = None,
    kind: str | None = None,
    severity: str | None = None,
    deployment: str | None = None,
    node: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> Page[FindingRow]:
    """Newest first; every filter is exact-match and optional."""
    stmt = select(FindingRow)
    for column, value in (
        (FindingRow.state, state),
        (FindingRow.kind, kind),
        (FindingRow.severity, severity),
        (FindingRow.deployment, deployment),
        (FindingRow.node, node),
    ):
        if value is not None:
            stmt = stmt.where(column == value)
    stmt = stmt.order_by(FindingRow.since.desc(), FindingRow.id)
    rows, total = paginate(session, stmt, limit=limit, offset=offset)
    return Page(rows, total, limit, offset)
