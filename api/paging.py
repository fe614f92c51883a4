"""The same page shape for in-memory lists (the live snapshot) and store queries; cursors for keyset pages."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Query
from fastapi.exceptions import RequestValidationError

from api import schemas
from api.deps import PageParams
from store.repo.page import KeysetPage
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


def of_keyset(page: KeysetPage[T], convert: Callable[[T], Any]) -> schemas.CursorPage[Any]:
    return schemas.CursorPage(
        items=[convert(i) for i in page.items],
        limit=page.limit,
        next_cursor=None if page.next_after is None else _cursor(*page.next_after),
    )


def _cursor(t: float, row_id: int) -> str:
    return f"{t!r}_{row_id}"  # repr: the float comes back exactly, so no row is skipped or served twice


# What _cursor writes (repr of a non-negative float, a row id); anything matching it parses, so the OpenAPI schema
# says exactly which cursors are accepted. A made-up one is only a position: its page is as true as any other.
CURSOR_PATTERN = r"^[0-9]{1,20}(\.[0-9]{1,20})?(e[+-][0-9]{1,3})?_[0-9]{1,18}$"


def parse_cursor(cursor: str) -> tuple[float, int]:
    """The position a ``next_cursor`` stands for; ``ValueError`` for a string not of ``CURSOR_PATTERN``'s form."""
    if re.fullmatch(CURSOR_PATTERN, cursor) is None:
        raise ValueError(f"cursor {cursor!r} is not one a page handed out: pass a page's next_cursor as it is")
    t, _, row_id = cursor.rpartition("_")
    return float(t), int(row_id)


def _refused(name: str, value: object, msg: str) -> RequestValidationError:
    """A 422 shaped as FastAPI's own, so the OpenAPI schema of every 422 stays true."""
    return RequestValidationError([{"type": "value_error", "loc": ("query", name), "msg": msg, "input": value}])


async def keyset_position(
    cursor: Annotated[
        str | None,
        Query(max_length=64, pattern=CURSOR_PATTERN, description="The previous page's `next_cursor`."),
    ] = None,
    offset: Annotated[int | None, Query(include_in_schema=False)] = None,
) -> tuple[float, int] | None:
    """Where a keyset page starts. An ``offset`` is refused rather than ignored: a client paging by offset would
    otherwise be served the first page again and again."""
    if offset is not None:
        raise _refused("offset", offset, "this list is paged by cursor: pass a page's next_cursor as cursor")
    if cursor is None:
        return None
    try:
        return parse_cursor(cursor)
    except ValueError as e:
        raise _refused("cursor", cursor, str(e)) from None


KeysetPosition = Annotated[tuple[float, int] | None, Depends(keyset_position)]
