"""One page of a list, the same shape for every resource."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

T = TypeVar("T")

MAX_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: Sequence[T]
    total: int
    limit: int
    offset: int

    @property
    def next_offset(self) -> int | None:
        nxt = self.offset + len(self.items)
        return nxt if nxt < self.total else None


@dataclass(frozen=True, slots=True)
class KeysetPage(Generic[T]):
    """One page of a list that only grows (decisions), read from a position instead of an offset: each page costs
    its own rows whatever the list's length, so it carries no total (counting every row is what it avoids)."""

    items: Sequence[T]
    limit: int
    next_after: tuple[float, int] | None  # the last item's (timestamp, id) when more follow, else None


def check_window(limit: int, offset: int) -> None:
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")


def paginate(session: Session, stmt: Select[Any], *, limit: int, offset: int) -> tuple[list[Any], int]:
    """Rows of ``stmt`` in the window and the total count of the unwindowed query."""
    check_window(limit, offset)
    total = session.scalar(select(func.count()).select_from(stmt.order_by(None).subquery())) or 0
    rows = list(session.scalars(stmt.limit(limit).offset(offset)))
    return rows, int(total)
