"""Per-minute roll-ups of each deployment's signals. Each tick folds its values into the minute's row as a
running mean (the maximum for ``kv_usage_max``), so a crash loses at most the tick in flight."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.fields import fit
from store.models import ROLLUP_SIGNALS, RollupRow
from store.repo.conflict import insert_or_skip

_MAX_SIGNALS = frozenset({"kv_usage_max"})


@dataclass(frozen=True, slots=True)
class RollupPoint:
    deployment: str
    t: float  # start of the minute, epoch seconds
    samples: int
    values: Mapping[str, float | None]


def _fold(old: float | None, new: float | None, n: int, *, keep_max: bool) -> float | None:
    if new is None:
        return old
    if old is None:
        return new
    return max(old, new) if keep_max else old + (new - old) / (n + 1)


def record_rollup(
    *,
    session: Session,
    deployment: str,
    t: float,
    signals: Mapping[str, float | None],
    read: Mapping[tuple[str, int], RollupRow | None] | None = None,
) -> None:
    """Fold ``signals`` into the minute's row of ``deployment``. ``read``: rows this session has already read, by
    (deployment as stored, minute), None for one it found absent; a row not in it is read here."""
    unknown = set(signals) - set(ROLLUP_SIGNALS)
    if unknown:
        raise ValueError(f"unknown roll-up signals {sorted(unknown)}; known: {', '.join(ROLLUP_SIGNALS)}")
    minute = int(t // 60)
    deployment = fit(deployment, 253)
    key = (deployment, minute)
    row = read[key] if read is not None and key in read else session.get(RollupRow, key)
    if row is None:  # the minute's first sample, unless another kvpilot wrote it meanwhile (store.repo.conflict)
        first = insert_or_skip(session, RollupRow, [RollupRow.deployment, RollupRow.minute])
        values = {"deployment": deployment, "minute": minute, "samples": 1, **signals}
        if session.execute(first.values(values).returning(RollupRow.minute)).first() is not None:
            return
        row = session.scalars(
            select(RollupRow).where(RollupRow.deployment == deployment, RollupRow.minute == minute)
        ).one()
    for name in ROLLUP_SIGNALS:
        if name in signals:
            setattr(row, name, _fold(getattr(row, name), signals[name], row.samples, keep_max=name in _MAX_SIGNALS))
    row.samples += 1


def load_rollups(*, session: Session, deployment: str | None = None, since: float = 0.0) -> list[RollupPoint]:
    """Oldest first: the series a forecaster warm-starts from."""
    stmt = select(RollupRow).where(RollupRow.minute >= int(since // 60))
    if deployment is not None:
        stmt = stmt.where(RollupRow.deployment == deployment)
    stmt = stmt.order_by(RollupRow.deployment, RollupRow.minute)
    return [
        RollupPoint(r.deployment, r.minute * 60.0, r.samples, {n: getattr(r, n) for n in ROLLUP_SIGNALS})
        for r in session.scalars(stmt)
    ]
