"""UvicornServer's housekeeping: once a second instead of uvicorn's ten (issue 17), with what it did kept — the Date
header still refreshed every time it runs, and ``should_exit`` still ending the server at once."""

from __future__ import annotations

import asyncio
import threading

import pytest
import uvicorn

from kvpilot.runtime import runner
from kvpilot.runtime.runner import UvicornServer
from tests.helpers.poll import until


def _server() -> tuple[UvicornServer, list[int]]:
    server = UvicornServer(uvicorn.Config(app=lambda scope, receive, send: None, log_config=None, lifespan="off"))
    server.config.load()  # encoded_headers, as serve() would
    counters: list[int] = []
    on_tick = server.on_tick

    async def counting(counter: int) -> bool:
        counters.append(counter)
        return await on_tick(counter)

    server.on_tick = counting  # type: ignore[method-assign]
    return server, counters


async def test_idle_housekeeping_wakes_once_a_second_not_ten_times() -> None:
    # uvicorn's own main_loop calls on_tick every 0.1 s: 4-5 times in 0.45 s; ours once at start, then after 1 s
    server, counters = _server()
    task = asyncio.create_task(server.main_loop())
    await asyncio.sleep(0.45)
    assert counters == [0]
    server.should_exit = True
    await asyncio.wait_for(task, 1)


@pytest.mark.parametrize("from_thread", [False, True])
async def test_should_exit_ends_the_loop_at_once(monkeypatch: pytest.MonkeyPatch, from_thread: bool) -> None:
    # kvpilot's SIGTERM handler sets it on the loop; the demo and tests may set it from elsewhere. Housekeeping a
    # minute apart tells "at once" from "at the next housekeeping" with room for a loaded runner (at 1 s apart, the
    # bound of 0.2 s was once 0.204 s there).
    monkeypatch.setattr(runner, "HOUSEKEEPING_S", 60.0)
    server, counters = _server()
    task = asyncio.create_task(server.main_loop())
    await until(lambda: counters == [0], what="the first housekeeping")
    if from_thread:
        setter = threading.Thread(target=setattr, args=(server, "should_exit", True))
        setter.start()
        setter.join()
    else:
        server.should_exit = True
    await asyncio.wait_for(task, runner.HOUSEKEEPING_S / 2)  # unwoken, it would end at the next housekeeping
    assert counters == [0, 10]  # the one call the flag woke


async def test_should_exit_set_before_the_loop_starts_ends_it_at_its_first_check() -> None:
    server, counters = _server()
    server.should_exit = True
    await asyncio.wait_for(server.main_loop(), 0.5)
    assert counters == [0]


async def test_every_call_refreshes_the_date_header(monkeypatch: pytest.MonkeyPatch) -> None:
    # uvicorn refreshes the Date header when counter % 10 == 0, which was every 10th call; now it is every call
    monkeypatch.setattr(runner, "HOUSEKEEPING_S", 0.01)
    server, counters = _server()
    task = asyncio.create_task(server.main_loop())
    # three calls, however long they take to come (0.08 s of sleep was once two calls on a loaded runner)
    await until(lambda: len(counters) >= 3, what="three housekeeping calls")
    server.should_exit = True
    await asyncio.wait_for(task, 10)
    assert all(c % 10 == 0 for c in counters)
    assert len(set(counters)) == len(counters)
    assert any(name == b"date" for name, _ in server.server_state.default_headers)
