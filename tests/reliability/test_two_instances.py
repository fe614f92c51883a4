"""Two kvpilots on one store (HA replicas behind one Service, or a second `kvpilot run` on the same file): a static
target added or removed through either is the same target in both, and two operators adding the same one at once get
a 201 and a 200, never the store's 503."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.reliability.conftest import Recorder, Store
from tests.reliability.harness import A, R, running

URLS = [f"http://10.7.0.{i}:8000/metrics" for i in range(1, 31)]


def _static(c: httpx.Client) -> set[str]:
    items = c.get("/v1/targets", params={"limit": 1000}, headers=R).json()["items"]
    return {t["url"] for t in items if t["static"]}


def _until(check: Callable[[], bool], timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def test_a_target_added_or_removed_through_one_instance_is_so_in_the_other(store: Store, record: Recorder) -> None:
    with running(store.url) as one, running(store.url) as two, one.client() as c1, two.client() as c2:
        clients = (c1, c2)

        def post(job: tuple[int, str]) -> int:
            return clients[job[0]].post("/v1/targets", json={"url": job[1]}, headers=A).status_code

        with ThreadPoolExecutor(16) as pool:  # the same 30 URLs through both at once
            added = Counter(pool.map(post, [(i, u) for u in URLS for i in (0, 1)]))
        record("the same 30 targets POSTed through two instances at once", "30 201 and 30 200, no 5xx",
               str(dict(added)), added == Counter({201: 30, 200: 30}))  # fmt: skip
        both = _until(lambda: _static(c1) == _static(c2) == set(URLS))
        record("targets added through two instances", "both list all 30 within 15 s",
               f"{len(_static(c1))} and {len(_static(c2))}", both)  # fmt: skip

        # each half removed through the instance that did not add it (before: 404, and the target stayed)
        c1.post("/v1/targets", json={"url": "http://10.7.1.1:8000/metrics"}, headers=A)
        assert _until(lambda: "http://10.7.1.1:8000/metrics" in _static(c2))
        removed = [c2.delete("/v1/targets", params={"url": u}, headers=A).status_code for u in URLS[:15]]
        removed.append(c2.delete("/v1/targets", params={"url": "http://10.7.1.1:8000/metrics"}, headers=A).status_code)
        gone = _until(lambda: _static(c1) == _static(c2) == set(URLS[15:]))
        listed = f"{len(_static(c1))} and {len(_static(c2))} listed"
        record("16 targets removed through the other instance", "16 204, both list the other 15 within 15 s",
               f"{dict(Counter(removed))}, {listed}", gone and set(removed) == {204})  # fmt: skip
        assert c1.delete("/v1/targets", params={"url": URLS[0]}, headers=A).status_code == 404  # gone from both
