"""How often a request is handed to a worker thread and back (issue 17). Each hand-off wakes a thread and then the
event loop again, and during a tick each wake-up waits for the GIL and for a CPU: at 10,000 replicas on a loaded
2-core VM, GET /v1/decisions with five hand-offs had a p99 of 77-81 ms during ticks against 24-33 ms for /healthz,
which makes none (BENCHMARKS.md, "Fleet scale through Prometheus")."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import anyio.to_thread
import pytest

from tests.unit.api.conftest import ADMIN, READ, FakeRuntime, auth, make_client


@pytest.fixture
def handoffs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The functions FastAPI and Starlette ran in their thread pool, in order."""
    ran: list[str] = []
    real = anyio.to_thread.run_sync

    async def counted(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        called = func
        while isinstance(called, functools.partial):  # Starlette hands FastAPI's calls over as partials
            called = called.func
        ran.append(getattr(called, "__name__", type(called).__name__))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    return ran


@pytest.mark.parametrize(
    ("path", "headers", "most"),
    [
        ("/v1/decisions?limit=10", auth(READ), 1),  # the store read only: dependencies, answer validation on the loop
        ("/v1/decisions?limit=10&cursor=1700000000.0_5", auth(READ), 1),  # the cursor is parsed on the loop too
        ("/v1/decisions?limit=10", auth(ADMIN), 1),  # whichever scope reads
        ("/v1/deployments", auth(READ), 1),  # the other routes that read the store (api.handoff.in_thread)
        ("/v1/deployments/llm/chat", auth(READ), 1),
        ("/v1/deployments/llm/chat/history", auth(READ), 1),
        ("/v1/findings", auth(READ), 1),
        ("/v1/drains", auth(READ), 1),
        ("/healthz", {}, 0),  # on the loop, always
    ],
)
def test_a_request_is_handed_to_a_thread_at_most_for_its_store_read(
    runtime: FakeRuntime, handoffs: list[str], path: str, headers: dict[str, str], most: int
) -> None:
    client = make_client(runtime)
    handoffs.clear()  # the test client's own start-up
    r = client.get(path, headers=headers)
    assert r.status_code == 200, r.text
    assert len(handoffs) <= most, handoffs


def test_shared_dependencies_run_on_the_loop(runtime: FakeRuntime, handoffs: list[str]) -> None:
    """A route on every shared dependency (auth, the runtime, the store's sessions, paging) hands off only what its
    handler itself does: the dependencies add none."""
    client = make_client(runtime)
    handoffs.clear()
    assert client.get("/v1/deployments", headers=auth(READ)).status_code == 200
    names = set(handoffs)
    assert not names & {"require_read", "require_admin", "get_runtime", "get_sessions", "page_params"}, handoffs


def test_a_change_through_the_store_is_handed_off_once(runtime: FakeRuntime, handoffs: list[str]) -> None:
    client = make_client(runtime)
    handoffs.clear()
    r = client.post("/v1/drains", json={"node": "node-0", "reason": "xid 79"}, headers=auth(ADMIN))
    assert r.status_code == 201, r.text
    assert handoffs == ["request_drain"]  # the handler itself, in the pool: never the store on the loop
