"""Request bodies read as JSON with every key given once.

Python's JSON reader (and FastAPI through it) keeps the last of a key given twice: ``{"url": "a", "url": "b"}``
added target b. Which one a client meant is ambiguous (another reader of the same bytes, a proxy or an audit log,
may keep the first), so such a body is refused with a 422 naming the key, as the settings file refuses a
duplicated key. Every router whose routes take a body uses ``JSONBodyRoute``.
"""

from __future__ import annotations

import email.message
import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute


class DuplicateKey(ValueError):
    """A JSON object gave ``key`` more than once."""

    def __init__(self, key: str) -> None:
        self.key = key if len(key) <= 64 else f"{key[:64]}..."
        super().__init__(f"the key {self.key!r} is given more than once in one object; send each key once")


def _once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return out


def loads_once(data: str | bytes) -> Any:
    """``json.loads`` that raises DuplicateKey (a ValueError) for a key given twice in any object: for every JSON a
    user hands kvpilot (request bodies, `kvpilot detect --inject`)."""
    return json.loads(data, object_pairs_hook=_once)


def _is_json(content_type: str | None) -> bool:
    """Whether FastAPI reads a body of this type as JSON (application/json or application/*+json)."""
    if not content_type:
        return False  # FastAPI's strict_content_type (its default): such a body is not read as JSON
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


class _Request(Request):
    async def refuse_duplicate_keys(self) -> None:
        """Read the body as JSON once, keeping what was read for FastAPI; a key given twice in any object raises
        RequestValidationError (422). A body that is not JSON is left for FastAPI to refuse in its own words."""
        if not _is_json(self.headers.get("content-type")):
            return
        body = await self.body()
        if not body:
            return
        try:
            self._json = loads_once(body)
        except DuplicateKey as e:
            raise RequestValidationError(
                [{"type": "json_duplicate_key", "loc": ("body", e.key), "msg": str(e), "input": e.key}]
            ) from None
        except json.JSONDecodeError:  # not JSON: FastAPI says where (422 json_invalid)
            return
        except (ValueError, RecursionError) as e:  # FastAPI said only "There was an error parsing the body" (400)
            raise RequestValidationError([{"type": "json_invalid", "loc": ("body",), "msg": _unreadable(e)}]) from None


def _unreadable(error: ValueError | RecursionError) -> str:
    """Why a body that is JSON-shaped could not be read, in words: the three ways the reader fails besides a syntax
    error, each of which FastAPI answered with a bare 400."""
    if isinstance(error, UnicodeDecodeError):
        return f"the body is not UTF-8 text (byte 0x{error.object[error.start]:02x} at {error.start}); send UTF-8 JSON"
    if isinstance(error, RecursionError):
        return "the body's JSON is nested too deeply to read"
    return f"the body's JSON cannot be read: {str(error)[:200]}"  # e.g. a number of more than 4300 digits


class JSONBodyRoute(APIRoute):
    """An APIRoute whose JSON body is refused when a key is given twice (see the module's docstring)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def once(request: Request) -> Response:
            strict = _Request(request.scope, request.receive)
            await strict.refuse_duplicate_keys()
            return await handler(strict)

        return once
