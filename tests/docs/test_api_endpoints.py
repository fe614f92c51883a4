"""docs/api.md's table of endpoints is the API's: every route the routers serve is a row, and every row a route, with
the method and path the router declares (query strings aside) and the scope its `Reader`/`Admin` dependency asks."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.routing import APIRoute

from api.deps import require_admin, require_read
from api.main import ROUTERS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "api.md"
_ROW = re.compile(r"^\| `(GET|POST|PUT|PATCH|DELETE) ([^`?]+)(?:\?[^`]*)?` \| ([^|]+) \|", re.M)


def _documented() -> dict[tuple[str, str], str]:
    """(method, path with `{…}` parameters as `{}`) -> scope, from the page's table."""
    return {(m, re.sub(r"\{[^}]+\}", "{}", path)): scope.strip() for m, path, scope in _ROW.findall(PAGE.read_text())}


def _scope(route: APIRoute) -> str:
    calls = {d.call for d in route.dependant.dependencies}
    return "admin" if require_admin in calls else "read" if require_read in calls else "—"


def _served() -> dict[tuple[str, str], str]:
    """(method, path) -> the scope its dependencies ask, for every route the routers declare."""
    return {
        (method, re.sub(r"\{[^}]+\}", "{}", route.path)): _scope(route)
        for module in ROUTERS
        for route in module.router.routes
        if isinstance(route, APIRoute)
        for method in route.methods
    }


def test_the_table_is_the_routes() -> None:
    documented, served = set(_documented()), set(_served())
    assert len(served) > 15  # the routers were read at all
    assert not served - documented, f"routes docs/api.md does not list: {sorted(served - documented)}"
    assert not documented - served, f"rows of docs/api.md no router serves: {sorted(documented - served)}"


def test_every_row_names_the_scope_the_route_asks() -> None:
    served = _served()
    assert set(served.values()) == {"—", "read", "admin"}  # the dependencies were found at all
    wrong = {key: (scope, served[key]) for key, scope in _documented().items() if served.get(key, scope) != scope}
    assert not wrong, f"(method, path): (the page's scope, the route's): {wrong}"
