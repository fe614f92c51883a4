"""GET /v1/decisions against a real SQLite store holding many decisions: pages by cursor that cost the same however
many decisions are kept, every decision served once, and no database connection opened per request."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event, insert

from store.db import transaction
from store.models import DecisionRow
from tests.unit.api.conftest import NOW, READ, FakeRuntime, auth, make_client

R = auth(READ)
DEPLOYMENTS = ("llm/chat", "llm/code", "llm/embed")


def _engine(rt: FakeRuntime) -> Engine:
    engine: Engine = rt.sessions.kw["bind"]
    return engine


def _store(rt: FakeRuntime, n: int) -> None:
    """``n`` decisions, as a tick writes them: every deployment at the same timestamp, reasons alternating."""
    rows: list[dict[str, object]] = [
        {
            "deployment": DEPLOYMENTS[i % 3],
            "timestamp": NOW - 10_000 + (i // 3) * 5.0,
            "current_replicas": 2,
            "ready_replicas": 2,
            "desired_replicas": 2,
            "warm_pool": 0,
            "reason": ("steady", "reactive")[(i // 3) % 2],
            "message": f"row {i}",
            "forecast": {},
        }
        for i in range(n)
    ]
    with transaction(rt.sessions) as s:
        s.execute(insert(DecisionRow), rows)


def _walk(client: TestClient, query: dict[str, Any]) -> Iterator[dict[str, Any]]:
    params = dict(query)
    while True:
        r = client.get("/v1/decisions", params=params, headers=R)
        assert r.status_code == 200, r.text
        body = r.json()
        assert "total" not in body
        yield body
        if body["next_cursor"] is None:
            return
        params["cursor"] = body["next_cursor"]


@pytest.mark.parametrize(
    "query",
    [
        {"limit": 7},  # pages end inside a timestamp's ties and start again within them
        {"limit": 3},  # a page exactly one tick wide
        {"limit": 1000},  # one page holds everything
        {"limit": 4, "deployment": "llm/code"},  # the deployment's index
        {"limit": 5, "reason": "reactive"},  # a filter no index serves
        {"limit": 6, "since": NOW - 9_950},  # bounded below
        {"limit": 2, "deployment": "llm/embed", "since": NOW - 9_900, "reason": "steady"},  # all at once
    ],
)
def test_cursor_serves_every_decision_once_newest_first(runtime: FakeRuntime, query: dict[str, Any]) -> None:
    _store(runtime, 120)
    client = make_client(runtime)
    pages = list(_walk(client, query))
    served = [(d["timestamp"], d["message"]) for p in pages for d in p["items"]]
    everything = next(_walk(client, {k: v for k, v in query.items() if k != "limit"} | {"limit": 1000}))["items"]
    assert served == [(d["timestamp"], d["message"]) for d in everything]
    assert len(set(served)) == len(served)
    assert [t for t, _ in served] == sorted((t for t, _ in served), reverse=True)
    assert all(len(p["items"]) == query["limit"] for p in pages[:-1])
    row_ids = [int(m.removeprefix("row ")) for _, m in served if m.startswith("row ")]
    expected = sorted(
        (
            i
            for i in range(120)
            if query.get("deployment", DEPLOYMENTS[i % 3]) == DEPLOYMENTS[i % 3]
            and query.get("reason", ("steady", "reactive")[(i // 3) % 2]) == ("steady", "reactive")[(i // 3) % 2]
            and NOW - 10_000 + (i // 3) * 5.0 >= query.get("since", 0)
        ),
        key=lambda i: (NOW - 10_000 + (i // 3) * 5.0, i),
        reverse=True,
    )
    assert row_ids == expected  # newest first, ties newest row first


def _vm_steps(engine: Engine) -> list[int]:
    """SQLite virtual-machine instructions run on the engine's connections, in hundreds: the work of a query,
    whatever the machine's speed."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    event.listen(engine, "checkout", lambda conn, _record, _proxy: conn.set_progress_handler(count, 100))
    return steps


@pytest.mark.parametrize(
    "path",
    [
        "/v1/decisions?limit=10",  # the newest page, as a dashboard polls it
        "/v1/decisions?limit=10&deployment=llm/code",  # one deployment's
    ],
)
def test_a_page_costs_the_same_however_many_decisions_are_kept(runtime: FakeRuntime, path: str) -> None:
    client = make_client(runtime)
    steps = _vm_steps(_engine(runtime))
    statements: list[str] = []
    event.listen(_engine(runtime), "before_cursor_execute", lambda _c, _cur, sql, *_: statements.append(sql))
    first, later = [], []
    for n in (300, 30_000):  # 30,000: 100 deployments' decisions of five hours at the once-a-minute minimum
        _store(runtime, n)
        steps[0] = 0
        statements.clear()
        page = client.get(path, headers=R).json()
        first.append(steps[0])
        # one bounded read: SQLite counts a whole table in one instruction (reading every page), so steps miss it
        reads = [sql for sql in statements if not sql.startswith(("BEGIN", "PRAGMA"))]  # transaction begins (store.db)
        assert [("LIMIT" in sql, "count(" in sql.lower()) for sql in reads] == [(True, False)], statements
        steps[0] = 0
        assert client.get(path, params={"cursor": page.get("next_cursor")}, headers=R).status_code == 200
        later.append(steps[0])
    # counting the deployment's kept rows for a total, or skipping rows by OFFSET, grows with them (x100 here)
    assert first[1] <= 2 * first[0] + 10, first
    assert later[1] <= 2 * later[0] + 10, later


def test_requests_reuse_the_store_connection(runtime: FakeRuntime) -> None:
    client = make_client(runtime)
    opened: list[object] = []
    event.listen(_engine(runtime), "connect", lambda conn, _record: opened.append(conn))
    for _ in range(20):
        assert client.get("/v1/decisions?limit=10", headers=R).status_code == 200
    assert len(opened) <= 1  # none when the fixture's writes left one pooled; one file open per request before


@pytest.mark.parametrize(
    ("query", "detail"),
    [
        ("cursor=abc", "should match pattern"),  # not a position
        ("cursor=1.5_1234567890123456789", "should match pattern"),  # beyond any row id
        ("cursor=1.5_", "should match pattern"),  # no row id
        ("cursor=27+82451_3", "should match pattern"),  # not a number
        ("offset=100", "paged by cursor"),  # an offset would be silently ignored otherwise
    ],
)
def test_bad_cursors_and_offsets_are_refused(client: TestClient, query: str, detail: str) -> None:
    r = client.get(f"/v1/decisions?{query}", headers=R)
    assert r.status_code == 422
    (error,) = r.json()["detail"]  # FastAPI's own shape, as the OpenAPI schema says
    assert detail in error["msg"]
    assert error["loc"] == ["query", query.split("=")[0]]
