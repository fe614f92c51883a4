"""The same page shape for in-memory lists (the live snapshot) and store queries."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from api import schemas
from api.deps import PageParams
from store.repo.page import Page as StorePage

T = TypeVar("T")
U = TypeVar("U")


def of_list(items: Sequence[T], p: PageParams, convert: Callable[[T], Any]) -> schemas.Page[Any]:
    window = items[p.offset : p.offset + p.limit]
    nxt = p.offset + len(window)
    return schemas.Page(
        items=[convert(i) for i in window],
        total=len(items),
        limit=p.limit,
        offset=p.offset,
        next_offset=nxt if nxt < len(items) else None,
    )


def of_store(page: StorePage[T], convert: Callable[[T], Any]) -> schemas.Page[Any]:
    return schemas.Page(
        items=[convert(i) for i in page.items],
        total=page.total,
        limit=page.limit,
        offset=page.offset,
        next_offset=page.next_offset,
    )
