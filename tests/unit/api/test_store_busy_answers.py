"""A change the store could not take in time is answered 503 with ``Retry-After`` (nothing applied, safe to retry),
whichever way it ran out: refused at SQLite's writer gate because the writes queued ahead would outlast its
request's deadline (``WritersQueued``), or still waiting when that deadline came (``DeadlinePassed``: at the gate, or
at its COMMIT). A handler that raised ``DeadlinePassed`` a moment before the request deadline's own 503 went out
was answered 500 ("Exception in ASGI application"): 2 of 400 POSTs at once on a starved CPU
(bench/store_writers.py), more often once writers waiting at the gate all give up at their deadline."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from store import repo
from store.errors import DeadlinePassed, WritersQueued
from tests.unit.api.conftest import ADMIN, auth

CASES = [
    # refused at once at the gate: try again when the writes ahead would be done (before: in a second, into the same
    # queue)
    (WritersQueued(40, 12.5), "13", "40 changes are already waiting for the store (about 12.5 s of writes); nothing "
     "in this request is applied, try again in 13 s"),
    (WritersQueued(3, 0.0), "1", "3 changes are already waiting for the store (about 0.0 s of writes)"),
    # a pace one long turn inflated (the moving average of a 10-minute turn, 40 queued): at most a minute, not hours
    (WritersQueued(40, 41 * 120.0), "60", "40 changes are already waiting for the store (about 4920.0 s of writes); "
     "nothing in this request is applied, try again in 60 s"),
    # its deadline came while it waited for its turn, or at its COMMIT
    (DeadlinePassed("the request timed out while its change waited for the store; nothing was applied"), "5",
     "the request timed out while its change waited for the store; nothing was applied"),
]  # fmt: skip


@pytest.mark.parametrize(("error", "retry_after", "detail"), CASES)
def test_a_change_the_store_could_not_take_in_time_is_a_503_to_retry(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, error: Exception, retry_after: str, detail: str
) -> None:
    def busy(**_: Any) -> Any:
        raise error

    monkeypatch.setattr(repo, "request_drain", busy)
    answer = client.post("/v1/drains", json={"node": "node-7"}, headers=auth(ADMIN))
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == retry_after
    assert answer.json()["detail"].startswith(detail)
    assert client.get("/v1/drains", params={"node": "node-7"}, headers=auth(ADMIN)).json()["total"] == 0
