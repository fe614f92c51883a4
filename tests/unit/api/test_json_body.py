"""Every route that takes a JSON body refuses a key given twice (api.json_body): a router added later without
``route_class=JSONBodyRoute`` would read ``{"a": 1, "a": 2}`` as ``{"a": 2}`` again."""

from __future__ import annotations

from fastapi.routing import APIRoute

from api.json_body import JSONBodyRoute
from api.main import ROUTERS


def test_every_route_with_a_body_refuses_duplicate_keys() -> None:
    with_body = [
        (route.path, type(route).__name__)
        for module in ROUTERS
        for route in module.router.routes
        if isinstance(route, APIRoute) and route.body_field is not None
    ]
    assert len(with_body) >= 5  # targets, drains, approve, cancel, acknowledge
    assert [r for r in with_body if r[1] != JSONBodyRoute.__name__] == []
