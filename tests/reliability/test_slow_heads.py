"""Connections that never finish their request head, or too many at once, cannot pin the API: a head trickled one
byte a second, or never sent, is answered 408 and closed at `api.header_timeout_s` while /healthz stays fast, and
past `api.max_connections` a new connection is answered 503 at once while those open are served. Keep-alive clients
and a slow body within `api.request_timeout_s` are not affected. (uvicorn 0.55 alone held both kinds of connection
for ever, and accepted every connection: session 13's probe.) Each 408 and 503 is counted on kvpilot's own /metrics
(`kvpilot_api_request_head_timeouts_total`, `kvpilot_api_connections_refused_total`), beside the connections open
now (`kvpilot_api_connections_open`): before, operators saw them only as a missing scrape."""

from __future__ import annotations

import re
import socket
import threading
import time
from contextlib import ExitStack
from functools import partial

import httpx

from tests.helpers.poll import wait_for
from tests.reliability.conftest import Recorder, Store
from tests.reliability.harness import A, running

HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def _read_all(s: socket.socket) -> tuple[bytes, float]:
    """Everything until the server closes, and how long that took."""
    t0, data = time.monotonic(), b""
    while chunk := s.recv(4096):
        data += chunk
    return data, time.monotonic() - t0


def _status(answer: bytes) -> str:
    return answer.split(b"\r\n", 1)[0].decode(errors="replace")


def _exported(c: httpx.Client, name: str) -> float | None:
    """One unlabelled sample of kvpilot's own /metrics page (None: not on the page)."""
    m = re.search(rf"^{name} (\S+)$", c.get("/metrics").text, re.M)
    return float(m.group(1)) if m else None


