"""What the HTTP API's connection bounds cost (kvpilot/runtime/http_server.py): keep-alive latency through the bounded
protocol against uvicorn's plain one on the same parser (httptools by default, what `kvpilot run` serves through; h11
with ``--protocol h11``), and the memory and descriptors of open connections that each hold part of
a request head (a slowloris crowd).

Each run starts a server process of its own on loopback (a two-byte answer, so that the protocol is most of the
time) and times sequential GETs on one keep-alive connection; runs alternate plain, bounded, bounded, plain, ... and
the last line is ``ratio: N.NNN``, the median over pairs of bounded p50 / plain p50.

    .venv/bin/python bench/http_limits.py [--pairs 6] [--requests 2000] [--protocol httptools|h11]
    .venv/bin/python bench/http_limits.py --memory 1000 [--protocol httptools|h11|plain|plain-httptools]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REQUEST = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def _serve(protocol: str, port_file: Path) -> None:
    import uvicorn

    from kvpilot.runtime.http_server import ApiServerConfig

    config: uvicorn.Config
    if protocol.startswith("plain"):  # uvicorn's own protocol: "plain" is h11's, "plain-httptools" httptools'
        http = "httptools" if protocol == "plain-httptools" else "h11"
        config = uvicorn.Config(_app, host="127.0.0.1", port=0, http=http, log_config=None, lifespan="off")
    else:
        config = ApiServerConfig(
            _app, host="127.0.0.1", port=0, header_timeout_s=60, max_connections=100_000,
            http="httptools" if protocol == "httptools" else "h11",
        )  # fmt: skip
    server = uvicorn.Server(config)

    async def main() -> None:
        serving = asyncio.create_task(server.serve())
        while not server.started:  # noqa: ASYNC110  (uvicorn offers no event for it)
            await asyncio.sleep(0.01)
        port_file.write_text(str(server.servers[0].sockets[0].getsockname()[1]))  # noqa: ASYNC240  (once, tiny)
        await serving

    asyncio.run(main())


def _start(protocol: str) -> tuple[subprocess.Popen[bytes], int]:
    port_file = Path(tempfile.mkdtemp()) / "port"
    proc = subprocess.Popen([sys.executable, __file__, "--serve", protocol, "--port-file", str(port_file)])
    while not (port_file.exists() and port_file.read_text()):
        time.sleep(0.05)
    return proc, int(port_file.read_text())


def p50_us(protocol: str, requests: int) -> float:
    proc, port = _start(protocol)
    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            took = []
            for _ in range(requests + 100):  # the first 100 warm up
                t0 = time.perf_counter()
                s.sendall(REQUEST)
                answer = b""
                while not answer.endswith(b"ok"):
                    answer += s.recv(4096)
                took.append(time.perf_counter() - t0)
        return statistics.median(took[100:]) * 1e6
    finally:
        proc.terminate()
        proc.wait()


def _rss_kib_and_fds(pid: int) -> tuple[int, int]:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def memory(protocol: str, connections: int) -> None:
    proc, port = _start(protocol)
    held = []
    try:
        time.sleep(0.5)
        rss0, fds0 = _rss_kib_and_fds(proc.pid)
        for _ in range(connections):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: aaaa")  # a head that never ends
            held.append(s)
        time.sleep(2)
        rss1, fds1 = _rss_kib_and_fds(proc.pid)
        print(f"{protocol}: {connections} connections, RSS +{rss1 - rss0} KiB ({(rss1 - rss0) / connections:.1f} KiB"
              f" each), descriptors +{fds1 - fds0}")  # fmt: skip
    finally:
        for s in held:
            s.close()
        proc.terminate()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--memory", type=int, metavar="CONNECTIONS", help="measure memory with this many open heads")
    ap.add_argument("--protocol", default="httptools", choices=("plain", "plain-httptools", "h11", "httptools"))
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--port-file", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        _serve(args.serve, args.port_file)
        return
    if args.memory:
        memory(args.protocol, args.memory)
        return
    plain = "plain-httptools" if args.protocol == "httptools" else "plain"  # the same parser, unbounded
    ratios = []
    for i in range(args.pairs):
        order = (plain, args.protocol) if i % 2 == 0 else (args.protocol, plain)
        p50 = {protocol: p50_us(protocol, args.requests) for protocol in order}
        ratios.append(p50[args.protocol] / p50[plain])
        print(f"pair {i + 1}: {plain} p50 {p50[plain]:.1f} us, bounded {args.protocol} {p50[args.protocol]:.1f} us")
    print(f"ratio: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
