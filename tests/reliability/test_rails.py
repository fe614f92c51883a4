"""The drain rails under 50 parallel requests over loopback: one live action per node, approvals never beyond
drains.max_concurrent, one winner when many approve or cancel the same drain, each audited once."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.reliability.conftest import Recorder, Store
from tests.reliability.harness import A, R, running

N = 50


def _parallel(base: str, calls: list[tuple[str, dict[str, object]]]) -> list[int]:
    """POST every (path, body) at once, each from its own connection; the status codes."""

    def one(call: tuple[str, dict[str, object]]) -> int:
        with httpx.Client(base_url=base, timeout=60, trust_env=False) as c:
            return c.post(call[0], json=call[1], headers=A).status_code

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(one, calls))


def test_rails_hold_under_50_parallel_requests(store: Store, record: Recorder) -> None:
    with running(store.url, max_concurrent=1, request_timeout_s=10.0) as r, r.client() as c:
        # 50 requests for one node: one live action.
        codes = Counter(_parallel(r.base, [("/v1/drains", {"node": "same-node"})] * N))
        live = c.get("/v1/drains", params={"node": "same-node"}, headers=R).json()["total"]
        record(f"{N} parallel POST /v1/drains, one node", "1 live action, 0 x 5xx",
               f"{live} action(s), codes {dict(codes)}", live == 1 and not any(k >= 500 for k in codes))  # fmt: skip
        action = c.get("/v1/drains", params={"node": "same-node"}, headers=R).json()["items"][0]["id"]

        # 50 approvals of that one drain: one 200, one audit event.
        codes = Counter(_parallel(r.base, [(f"/v1/drains/{action}/approve", {})] * N))
        events = c.get(f"/v1/drains/{action}", headers=R).json()["events"]
        approvals = sum(e["to_state"] == "approved" for e in events)
        record(f"{N} parallel approvals, one drain", "1 x 200, 1 audit event",
               f"{codes[200]} x 200, {approvals} event(s), codes {dict(codes)}",
               codes[200] == 1 and approvals == 1 and not any(k >= 500 for k in codes))  # fmt: skip

        # 50 drains on different nodes approved at once with max_concurrent = 1 (one already approved): none.
        created = Counter(_parallel(r.base, [("/v1/drains", {"node": f"node-{i}"}) for i in range(N)]))
        assert created == {201: N}
        listed = c.get("/v1/drains", params={"state": "requested", "limit": 1000}, headers=R).json()["items"]
        ids = sorted(d["id"] for d in listed if d["node"].startswith("node-"))
        codes = Counter(_parallel(r.base, [(f"/v1/drains/{i}/approve", {}) for i in ids]))
        active = sum(
            c.get("/v1/drains", params={"state": s, "limit": 1000}, headers=R).json()["total"]
            for s in ("approved", "executing")
        )
        record(f"{N} parallel approvals, {N} nodes, max 1", "<= 1 approved or executing",
               f"{active} active, codes {dict(codes)}", active <= 1 and not any(k >= 500 for k in codes))  # fmt: skip

        # Cancel the approved one: the slot frees, then 50 approvals race for it: exactly one wins.
        assert c.post(f"/v1/drains/{action}/cancel", json={}, headers=A).status_code == 200
        codes = Counter(_parallel(r.base, [(f"/v1/drains/{i}/approve", {}) for i in ids]))
        active = sum(
            c.get("/v1/drains", params={"state": s, "limit": 1000}, headers=R).json()["total"]
            for s in ("approved", "executing")
        )
        record(f"{N} approvals racing for 1 free slot", "exactly 1 x 200",
               f"{codes[200]} x 200, {active} active", codes[200] == 1 and active == 1)  # fmt: skip

        # 50 parallel cancels of one drain: one 200, one audit event.
        codes = Counter(_parallel(r.base, [(f"/v1/drains/{ids[0]}/cancel", {})] * N))
        events = c.get(f"/v1/drains/{ids[0]}", headers=R).json()["events"]
        cancels = sum(e["to_state"] == "cancelled" for e in events)
        record(f"{N} parallel cancels, one drain", "1 x 200, 1 audit event",
               f"{codes[200]} x 200, {cancels} event(s)", codes[200] == 1 and cancels == 1)  # fmt: skip