def _one_answer(s: socket.socket) -> str:
    """Status line of one keep-alive answer (its body is read too; /healthz's is small)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(4096)
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(int(h.split(b":")[1]) for h in head.lower().split(b"\r\n") if h.startswith(b"content-length"))
    while len(body) < length:
        body += s.recv(4096)
    return _status(head)


def test_a_head_one_byte_a_second_is_cut_off_at_the_deadline_and_healthz_stays_fast(
    store: Store, record: Recorder
) -> None:
    deadline_s = 3.0
    served = running(store.url, header_timeout_s=deadline_s, request_timeout_s=8.0)
    with served as r, r.client() as c, ExitStack() as es:
        port = int(r.base.rsplit(":", 1)[1])
        slow = es.enter_context(socket.create_connection(("127.0.0.1", port), timeout=deadline_s + 5))
        silent = es.enter_context(socket.create_connection(("127.0.0.1", port), timeout=deadline_s + 5))
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 60
        timeouts_before = _exported(c, "kvpilot_api_request_head_timeouts_total")

        def slowloris() -> None:
            for byte in head:
                try:
                    slow.send(bytes([byte]))
                except OSError:
                    return
                time.sleep(1.0)

        threading.Thread(target=slowloris, daemon=True).start()
        health: list[tuple[int, float]] = []

        def probe_health() -> None:
            while len(health) < 40:
                t0 = time.monotonic()
                health.append((c.get("/healthz").status_code, time.monotonic() - t0))
                time.sleep(0.1)

        prober = threading.Thread(target=probe_health, daemon=True)
        prober.start()
        answer, took = _read_all(slow)
        quiet, quiet_took = _read_all(silent)
        prober.join(10)
        cut = _status(answer).endswith("408 Request Timeout") and deadline_s - 0.5 <= took <= deadline_s + 1
        record(f"a request head sent one byte a second (api.header_timeout_s {deadline_s:g})",
               f"408, closed at {deadline_s:g} s (+1)", f"{_status(answer)!r} after {took:.1f} s", cut)  # fmt: skip
        record("a connection that sends nothing", f"408, closed by {deadline_s + 1:g} s",
               f"{_status(quiet)!r} after {took + quiet_took:.1f} s",
               _status(quiet).endswith("408 Request Timeout") and took + quiet_took <= deadline_s + 1)  # fmt: skip
        timeouts = _exported(c, "kvpilot_api_request_head_timeouts_total")
        record("kvpilot_api_request_head_timeouts_total on /metrics", "0 before, 2 after the two 408s",
               f"{timeouts_before} before, {timeouts} after", (timeouts_before, timeouts) == (0, 2))  # fmt: skip
        worst = max(t for _, t in health)
        record("/healthz meanwhile (40 requests)", "200, max < 0.5 s",
               f"{sorted({s for s, _ in health})} in max {worst * 1000:.0f} ms",
               {s for s, _ in health} == {200} and worst < 0.5)  # fmt: skip

        # A keep-alive client and a slow body, each well past the head's deadline, within request_timeout_s.
        ka = es.enter_context(socket.create_connection(("127.0.0.1", port), timeout=5))
        t0, statuses = time.monotonic(), []
        while time.monotonic() - t0 < deadline_s + 1.5:
            ka.sendall(HEALTHZ)
            statuses.append(_one_answer(ka))
            time.sleep(0.5)
        record(f"one keep-alive connection, a request every 0.5 s for {deadline_s + 1.5:g} s", "all 200",
               f"{len(statuses)} answers: {sorted(set(statuses))}",
               set(statuses) == {"HTTP/1.1 200 OK"})  # fmt: skip
        body = b'{"node": "slow-body"}'
        ka.sendall(
            b"POST /v1/drains HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: {A['Authorization']}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        )
        t0 = time.monotonic()
        for i in range(0, len(body), 4):
            ka.sendall(body[i : i + 4])
            time.sleep((deadline_s + 1) / (len(body) / 4))
        created = _one_answer(ka)
        record(f"a POST body sent over {time.monotonic() - t0:.1f} s (request_timeout_s 8)", "201",
               repr(created), created.endswith("201 Created"))  # fmt: skip


def test_past_max_connections_a_new_one_is_refused_and_those_open_are_served(store: Store, record: Recorder) -> None:
    bound = 20
    with running(store.url, max_connections=bound) as r, ExitStack() as es:
        port = int(r.base.rsplit(":", 1)[1])
        with r.client() as c:  # its connection is closed before the bound is filled
            refused_before = _exported(c, "kvpilot_api_connections_refused_total")
        held = [es.enter_context(socket.create_connection(("127.0.0.1", port), timeout=5)) for _ in range(bound)]
        first = [_one_answer(s) for s in held if s.sendall(HEALTHZ) is None]  # all open and answered once
        extra = es.enter_context(socket.create_connection(("127.0.0.1", port), timeout=5))
        extra.sendall(HEALTHZ)
        refused, took = _read_all(extra)
        record(f"connection {bound + 1} (api.max_connections {bound})", "503 with Retry-After at once, closed",
               f"{_status(refused)!r} in {took * 1000:.0f} ms",
               _status(refused).endswith("503 Service Unavailable") and b"retry-after: 1" in refused
               and took < 1.5)  # fmt: skip
        again = [_one_answer(s) for s in held if s.sendall(HEALTHZ) is None]
        record(f"the {bound} open connections meanwhile", "all 200", f"{sorted(set(first + again))}",
               set(first + again) == {"HTTP/1.1 200 OK"} and len(again) == bound)  # fmt: skip
        held.pop().close()
        open_gauge = partial(r.service.registry.get_sample_value, "kvpilot_api_connections_open")
        wait_for(lambda: open_gauge() == bound - 1, what="the closed connection left the server's count")
        with r.client() as c:
            after = c.get("/healthz").status_code
            refused_after = _exported(c, "kvpilot_api_connections_refused_total")
            open_now = _exported(c, "kvpilot_api_connections_open")
        record("a new connection once one has closed", "200", str(after), after == 200)
        record("kvpilot_api_connections_refused_total on /metrics", "0 before, 1 after the 503",
               f"{refused_before} before, {refused_after} after",
               (refused_before, refused_after) == (0, 1))  # fmt: skip
        record("kvpilot_api_connections_open on /metrics", f"{bound}: {bound - 1} held and the page's own",
               str(open_now), open_now == bound)  # fmt: skip
